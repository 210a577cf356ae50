"""One request, start to finish, the same for every API.

Read the JSON body, resolve the scenario (header and ``mock`` field), let the API module
parse the rest, open a record, answer an injected ``status`` at once, otherwise wait for a slot
if the scenario has ``slots`` (:mod:`mock_upstream.slots`), plan the answer and stream it
(generation running ahead of a slow reader, or in step with it under
``pause_on_backpressure``: :mod:`mock_upstream.generation`), or collect it whole for a unary
response::

    body --> scenario --> record --> [status: error now]
                                 --> [slots: queued, no headers yet] --admitted--> clock starts
                                 --> stream: StreamingResponse (Starlette watches the client)
                                 --> unary: collect the whole answer (we watch the client)

Everything the route function awaits before it returns a response is watched for a client
that leaves (:func:`mock_upstream.hangup.while_connected`), as vLLM's server watches it:
a request dropped while it waits for a slot ends ``cancelled`` without ever running, and a
unary answer whose client leaves is cancelled at once (``cancelled``, no token generated after
the disconnect). Unary answers take as long as the stream would. In unary mode ``error_after``,
``drop_after`` and ``end_after`` answer a provider-shaped 500 once their tokens are
"generated"; ``malformed_after`` is ignored. A successful unary answer is gzip-encoded when the
request accepts gzip (:mod:`mock_upstream.encoding`); a stream never is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from mock_upstream.bodies import read_json
from mock_upstream.encoding import whole_answer
from mock_upstream.errors import ApiError, status_error
from mock_upstream.events import Event
from mock_upstream.generation import generation_for
from mock_upstream.hangup import ClientLeft, while_connected
from mock_upstream.ids import new_id
from mock_upstream.pacing import Clock, faults_for, play
from mock_upstream.plan import Plan, Prompt, build_plan
from mock_upstream.records import Api, Recorder, RequestRecord
from mock_upstream.scenario import (
    BODY_FIELD,
    HEADER,
    ONLY_ON,
    WIRE_VARIANTS,
    Scenario,
    ScenarioError,
    resolve,
)
from mock_upstream.slots import Slots
from mock_upstream.stream import (
    Outcome,
    RecordedStreamingResponse,
    Wire,
    collect,
    generate,
    vllm_reason,
)

#: What the route returns for a client that has gone (nginx's "client closed request"). Nobody
#: receives it: uvicorn sends nothing on a closed connection.
CLIENT_CLOSED_REQUEST: Final = 499


@dataclass(frozen=True)
class Parsed:
    """What an API module reads from its request body."""

    prompt: Prompt
    stream: bool
    include_usage: bool = False
    #: Responses only: generate to the end whatever the readers do, and keep the events.
    background: bool = False


@dataclass(frozen=True)
class ApiSpec:
    """How one API names and formats things."""

    name: Api
    id_prefix: str
    call_id_prefix: str
    parse: Callable[[dict[str, Any]], Parsed]
    wire: Callable[[str, Plan, Parsed, Scenario], Wire]
    #: The scenario's wire-variant keys this API has; the others are a 400 here.
    variants: frozenset[str] = frozenset({"comment_every_ms"})


@dataclass
class MockState:
    """Everything one app keeps (``app.state.mock``)."""

    defaults: Scenario
    recorder: Recorder
    slots: Slots = field(default_factory=Slots)


#: How the error for a key sent to the wrong route names the route that has it.
_ROUTES: dict[str, tuple[str, str]] = {
    "chat": ("Chat Completions", "/v1/chat/completions"),
    "responses": ("Responses", "/v1/responses"),
    "messages": ("Anthropic Messages", "/v1/messages"),
}


def check_variants(scenario: Scenario, api: ApiSpec) -> None:
    """A wire variant that ``api`` does not have is a 400 naming the route that has it."""
    unsupported = sorted(set(scenario.changed()) & WIRE_VARIANTS - api.variants)
    if unsupported:
        key = unsupported[0]
        wire, route = _ROUTES[ONLY_ON.get(key, "chat")]
        raise ScenarioError(
            "scenario",
            key,
            f"{key} changes the {wire} wire only: send it to {route}, "
            f"or leave it out of requests to /v1/{api.name}",
        )


async def admit(
    request: Request, state: MockState, scenario: Scenario, record: RequestRecord
) -> bool:
    """Give the request a slot if its scenario has ``slots``, waiting (``queued``) for one if
    none is free; the slot goes back when the record ends. True if it waited: its clock starts
    now. A client that leaves while it waits raises :class:`ClientLeft`."""
    if scenario.slots is None:
        return False
    pool = state.slots.pool(scenario.slots)
    waited = not pool.try_take()
    if waited:
        state.recorder.queue(record)
        await while_connected(request.receive, pool.take())
        state.recorder.admit(record)
    state.recorder.when_finished(record, pool.give_back)
    return waited


async def answer(request: Request, api: ApiSpec) -> Response:
    """Answer one request for ``api``."""
    loop = asyncio.get_running_loop()
    arrived = loop.time()
    state: MockState = request.app.state.mock
    body = await read_json(request)
    scenario = resolve(state.defaults, request.headers.get(HEADER), body.get(BODY_FIELD))
    parsed = api.parse(body)
    check_variants(scenario, api)
    recorder = state.recorder
    record = recorder.start(
        RequestRecord(
            id=new_id(api.id_prefix),
            api=api.name,
            stream=parsed.stream,
            include_usage=parsed.include_usage,
            prompt_tokens=parsed.prompt.prompt_tokens,
            model=parsed.prompt.model,
            scenario=scenario.changed(),
        )
    )
    if scenario.status is not None:
        record.status_code = scenario.status
        recorder.finish(record, "errored", completion_tokens=0)
        raise status_error(scenario.status, scenario.retry_after, as_date=scenario.retry_after_date)

    try:
        if await admit(request, state, scenario, record):
            arrived = loop.time()  # a queued request's first token is due ttft after admission
        plan = build_plan(parsed.prompt, scenario, call_id_prefix=api.call_id_prefix)  # lazy
        every_s = None if scenario.comment_every_ms is None else scenario.comment_every_ms / 1000
        clock = Clock(scenario.ttft_ms / 1000, scenario.tps, start=arrived, comment_every_s=every_s)
        events = play(plan, clock, faults_for(scenario))
        wire = api.wire(record.id, plan, parsed, scenario)
        if parsed.stream:
            frames = generate(events, wire, recorder, record)
            generation = generation_for(scenario.pause_on_backpressure, frames)
            return RecordedStreamingResponse(generation, recorder=recorder, record=record)
        outcome = await while_connected(request.receive, collect_whole(events, recorder, record))
    except ClientLeft:
        recorder.disconnected(record)
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    except asyncio.CancelledError:  # the server is stopping: as good as a client that left
        recorder.disconnected(record)
        raise
    except Exception:  # whatever broke, the record ends (and gives its slot back)
        recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
        raise
    return unary_answer(request, wire, outcome, recorder, record)


async def collect_whole(
    events: AsyncGenerator[Event, None], recorder: Recorder, record: RequestRecord
) -> Outcome:
    """The whole answer for a unary response, its events closed however it ends."""
    async with aclosing(events):
        return await collect(events, recorder, record)


def unary_answer(
    request: Request, wire: Wire, outcome: Outcome, recorder: Recorder, record: RequestRecord
) -> Response:
    """End the record of a collected answer and answer it: the body (gzip-encoded if the request
    accepts gzip), or a provider-shaped 500 for an answer a fault broke."""
    if outcome.failed:
        record.status_code = 500
        recorder.finish(record, "errored", completion_tokens=record.tokens_generated)
        raise ApiError(
            500,
            "The server had an error while generating the response (mock scenario).",
            kind="server_error",
            anthropic_kind="api_error",
            code="server_error",
        )
    response, record.content_encoding = whole_answer(
        wire.body(outcome), request.headers.get("accept-encoding")
    )
    recorder.finish(
        record,
        "completed",
        completion_tokens=outcome.usage.completion_tokens,
        finish_reason=vllm_reason(outcome.finish),
    )
    return response
