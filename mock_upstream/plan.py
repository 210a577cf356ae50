"""What the mock will say to one request, decided before the first byte is sent.

Each API module turns its request body into a :class:`Prompt`; :func:`build_plan` turns a
prompt and a scenario into a :class:`Plan`: a list of parts (one text part, or one part per
tool call), each cut into chunks of one to three tokens. Everything is decided up front (how
many tokens, why the answer ends, the tool calls' arguments) but the words of a text part,
which :class:`Prose` makes as they are sent: the same words, at no cost before the first byte.

Tool calls: when the request offers tools and does not forbid them (``tool_choice`` "none"),
the mock calls tools instead of writing text. A choice that names one tool calls that tool;
otherwise it calls every offered tool once, in order (parallel calls), or only the first
when parallel calls are turned off. Arguments are made up from each tool's JSON schema.

The plan also fixes the send order (:meth:`Plan.steps`): part after part, or, with
``interleave_tools``, the tool calls' chunks taken in turn (call 0, call 1, call 0, ...), as
parallel tool calls arrive from servers that generate them side by side.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Literal, NamedTuple

from mock_upstream.ids import new_id
from mock_upstream.scenario import Scenario
from mock_upstream.text import (
    chunk_sizes,
    filler_tokens,
    iter_chunk_sizes,
    iter_prose_tokens,
    phrase,
    rng_for,
    separator_tokens,
)
from mock_upstream.tokenizer import count_tokens, tokenize

FinishReason = Literal["stop", "length", "tool_calls", "refusal"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the request offers: its name and JSON-schema parameters."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Prompt:
    """The API-neutral part of a request that decides the answer."""

    text: str
    model: str
    seed: int | None = None
    max_tokens: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None  # "auto", "none", "required" or a tool's name
    parallel_tool_calls: bool = True

    @property
    def prompt_tokens(self) -> int:
        return count_tokens(self.text)


class Chunk(NamedTuple):
    """Tokens sent together in one frame. (A named tuple: a long answer has hundreds of
    thousands of them, made before its first byte, and a tuple is made fastest.)"""

    tokens: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.tokens)


@dataclass(frozen=True)
class Prose:
    """The chunks of a text part, made as they are sent, so a long answer starts at once (the
    backpressure check asks for 400,000 tokens: made whole before the first was sent, they
    would hold up its first token by about a second).

    ``count`` tokens of the answer (``filler`` of them blank, then ``separators`` of them
    ellipses and Unicode line ends) are cut into chunks; ``limit``
    of them are sent (fewer when ``max_tokens`` cuts the answer short). A shorter limit sends a
    prefix of the same chunks, the last one cut: an answer cut by ``max_tokens`` is the start
    of the whole one."""

    prompt: str
    seed: int  # the words'
    chunk_seed: int  # the chunk sizes'
    count: int
    limit: int
    filler: int = 0
    salt: str = ""
    separators: int = 0

    def tokens(self) -> Iterator[str]:
        filler = min(self.filler, max(self.count - 2, 0))
        separators = min(self.separators, max(self.count - 2 - filler, 0))
        yield from filler_tokens(filler)
        yield from separator_tokens(separators)
        yield from iter_prose_tokens(self.prompt, self.seed, self.count - filler - separators)

    def __iter__(self) -> Iterator[Chunk]:
        tokens = self.tokens()
        for size in iter_chunk_sizes(self.prompt + self.salt, self.chunk_seed, self.limit):
            yield Chunk(tuple(islice(tokens, size)))


@dataclass(frozen=True)
class Part:
    """One piece of output: text, one tool call (whose chunks are its JSON arguments), or an
    extended-thinking block (Anthropic; ``thinking_tokens``). Text and thinking are
    :class:`Prose`, made as they are sent; a tool call's few chunks are made at once."""

    kind: Literal["text", "tool_call", "thinking"]
    chunks: tuple[Chunk, ...] | Prose
    name: str = ""
    call_id: str = ""
    tool_index: int = 0

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def token_count(self) -> int:
        if isinstance(self.chunks, Prose):
            return self.chunks.limit
        return sum(len(c.tokens) for c in self.chunks)


@dataclass(frozen=True)
class Plan:
    """The whole answer: parts in order, why it ends, and the prompt's token count."""

    parts: tuple[Part, ...]
    finish: FinishReason
    prompt_tokens: int
    model: str
    interleave: bool = False

    @property
    def completion_tokens(self) -> int:
        return sum(p.token_count for p in self.parts)

    def steps(self) -> Iterator[tuple[int, Chunk, bool]]:
        """``(part index, chunk, whether it is the part's last)`` in the order they are sent
        (lazily: a long answer has hundreds of thousands of chunks)."""
        if not self.interleave:
            for i, part in enumerate(self.parts):
                chunks = iter(part.chunks)
                chunk = next(chunks, None)
                while chunk is not None:
                    following = next(chunks, None)
                    yield i, chunk, following is None
                    chunk = following
            return
        calls = [p.chunks for p in self.parts if isinstance(p.chunks, tuple)]
        longest = max((len(c) for c in calls), default=0)
        for n in range(longest):
            for i, call in enumerate(calls):
                if n < len(call):
                    yield i, call[n], n == len(call) - 1


def _chunked(tokens: Sequence[str], prompt: str, seed: int, salt: str) -> tuple[Chunk, ...]:
    chunks: list[Chunk] = []
    at = 0
    for size in chunk_sizes(prompt + salt, seed, len(tokens)):
        chunks.append(Chunk(tuple(tokens[at : at + size])))
        at += size
    return tuple(chunks)


def _fake_value(schema: Mapping[str, Any], rng: random.Random) -> Any:
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 1)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items")
        return [_fake_value(items if isinstance(items, Mapping) else {}, rng)]
    if kind == "object":
        return fake_arguments(schema, rng)
    return phrase(rng)


def fake_arguments(schema: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """Made-up arguments that fit a JSON schema's ``properties`` (all of them, in order)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {
        str(name): _fake_value(sub if isinstance(sub, Mapping) else {}, rng)
        for name, sub in properties.items()
    }


def _chosen_tools(prompt: Prompt) -> tuple[ToolSpec, ...]:
    if not prompt.tools or prompt.tool_choice == "none":
        return ()
    if prompt.tool_choice not in (None, "auto", "required"):
        named = tuple(t for t in prompt.tools if t.name == prompt.tool_choice)
        return named or prompt.tools[:1]
    return prompt.tools if prompt.parallel_tool_calls else prompt.tools[:1]


def _truncate(parts: list[Part], limit: int) -> list[Part]:
    kept: list[Part] = []
    left = limit
    for part in parts:
        if left <= 0:
            break
        if isinstance(part.chunks, Prose):
            cut = min(part.chunks.limit, left)
            kept.append(replace(part, chunks=replace(part.chunks, limit=cut)))
            left -= cut
            continue
        chunks: list[Chunk] = []
        for chunk in part.chunks:
            if left <= 0:
                break
            chunks.append(Chunk(chunk.tokens[:left]))
            left -= len(chunks[-1].tokens)
        kept.append(replace(part, chunks=tuple(chunks)))
    return kept


def _text(prompt: Prompt, seed: int, count: int, scenario: Scenario, salt: str) -> Prose:
    """``count`` tokens of text, the first ``filler_tokens`` of them empty and the next
    ``separator_tokens`` ellipses and line ends; at least two are prose (a word and its full
    stop), so the answer always says something."""
    return Prose(
        prompt.text,
        seed,
        seed,
        count,
        count,
        scenario.filler_tokens,
        salt,
        scenario.separator_tokens,
    )


def build_plan(prompt: Prompt, scenario: Scenario, *, call_id_prefix: str = "call_") -> Plan:
    """Decide the whole answer for ``prompt`` under ``scenario`` (deterministic but for ids).

    Parts in order: a thinking block (``thinking_tokens``), then the tool calls, each after a
    text preamble if ``preamble_tokens`` asks for one, or else the text answer."""
    seed = scenario.seed if scenario.seed is not None else (prompt.seed or 0)
    parts: list[Part] = []
    for index, tool in enumerate(_chosen_tools(prompt)):
        rng = rng_for(prompt.text, seed, salt=f"tool:{index}:{tool.name}")
        arguments = json.dumps(fake_arguments(tool.parameters, rng))
        chunks = _chunked(tokenize(arguments), prompt.text, seed, f"tool:{index}")
        parts.append(Part("tool_call", chunks, tool.name, new_id(call_id_prefix), index))
    if not parts:
        parts.append(Part("text", _text(prompt, seed, scenario.tokens, scenario, "")))
    elif scenario.preamble_tokens:
        preamble = _text(prompt, seed, scenario.preamble_tokens, scenario, "preamble")
        parts.insert(0, Part("text", preamble))
    if scenario.thinking_tokens:
        count = scenario.thinking_tokens
        thoughts = Prose(prompt.text, seed + 1, seed, count, count, salt="thinking")
        parts.insert(0, Part("thinking", thoughts))
    calls = any(p.kind == "tool_call" for p in parts)
    finish: FinishReason = "tool_calls" if calls else "stop"
    total = sum(p.token_count for p in parts)
    if prompt.max_tokens is not None and prompt.max_tokens < total:
        parts = _truncate(parts, prompt.max_tokens)
        finish = "length"
    interleave = scenario.interleave_tools and all(p.kind == "tool_call" for p in parts)
    return Plan(tuple(parts), finish, prompt.prompt_tokens, prompt.model, interleave)
