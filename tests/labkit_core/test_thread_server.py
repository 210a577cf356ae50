"""serve(): a uvicorn server on a background thread, over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from labkit_core_support import make_stream_app
from starlette.types import Receive, Scope, Send

from labkit import (
    AppStartupError,
    PortInUseError,
    ServerExitedError,
    StartTimeoutError,
    capture_stream,
    running_servers,
    serve,
    stop_all,
)

pytestmark = pytest.mark.sockets


def hello_app(reply: str = "hello") -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def root() -> dict[str, str]:
        return {"reply": reply}

    return app


def test_serve_picks_a_free_port_and_answers_on_its_url() -> None:
    with serve(hello_app(), name="hello") as server:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.running
        assert httpx.get(server.url).json() == {"reply": "hello"}
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url)


def test_stop_twice_is_harmless() -> None:
    server = serve(hello_app())
    server.stop()
    server.stop()
    assert running_servers() == []


def test_two_servers_run_at_once_on_different_ports() -> None:
    with serve(hello_app("a"), name="a") as a, serve(hello_app("b"), name="b") as b:
        assert a.port != b.port
        assert httpx.get(a.url).json() == {"reply": "a"}
        assert httpx.get(b.url).json() == {"reply": "b"}
        assert running_servers() == [a, b]


def test_same_name_again_replaces_the_running_server() -> None:
    first = serve(hello_app("first"), name="proxy")
    second = serve(hello_app("second"), name="proxy")
    try:
        assert not first.running
        assert running_servers() == [second]
        assert httpx.get(second.url).json() == {"reply": "second"}
    finally:
        second.stop()


def test_restart_on_the_same_fixed_port() -> None:
    first = serve(hello_app("first"), name="fixed")
    port = first.port
    second = serve(hello_app("second"), name="fixed", port=port)
    try:
        assert second.port == port
        assert httpx.get(second.url).json() == {"reply": "second"}
    finally:
        second.stop()


def test_unnamed_servers_get_distinct_names_and_are_not_replaced() -> None:
    with serve(hello_app()) as a, serve(hello_app()) as b:
        assert a.name != b.name
        assert a.running and b.running


def test_port_in_use_raises_a_typed_error_saying_pass_port_0() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError) as info:
            serve(hello_app(), name="clash", port=port)
    assert str(info.value) == (
        f"'clash' could not start on 127.0.0.1:{port}: the port is already in use. "
        "Pass port=0 to pick a free port, or stop the server that holds it."
    )
    assert running_servers() == []


def test_app_raising_at_startup_is_reported_with_its_error() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("database is not there")
        yield  # pragma: no cover

    with pytest.raises(AppStartupError) as info:
        serve(FastAPI(lifespan=lifespan), name="broken")
    assert info.value.error == "RuntimeError: database is not there"
    assert "Traceback" in info.value.details
    assert str(info.value).startswith(
        "'broken' did not start: its startup code raised RuntimeError: database is not there."
    )


def test_server_thread_ending_early_is_noticed_not_waited_for() -> None:
    async def refuses_to_start(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": ""})

    began = time.monotonic()
    with pytest.raises(ServerExitedError) as info:
        serve(refuses_to_start, name="quitter", start_timeout=5.0)
    assert time.monotonic() - began < 2.0
    assert "the server thread exited (uvicorn exit code 3)" in str(info.value)


def test_startup_past_the_deadline_raises_and_leaves_nothing_running() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.sleep(30)
        yield  # pragma: no cover

    with pytest.raises(StartTimeoutError) as info:
        serve(FastAPI(lifespan=lifespan), name="slow", start_timeout=0.3)
    assert str(info.value).startswith("'slow' did not start within 0.3 s")


def test_stop_does_not_hang_on_an_open_stream() -> None:
    server = serve(make_stream_app(), name="streams")
    result: dict[str, object] = {}

    def read_forever() -> None:
        result["capture"] = capture_stream(f"{server.url}/trickle?n=1000&interval=0.05")

    reader = threading.Thread(target=read_forever)
    reader.start()
    time.sleep(0.3)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 3.0
    reader.join(5)
    assert not reader.is_alive()


def test_app_errors_go_to_the_handle_logs_not_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    app = FastAPI()

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError("kaboom")

    with serve(app, name="noisy") as server:
        assert httpx.get(f"{server.url}/boom").status_code == 500
        time.sleep(0.05)
        assert any("ValueError: kaboom" in line for line in server.logs)
    out, err = capfd.readouterr()
    assert out == ""
    assert err == ""


def _routers(logger: str) -> list[object]:
    return [f for f in logging.getLogger(logger).filters if type(f).__name__ == "_LogRouter"]


def test_uvicorn_logs_are_diverted_only_while_a_server_thread_runs() -> None:
    # The filter that keeps server logs off stderr is process-wide state on global loggers:
    # it is there while a server thread runs and gone after the last one stops.
    assert _routers("uvicorn.error") == []
    with serve(hello_app(), name="log-scope-a"), serve(hello_app(), name="log-scope-b") as b:
        assert len(_routers("uvicorn.error")) == 1 and len(_routers("asyncio")) == 1
        b.stop()
        assert len(_routers("uvicorn.error")) == 1  # "a" still runs
    assert _routers("uvicorn.error") == [] and _routers("asyncio") == []


def test_stop_all_stops_everything_this_process_started() -> None:
    a = serve(hello_app())
    b = serve(hello_app())
    stop_all()
    assert not a.running and not b.running
    assert running_servers() == []


def test_server_started_inside_a_running_event_loop() -> None:
    async def from_a_coroutine() -> str:
        # What a Jupyter cell does: the kernel's loop is running while the cell starts a server.
        with serve(hello_app("in-loop")) as server:
            async with httpx.AsyncClient() as client:
                response = await client.get(server.url)
            return str(response.json()["reply"])

    assert asyncio.run(from_a_coroutine()) == "in-loop"
