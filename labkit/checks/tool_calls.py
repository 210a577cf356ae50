"""``tool_calls``: two parallel tool calls, streamed interleaved, keep their own ``index`` and
``id`` through the proxy, and the SDK's ``.stream()`` helper assembles both with arguments that
parse as JSON, the same arguments the upstream generated.

A tool call streams as deltas: the first names the call (``index``, ``id``, ``type``, the
function's name), the rest carry fragments of its JSON arguments and only the ``index``. When
a model calls two tools at once the fragments of both may take turns on the wire; the client
puts each fragment on the call with the same ``index``. A proxy that renumbers or drops the
``index`` (BerriAI/litellm#21331: every delta re-numbered to 0) glues both calls into one:
one call, its id and name run together, arguments that are not JSON.

Experiment: one request offering two tools, answered with two calls whose deltas interleave
(``interleave_tools``), read with the real ``openai`` SDK's ``chat.completions.stream()``
helper; the same request (same seed) asked of the upstream directly, unstreamed, says what the
calls should be. Pass: the assembled message has both calls, in order, with distinct ids, and
each call's arguments parse as JSON and equal the upstream's. No time is measured. ``observe``
asks both, ``judge`` decides (tested in process: tests/checks/test_judges_tool_calls.py). Each
request is given up after LIMIT_S, stretched with the run's ``Budget``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from labkit.checks.context import PROMPT, CheckContext, Outcome
from labkit.checks.machine import Budget
from labkit.checks.result import CheckResult

ID = "tool_calls"
STEP = "09_tool_calls_and_partial_json"
SUMMARY = "parallel tool calls keep their index and id; the SDK assembles both"
BUDGET_S = 10.0
MOCK_ONLY = "needs parallel tool-call deltas on demand, which only the mock sends"
SEED = 5301
SCENARIO = {"ttft_ms": 100, "tps": 100, "interleave_tools": True}
LIMIT_S = 8.0
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    },
]
MESSAGES = [{"role": "user", "content": PROMPT}]

result = Outcome(ID, STEP)

Call = tuple[str, str, Any]  # (id, name, parsed arguments, or the raw text if not JSON)


def _calls(message: dict[str, Any]) -> list[Call]:
    """A message's tool calls, their arguments parsed where they are JSON."""
    calls: list[Call] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        try:
            parsed: Any = json.loads(arguments)
        except ValueError:
            parsed = arguments
        calls.append((str(call.get("id")), str(function.get("name")), parsed))
    return calls


async def _expected(ctx: CheckContext) -> list[Call]:
    """The calls the upstream makes for this request, asked of it directly and unstreamed."""
    limit = ctx.budget.stretch(LIMIT_S)  # half a CPU: twice as long
    body = {"model": "lab-model", "messages": MESSAGES, "tools": TOOLS, "mock": {"seed": SEED}}
    async with httpx.AsyncClient(timeout=limit) as client:
        response = await client.post(f"{ctx.upstream_url}/v1/chat/completions", json=body)
    response.raise_for_status()
    return _calls(response.json()["choices"][0]["message"])


async def _streamed(ctx: CheckContext) -> tuple[str, list[Call]]:
    """How the SDK's stream helper ended, and the calls it assembled."""
    limit = ctx.budget.stretch(LIMIT_S)  # half a CPU: twice as long
    import openai  # here, not at the top: importing labkit stays quick

    client = openai.AsyncOpenAI(
        base_url=ctx.sdk_base_url, api_key="lab-key", max_retries=0, timeout=limit
    )
    try:
        async with asyncio.timeout(limit):
            async with client.chat.completions.stream(
                model="lab-model",
                messages=MESSAGES,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                extra_body={"mock": {**SCENARIO, "seed": SEED}},
            ) as stream:
                completion = await stream.get_final_completion()
    except TimeoutError:
        return "hung", []
    except (openai.APIError, ValueError) as exc:
        return type(exc).__name__, []
    finally:
        await client.close()
    return "finished", _calls(completion.choices[0].message.model_dump())


@dataclass(frozen=True)
class Observed:
    """The calls the upstream makes for the request (asked of it directly), how the SDK's stream
    helper ended through the proxy, and the calls it assembled."""

    expected: tuple[Call, ...]
    ending: str
    calls: tuple[Call, ...]


async def observe(ctx: CheckContext) -> Observed:
    expected, (ending, calls) = await asyncio.gather(_expected(ctx), _streamed(ctx))
    return Observed(tuple(expected), ending, tuple(calls))


def judge(observed: Observed, budget: Budget) -> CheckResult:
    """Pass: the SDK finished, and assembled the upstream's calls in order (names and parsed
    arguments equal) with distinct ids."""
    expected, ending, calls = observed.expected, observed.ending, observed.calls
    names = [name for _, name, _ in calls]
    evidence: dict[str, Any] = {
        "sdk_ending": ending,
        "calls_expected": len(expected),
        "calls_assembled": len(calls),
        "names": ",".join(names) or None,
        "distinct_ids": len({call_id for call_id, _, _ in calls}),
        "arguments_parse": sum(1 for *_, arguments in calls if isinstance(arguments, dict)),
    }
    wanted = [(name, arguments) for _, name, arguments in expected]
    if ending == "finished" and [(n, a) for _, n, a in calls] == wanted:
        if len({call_id for call_id, _, _ in calls}) == len(calls):
            return result.passed(
                "parallel tool calls keep their own index and id; the SDK assembles both",
                evidence,
            )
    if ending == "hung":
        verdict = "the stream hung while carrying parallel tool calls"
    elif ending != "finished":
        verdict = "the SDK could not read a stream carrying parallel tool calls"
    elif len(calls) < len(expected):
        verdict = "parallel tool calls were merged into fewer calls"
    elif evidence["arguments_parse"] < len(calls):
        verdict = "a tool call's arguments do not parse as JSON after the proxy"
    elif evidence["distinct_ids"] < len(calls):
        verdict = "parallel tool calls lost their distinct ids"
    else:
        verdict = "the assembled tool calls differ from the upstream's"
    return result.failed(
        verdict,
        evidence,
        "pass each tool-call delta on with its own index (and the id of its first delta): "
        "the client files every fragment under its index, and parallel calls' fragments "
        "interleave.",
    )
