"""The FastAPI app: routes, per-app state, error handlers.

``create_app()`` builds a fresh app each time; everything it remembers lives on
``app.state.mock`` (a :class:`~mock_upstream.exchange.MockState`), so two apps in one process
keep separate records and metrics (and background responses).

Besides the three APIs, the Responses API's own resume and cancel for background responses
(:mod:`mock_upstream.background`): ``GET /v1/responses/{id}`` (``?stream=true&starting_after=N``
for the events after N) and ``POST /v1/responses/{id}/cancel``.
"""

from __future__ import annotations

import hmac
from typing import Final

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from mock_upstream import anthropic_messages, background, openai_chat, openai_responses
from mock_upstream.errors import ApiError, bad_request, install_handlers
from mock_upstream.exchange import ApiSpec, MockState, answer
from mock_upstream.records import Recorder
from mock_upstream.scenario import ONLY_ON, Scenario, flag
from mock_upstream.stream import quiet_while_serving

MODELS: Final = ("mock-gpt", "mock-gpt-mini", "mock-claude")
#: With ``create_app(debug_token=...)`` the records, reset and metrics routes answer only
#: requests that carry the token in this header: a proxy under test cannot read the mock's
#: counts instead of parsing its stream.
DEBUG_TOKEN_HEADER: Final = "X-Mock-Debug-Token"
#: Where a served mock (the grader's, ``mock-upstream``) takes its debug token from.
DEBUG_TOKEN_ENV: Final = "MOCK_DEBUG_TOKEN"

CHAT: Final = ApiSpec(
    "chat",
    openai_chat.ID_PREFIX,
    openai_chat.CALL_ID_PREFIX,
    openai_chat.parse,
    openai_chat.ChatWire,
    frozenset({"comment_every_ms", *(k for k, api in ONLY_ON.items() if api == "chat")}),
)
RESPONSES: Final = ApiSpec(
    "responses",
    openai_responses.ID_PREFIX,
    openai_responses.CALL_ID_PREFIX,
    openai_responses.parse,
    openai_responses.ResponsesWire,
    frozenset({"comment_every_ms", "refusal_deltas"}),
)
MESSAGES: Final = ApiSpec(
    "messages",
    anthropic_messages.ID_PREFIX,
    anthropic_messages.CALL_ID_PREFIX,
    anthropic_messages.parse,
    anthropic_messages.MessagesWire,
    frozenset({"comment_every_ms", "thinking_tokens"}),
)


def create_app(
    defaults: Scenario | None = None,
    *,
    debug_token: str | None = None,
    background_keep_s: float = background.DEFAULT_KEEP_S,
) -> FastAPI:
    """A new mock upstream app; ``defaults`` is the scenario every request starts from.

    ``debug_token`` keeps ``/debug/*`` and ``/metrics`` to clients that send it in
    ``X-Mock-Debug-Token`` (others get a 403 in OpenAI's error shape). A background response
    stays readable ``background_keep_s`` seconds after it ends (OpenAI: about ten minutes)."""

    def debug_access(request: Request) -> None:
        if debug_token is None:
            return
        given = request.headers.get(DEBUG_TOKEN_HEADER, "")
        if not hmac.compare_digest(given.encode(), debug_token.encode()):
            raise ApiError(
                403,
                "The mock's records and metrics are for the grader only: send the debug token "
                f"in {DEBUG_TOKEN_HEADER}. A proxy takes its counts from the stream.",
                kind="permission_error",
                code="debug_token_required",
            )

    app = FastAPI(
        title="mock-upstream",
        summary="A deterministic, paced, fault-injectable mock LLM server.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=quiet_while_serving,
    )
    recorder = Recorder(model=openai_chat.DEFAULT_MODEL)  # its vllm: series exist from the start
    app.state.mock = MockState(
        defaults=defaults or Scenario(),
        recorder=recorder,
        background=background.BackgroundResponses(recorder, keep_s=background_keep_s),
    )
    app.state.recorder = app.state.mock.recorder
    app.state.registry = app.state.mock.recorder.registry
    install_handlers(app)

    # Every route reads its parameters from the request and returns a Response. FastAPI builds a
    # declared parameter or a response model inside ``warnings.catch_warnings()``, which swaps the
    # process's one filter list and is not thread-safe: apps built on two threads at once let
    # pydantic's UnsupportedFieldAttributeWarning escape (an error under pytest's "error" filter,
    # seen in CI's fault matrix).
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, CHAT)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await answer(request, RESPONSES)

    @app.get("/v1/responses/{response_id}")
    async def retrieve_response(request: Request) -> Response:
        state: MockState = request.app.state.mock
        kept = state.background.get(request.path_params["response_id"])
        if not _stream(request):
            return JSONResponse(kept.snapshot())
        return background.stream(kept, _starting_after(request), state.recorder)

    @app.post("/v1/responses/{response_id}/cancel")
    async def cancel_response(request: Request) -> JSONResponse:
        state: MockState = request.app.state.mock
        kept = state.background.get(request.path_params["response_id"])
        return JSONResponse(await kept.cancel())

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await answer(request, MESSAGES)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "mock-upstream"}
                    for name in MODELS
                ],
            }
        )

    @app.get("/metrics", dependencies=[Depends(debug_access)])
    async def metrics(request: Request) -> Response:
        recorder: Recorder = request.app.state.mock.recorder
        return Response(recorder.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug/requests", dependencies=[Depends(debug_access)])
    async def debug_requests(request: Request) -> JSONResponse:
        recorder: Recorder = request.app.state.mock.recorder
        return JSONResponse([r.to_json() for r in recorder.records()])

    @app.post("/debug/reset", dependencies=[Depends(debug_access)])
    async def debug_reset(request: Request) -> JSONResponse:
        recorder: Recorder = request.app.state.mock.recorder
        recorder.reset()
        request.app.state.mock.background.reset()
        return JSONResponse(
            {"reset": True, "running": recorder.running, "waiting": recorder.waiting}
        )

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return app


def _stream(request: Request) -> bool:
    """Whether a retrieve asks for the events (``?stream=true``) or the snapshot."""
    given = request.query_params.get("stream", "false")
    try:
        return flag(given)
    except ValueError:
        raise bad_request(f"stream must be true or false, not {given!r}.", "stream") from None


def _starting_after(request: Request) -> int:
    """The ``starting_after`` sequence number of a resumed read, or -1 (from the start)."""
    given = request.query_params.get("starting_after")
    if given is None:
        return -1
    if not (given.isascii() and given.isdigit()):
        raise bad_request(
            f"starting_after must be a sequence number (0 or more), not {given!r}: pass the "
            "sequence_number of the last event you read.",
            "starting_after",
        )
    return int(given)
