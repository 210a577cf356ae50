"""What the mock will say to one request, decided before the first byte is sent.

Each API module turns its request body into a :class:`Prompt`; :func:`build_plan` turns a
prompt and a scenario into a :class:`Plan`: a list of parts (one text part, or one part per
tool call), each cut into chunks of one to three tokens.

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
from dataclasses import dataclass, field
from typing import Any, Literal

from mock_upstream.ids import new_id
from mock_upstream.scenario import Scenario
from mock_upstream.text import chunk_sizes, filler_tokens, phrase, prose_tokens, rng_for
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


@dataclass(frozen=True)
class Chunk:
    """Tokens sent together in one frame."""

    tokens: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.tokens)


@dataclass(frozen=True)
class Part:
    """One piece of output: text, one tool call (whose chunks are its JSON arguments), or an
    extended-thinking block (Anthropic; ``thinking_tokens``)."""

    kind: Literal["text", "tool_call", "thinking"]
    chunks: tuple[Chunk, ...]
    name: str = ""
    call_id: str = ""
    tool_index: int = 0

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def token_count(self) -> int:
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

    def steps(self) -> Iterator[tuple[int, int, Chunk]]:
        """``(part index, chunk number within the part, chunk)`` in the order they are sent
        (lazily: a long answer has hundreds of thousands of chunks)."""
        if not self.interleave:
            for i, part in enumerate(self.parts):
                for n, chunk in enumerate(part.chunks):
                    yield i, n, chunk
            return
        longest = max((len(p.chunks) for p in self.parts), default=0)
        for n in range(longest):
            for i, part in enumerate(self.parts):
                if n < len(part.chunks):
                    yield i, n, part.chunks[n]


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
        chunks: list[Chunk] = []
        for chunk in part.chunks:
            if left <= 0:
                break
            chunks.append(Chunk(chunk.tokens[:left]))
            left -= len(chunks[-1].tokens)
        kept.append(Part(part.kind, tuple(chunks), part.name, part.call_id, part.tool_index))
    return kept


def _text_tokens(prompt: Prompt, seed: int, count: int, filler: int) -> list[str]:
    """``count`` tokens of text, the first ``filler`` of them empty; at least two are prose (a
    word and its full stop), so the answer always says something."""
    filler = min(filler, max(count - 2, 0))
    return filler_tokens(filler) + prose_tokens(prompt.text, seed, count - filler)


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
        tokens = _text_tokens(prompt, seed, scenario.tokens, scenario.filler_tokens)
        parts.append(Part("text", _chunked(tokens, prompt.text, seed, "")))
    elif scenario.preamble_tokens:
        tokens = _text_tokens(prompt, seed, scenario.preamble_tokens, scenario.filler_tokens)
        parts.insert(0, Part("text", _chunked(tokens, prompt.text, seed, "preamble")))
    if scenario.thinking_tokens:
        thoughts = prose_tokens(prompt.text, seed + 1, scenario.thinking_tokens)
        parts.insert(0, Part("thinking", _chunked(thoughts, prompt.text, seed, "thinking")))
    calls = any(p.kind == "tool_call" for p in parts)
    finish: FinishReason = "tool_calls" if calls else "stop"
    total = sum(p.token_count for p in parts)
    if prompt.max_tokens is not None and prompt.max_tokens < total:
        parts = _truncate(parts, prompt.max_tokens)
        finish = "length"
    interleave = scenario.interleave_tools and all(p.kind == "tool_call" for p in parts)
    return Plan(tuple(parts), finish, prompt.prompt_tokens, prompt.model, interleave)
