"""Figures and code in the notebooks' prose are what the arithmetic, the mock and the SDKs say.

Three kinds of claim drifted from the truth (issue 45): a speed-up quoted from a wrong division
("60×" for a 1,500-token answer at 80 tokens/s), sizes quoted without measuring ("a 500 MB buffer
per request"; notebook 10's own "16 MB" for an answer that is 24 MB of the mock's events), a
stream event that does not exist (``response.function_call.in_progress``), and SSE readers in a
worked answer and a given cell that split on ``\\n\\n`` only and stripped every space. Each test
reads the claim out of the notebook and checks it against the thing it describes: the
arithmetic, the mock's own bytes, the openai SDK's list of events, and the SSE standard's own
line rules run through the notebook's code.
"""

from __future__ import annotations

import asyncio
import json
import re
import typing
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from openai.types.responses import ResponseStreamEvent

from labkit.messages_api import anthropic_events
from mock_upstream import create_app

ROOT = Path(__file__).resolve().parents[2]


@cache
def _notebook(prefix: str) -> nbformat.NotebookNode:
    (path,) = (ROOT / "notebooks").glob(f"{prefix}_*.ipynb")
    notebook: nbformat.NotebookNode = nbformat.read(path, as_version=4)
    return notebook


def prose(prefix: str) -> str:
    """The notebook's markdown, each cell's lines joined with spaces (a figure may wrap)."""
    cells = _notebook(prefix).cells
    return "\n\n".join(" ".join(c.source.split()) for c in cells if c.cell_type == "markdown")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_01s_speed_up_is_the_arithmetic_of_its_own_figures() -> None:
    found = re.search(
        r"A ([\d,]+)-token answer at (\d+) tokens/s takes ([\d.]+) s to write; with a ([\d.]+) s "
        r"first token the user sees text about (\d+) times sooner",
        prose("01"),
    )
    assert found, "notebook 01 no longer states the speed-up this test checks"
    tokens, rate, seconds, first, times = map(_number, found.groups())
    assert seconds == tokens / rate
    assert times == round(seconds / first)


MOCK_BYTES_SAMPLE = 15_000  # tokens streamed to measure the mock's bytes per token (0.4 s)


@cache
def mock_bytes_per_token() -> float:
    """Bytes of SSE the mock sends per token of a long unpaced answer, as notebook 10 asks it."""

    async def body() -> bytes:
        transport = httpx.ASGITransport(app=create_app())  # it buffers: only the size matters
        async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
            request = {
                "model": "lab-model",
                "messages": [{"role": "user", "content": "Explain how a streaming proxy works."}],
                "stream": True,
                "mock": {"ttft_ms": 0, "tps": 100_000, "tokens": MOCK_BYTES_SAMPLE, "seed": 901},
            }
            return (await client.post("/v1/chat/completions", json=request)).content

    return len(asyncio.run(body())) / MOCK_BYTES_SAMPLE


@pytest.mark.parametrize(
    "pattern",
    [
        r"\(([\d,]+) tokens, about (\d+) MB of events",
        r"a ([\d,]+)-token answer is about (\d+) MB of events",
    ],
)
def test_10s_sizes_of_a_long_answer_are_the_mocks(pattern: str) -> None:
    found = re.search(pattern, prose("10"))
    assert found, f"notebook 10 no longer says {pattern!r}"
    tokens, megabytes = map(_number, found.groups())
    measured = tokens * mock_bytes_per_token() / 1e6
    assert abs(measured - megabytes) <= 0.1 * measured, (
        f"notebook 10 says {tokens:,.0f} tokens are about {megabytes:g} MB of events; the mock "
        f"sends {measured:.1f} MB"
    )


def test_10s_correction_of_the_500_mb_figure_is_its_own_arithmetic() -> None:
    found = re.search(
        r"about (\d+) MB of events; you may meet the figure \"a (\d+) MB buffer per request\" for "
        r"it, some (\d+) times too much",
        prose("10"),
    )
    assert found, "notebook 10 no longer corrects the 500 MB figure"
    size, quoted, times = map(_number, found.groups())
    assert abs(quoted / size - times) < 0.1 * times


def _responses_events() -> set[str]:
    (union,) = typing.get_args(ResponseStreamEvent)[:1]
    return {
        typing.get_args(member.model_fields["type"].annotation)[0]
        for member in typing.get_args(union)
    }


def test_08s_responses_events_are_the_sdks_and_the_one_it_denies_is_not() -> None:
    named = set(re.findall(r"`(response\.[a-z_.]+)`", prose("08")))
    assert "response.function_call.in_progress" in named
    events = _responses_events()
    assert "response.function_call.in_progress" not in events
    assert named - {"response.function_call.in_progress"} <= events
    assert len(named) >= 8, named


SSE_CASES = [  # (line end, what follows "data:") -> the data the standard gives
    ("\n", " "),
    ("\r\n", " "),
    ("\r", " "),
    ("\n", ""),
]


def _chat_body(line_end: str, after_colon: str, contents: list[str]) -> bytes:
    frames = [{"choices": [{"delta": {"content": text}}]} for text in contents]
    events = [f"data:{after_colon}{json.dumps(frame, ensure_ascii=False)}" for frame in frames]
    events.append(f"data:{after_colon}[DONE]")
    return "".join(event + line_end * 2 for event in events).encode()


def _worked_parser() -> Callable[[Any], str]:
    """Notebook 01's worked answer 5, as written in its fenced block."""
    cell = next(c for c in _notebook("01").cells if "def parse(slices)" in c.source)
    (block,) = re.findall(r"```python\n(.*?)```", cell.source, re.S)
    namespace: dict[str, Any] = {}
    exec(compile(_dedent(block), "01 worked answer 5", "exec"), namespace)
    parse: Callable[[Any], str] = namespace["parse"]
    return parse


def _dedent(block: str) -> str:
    return "\n".join(line[3:] if line.startswith("   ") else line for line in block.split("\n"))


@pytest.mark.parametrize(("line_end", "after_colon"), SSE_CASES)
@pytest.mark.parametrize("slice_size", [1, 7, 1_000_000])
def test_01s_worked_sse_parser_reads_every_line_end_in_any_slices(
    line_end: str, after_colon: str, slice_size: int
) -> None:
    contents = ["Héllo", " wörld", " 👋", "  two spaces"]
    body = _chat_body(line_end, after_colon, contents)
    slices = (body[i : i + slice_size] for i in range(0, len(body), slice_size))
    assert _worked_parser()(slices) == "".join(contents)


def _anthropic_events() -> Callable[[httpx.Response], AsyncIterator[tuple[str, Any]]]:
    """Notebook 08's given ``anthropic_events``: the one it imports from labkit."""
    cell = next(c for c in _notebook("08").cells if "anthropic_events," in c.source)
    assert "from labkit import" in cell.source, "notebook 08 no longer imports it from labkit"
    return anthropic_events


@pytest.mark.parametrize(("line_end", "after_colon"), SSE_CASES)
def test_08s_anthropic_events_reads_every_line_end_and_one_space(
    line_end: str, after_colon: str
) -> None:
    frames = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1"}}),
        ("content_block_delta", {"type": "content_block_delta", "delta": {"text": " wörld"}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = "".join(
        f"event:{after_colon}{name}{line_end}data:{after_colon}{json.dumps(data)}{line_end * 2}"
        for name, data in frames
    )
    body = f":{after_colon}a comment{line_end * 2}" + body

    async def read() -> list[tuple[str, Any]]:
        response = httpx.Response(200, content=body.encode())
        return [event async for event in _anthropic_events()(response)]

    assert asyncio.run(read()) == frames


def test_the_standard_removes_one_space_only() -> None:
    # A value that starts with two spaces keeps one: both readers follow the rule, not strip().
    body = b'data:  {"choices": [{"delta": {"content": "x"}}]}\n\ndata: [DONE]\n\n'
    assert _worked_parser()([body]) == "x"  # " {...}" is still JSON
    two = b'event:  message_stop\ndata: {"type": "message_stop"}\n\n'

    async def read() -> list[tuple[str, Any]]:
        return [event async for event in _anthropic_events()(httpx.Response(200, content=two))]

    assert asyncio.run(read()) == [(" message_stop", {"type": "message_stop"})]
