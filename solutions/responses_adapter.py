"""OpenAI Responses events normalised into Chat Completions chunks (notebook 08).

The Responses API says the same answer in typed events; a client that speaks the chat
protocol (the unmodified ``openai`` client's ``chat.completions``) can read it once a proxy
maps each event onto chunks, as notebook 08's ``to_openai`` does for Anthropic:

=========================================  ===============================================
Responses event                            Chat chunk(s)
=========================================  ===============================================
``response.created``                       ``delta: {role: assistant, content: ""}``
``response.output_text.delta``             ``delta: {content}``
``response.refusal.delta``                 ``delta: {refusal}`` (the SDK's ``message.refusal``)
``response.output_item.added`` (call)      ``tool_calls: [{index, id, type, function.name}]``
``response.function_call_arguments.delta`` ``tool_calls: [{index, function.arguments}]``
``response.completed``                     ``finish_reason`` (``tool_calls`` if it called a
                                           tool, ``content_filter`` if it refused, else
                                           ``stop``), then a ``choices: []`` usage chunk
``response.incomplete``                    ``finish_reason`` ``length`` or ``content_filter``,
                                           then the usage chunk
``response.failed``                        a top-level ``error`` (the SDK raises ``APIError``)
=========================================  ===============================================

A refusal ends with ``finish_reason: content_filter`` whichever way the provider says it
(an OpenAI ``response.refusal.delta``, a Responses ``incomplete`` for ``content_filter``, or
Anthropic's ``stop_reason: refusal`` in notebook 08's adapter), so a client checks one field.
Tool calls are numbered by the order their items were added, as Chat numbers them.

``chunk``, ``responses_usage`` and ``responses_to_chat`` are notebook 08's build-it, the same
code (dict state, as the notebook's ``to_openai`` keeps it);
``tests/notebooks/test_build_its_match_solutions.py`` keeps them so. The
route around them is this module's own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any, Final

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

CHAT_PATH: Final = "/v1/chat/completions"
RESPONSES_PATH: Final = "/v1/responses"
INCOMPLETE: Final[dict[str | None, str]] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
TERMINAL: Final = ("response.completed", "response.incomplete")


State = dict[str, Any]  # what the mapping keeps between events of one stream


def chunk(state: State, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": state["id"], "object": "chat.completion.chunk", "created": state["created"],
        "model": state["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip


def responses_usage(state: State, usage: dict[str, Any]) -> dict[str, Any]:
    counts = {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
              "total_tokens": usage["input_tokens"] + usage["output_tokens"]}  # fmt: skip
    return {**chunk(state, {}), "choices": [], "usage": counts}


def responses_to_chat(data: dict[str, Any], state: State) -> list[dict[str, Any]]:
    """One Responses stream event -> a list of OpenAI chat.completion.chunk bodies."""
    kind = data.get("type")
    if kind == "response.created":
        response = data["response"]
        state.update(id=response["id"], model=response["model"], created=response["created_at"],
                     calls={}, refused=False)  # fmt: skip
        return [chunk(state, {"role": "assistant", "content": ""})]
    if kind == "response.output_text.delta":
        return [chunk(state, {"content": data["delta"]})]
    if kind == "response.refusal.delta":
        state["refused"] = True
        return [chunk(state, {"refusal": data["delta"]})]
    if kind == "response.output_item.added" and data["item"]["type"] == "function_call":
        item = data["item"]
        index = state["calls"].setdefault(data["output_index"], len(state["calls"]))
        call = {"index": index, "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": ""}}  # fmt: skip
        return [chunk(state, {"tool_calls": [call]})]
    if kind == "response.function_call_arguments.delta":
        index = state["calls"][data["output_index"]]
        fragment = {"index": index, "function": {"arguments": data["delta"]}}
        return [chunk(state, {"tool_calls": [fragment]})]
    if kind == "response.completed":
        finish = (
            "tool_calls" if state["calls"] else "content_filter" if state["refused"] else "stop"
        )
        return [chunk(state, {}, finish), responses_usage(state, data["response"]["usage"])]
    if kind == "response.incomplete":
        response = data["response"]
        finish = INCOMPLETE.get((response["incomplete_details"] or {}).get("reason"), "length")
        return [chunk(state, {}, finish), responses_usage(state, response["usage"])]
    if kind == "response.failed":
        error = data["response"].get("error") or {}
        return [{"error": {"message": error.get("message", "upstream error"),
                           "type": error.get("code") or "upstream_error", "param": None,
                           "code": None}}]  # fmt: skip
    return []  # in_progress, content_part.*, *.done, output_item.done: nothing new to say


def responses_request(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request said in the Responses API's words."""
    request: dict[str, Any] = {
        "model": body.get("model", "mock-gpt"),
        "input": [{"role": m["role"], "content": m["content"]} for m in body["messages"]],
        "stream": True,
    }
    if body.get("tools"):
        request["tools"] = [
            {"type": "function", "name": t["function"]["name"],
             "parameters": t["function"].get("parameters", {})}
            for t in body["tools"]
        ]  # fmt: skip
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if limit:
        request["max_output_tokens"] = limit
    if "mock" in body:
        request["mock"] = body["mock"]
    return request


def make_responses_adapter(parts: ModuleType, upstream_url: str) -> FastAPI:
    """``POST /v1/chat/completions`` answered from the upstream's ``/v1/responses``, with the
    proxy's own ``make_client``, ``read_request``, ``sse_events`` and ``event_data``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with parts.make_client(upstream_url) as client:
            app.state.client = client
            yield

    app = FastAPI(lifespan=lifespan)

    @app.post(CHAT_PATH)
    async def chat_completions(request: Request) -> Response:
        body = await parts.read_request(request)
        if isinstance(body, Response):
            return body
        wants_usage = (body.get("stream_options") or {}).get("include_usage") is True
        client = request.app.state.client

        async def relay() -> AsyncIterator[str]:
            state: State = {}
            finished = False  # a terminal event came: the stream may end with [DONE]
            try:
                async with client.stream(
                    "POST", RESPONSES_PATH, json=responses_request(body)
                ) as upstream:
                    async for event in parts.sse_events(parts.sse_lines(upstream.aiter_bytes())):
                        data = json.loads(parts.event_data(event))
                        finished = finished or data.get("type") in TERMINAL
                        for out in responses_to_chat(data, state):
                            if "usage" in out and not wants_usage:
                                continue
                            yield f"data: {json.dumps(out)}\n\n"
                            if "error" in out:
                                return  # an in-stream error ends the stream, without [DONE]
            except httpx.HTTPError:
                pass  # a dropped upstream: said below, as an in-stream error
            if finished:
                yield "data: [DONE]\n\n"
            else:  # the socket closing is not success
                message = "the upstream closed the stream before it finished"
                yield f"data: {json.dumps(parts.error_body(message, 'upstream_error'))}\n\n"

        return StreamingResponse(relay(), media_type="text/event-stream", headers=parts.SSE_HEADERS)

    return app
