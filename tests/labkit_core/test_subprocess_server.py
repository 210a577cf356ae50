"""serve_subprocess(): a target served from a child Python process."""

from __future__ import annotations

import socket
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from labkit import (
    AppStartupError,
    InvalidTargetError,
    PortInUseError,
    ServerExitedError,
    ServerStartError,
    TargetLoadError,
    capture_stream,
    running_servers,
    serve_subprocess,
)

ECHO_ENV_APP = """
import os
from fastapi import FastAPI

app = FastAPI()

@app.get("/")
async def root():
    return {"upstream": os.environ.get("UPSTREAM_URL"), "pid": os.getpid()}
"""


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


@pytest.mark.sockets
def test_a_proxy_file_is_served_with_the_given_env(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", ECHO_ENV_APP)
    server = serve_subprocess(
        "proxy.py", name="learner", cwd=tmp_path, env={"UPSTREAM_URL": "http://up"}
    )
    with server:
        body = httpx.get(server.url).json()
        assert body["upstream"] == "http://up"
        assert body["pid"] == server.pid
        assert running_servers() == [server]
    assert not psutil.pid_exists(body["pid"]) or psutil.Process(body["pid"]).status() == "zombie"


@pytest.mark.sockets
def test_a_module_attribute_target_is_served(tmp_path: Path) -> None:
    write(tmp_path, "mypkg_app.py", ECHO_ENV_APP.replace("app = FastAPI()", "api = FastAPI()"))
    source = (tmp_path / "mypkg_app.py").read_text().replace("@app.get", "@api.get")
    (tmp_path / "mypkg_app.py").write_text(source)
    with serve_subprocess("mypkg_app:api", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}) as s:
        assert httpx.get(s.url).status_code == 200


@pytest.mark.sockets
def test_a_streaming_app_trickles_through_the_child(tmp_path: Path) -> None:
    write(
        tmp_path,
        "stream.py",
        """
        import asyncio, json
        from fastapi import FastAPI
        from fastapi.responses import StreamingResponse

        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat():
            async def gen():
                for i in range(5):
                    await asyncio.sleep(0.05)
                    chunk = {"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
                    yield f"data: {json.dumps(chunk)}\\n\\n"
                yield "data: [DONE]\\n\\n"
            return StreamingResponse(gen(), media_type="text/event-stream")
        """,
    )
    with serve_subprocess(str(tmp_path / "stream.py")) as server:
        capture = capture_stream(f"{server.url}/v1/chat/completions", json={})
    assert capture.terminal == "done"
    assert capture.text == "w0 w1 w2 w3 w4 "
    assert capture.gaps and min(capture.gaps) > 0.02


@pytest.mark.sockets
def test_a_syntax_error_is_reported_plainly(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", "from fastapi import FastAPI\napp = FastAPI(\n")
    with pytest.raises(TargetLoadError) as info:
        serve_subprocess("proxy.py", name="typo", cwd=tmp_path)
    assert info.value.error.startswith("SyntaxError: ")
    assert info.value.exception == "SyntaxError"  # the child's typed status says which class
    assert "proxy.py, line 2" in info.value.error
    assert str(info.value).startswith("'typo' did not start: could not load ")
    assert running_servers() == []


@pytest.mark.sockets
def test_an_import_error_is_reported_plainly(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", "import no_such_module_here\n")
    with pytest.raises(TargetLoadError) as info:
        serve_subprocess("proxy.py", cwd=tmp_path)
    assert info.value.error == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert info.value.exception == "ModuleNotFoundError"


def test_every_way_a_child_can_fail_to_start_has_its_error_class(tmp_path: Path) -> None:
    from labkit.servers import _subprocess as subprocess_server
    from labkit.servers._status import KINDS, ChildStatus

    assert set(subprocess_server._START_ERRORS) == KINDS - {"ready"}
    path = tmp_path / "ready.json"
    ChildStatus("load_error", error="E: x", exception="E", details="tb").write(path)
    assert ChildStatus.read(path) == ChildStatus("load_error", 0, 0, "E: x", "E", "tb")
    path.write_text('{"status": "ready", "port": 1}')  # not a status: another program's file
    with pytest.raises(ValueError, match="not a child status"):
        ChildStatus.read(path)
    assert ChildStatus.read(tmp_path / "not-written-yet.json") is None


@pytest.mark.sockets
def test_a_file_without_app_says_what_to_define(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", "from fastapi import FastAPI\napi = FastAPI()\n")
    with pytest.raises(TargetLoadError) as info:
        serve_subprocess("proxy.py", cwd=tmp_path)
    assert info.value.error == (
        "AttributeError: proxy.py has no module-level 'app' (define e.g. `app = FastAPI()`)"
    )


@pytest.mark.sockets
def test_a_child_that_dies_early_shows_the_tail_of_its_stderr(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proxy.py",
        """
        import os, sys
        print("about to fall over", file=sys.stderr, flush=True)
        os._exit(7)
        """,
    )
    with pytest.raises(ServerExitedError) as info:
        serve_subprocess("proxy.py", name="faller", cwd=tmp_path)
    assert str(info.value) == (
        "'faller' did not start: the server process exited with code 7 before it was serving. "
        "Last lines of its stderr:\nabout to fall over\nFix the error above and start it again."
    )


@pytest.mark.sockets
def test_an_app_raising_at_startup_in_the_child(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proxy.py",
        """
        import contextlib
        from fastapi import FastAPI

        @contextlib.asynccontextmanager
        async def lifespan(app):
            raise RuntimeError("no upstream configured")
            yield

        app = FastAPI(lifespan=lifespan)
        """,
    )
    with pytest.raises(AppStartupError) as info:
        serve_subprocess("proxy.py", cwd=tmp_path)
    assert info.value.error == "RuntimeError: no upstream configured"


@pytest.mark.sockets
def test_port_in_use_in_the_child_is_the_same_typed_error(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", ECHO_ENV_APP)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError):
            serve_subprocess("proxy.py", cwd=tmp_path, port=port)


def test_a_missing_file_or_malformed_target_is_rejected_before_starting(tmp_path: Path) -> None:
    with pytest.raises(InvalidTargetError) as info:
        serve_subprocess("nope.py", cwd=tmp_path)
    assert str(info.value) == (
        "Expected a target like 'path/to/proxy.py' or 'package.module:app', got 'nope.py': "
        f"there is no file {tmp_path / 'nope.py'}."
    )
    with pytest.raises(InvalidTargetError):
        serve_subprocess("not a target")


@pytest.mark.sockets
def test_stop_kills_the_childs_whole_process_group(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proxy.py",
        """
        import subprocess, sys
        from fastapi import FastAPI
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        app = FastAPI()

        @app.get("/")
        async def root():
            return {"helper": helper.pid}
        """,
    )
    server = serve_subprocess("proxy.py", cwd=tmp_path)
    helper = psutil.Process(httpx.get(server.url).json()["helper"])
    server.stop()
    helper.wait(timeout=5)
    assert not server.running


@pytest.mark.sockets
def test_stop_is_quick_even_with_an_open_stream(tmp_path: Path) -> None:
    write(
        tmp_path,
        "proxy.py",
        """
        import asyncio
        from fastapi import FastAPI
        from fastapi.responses import StreamingResponse
        app = FastAPI()

        @app.get("/forever")
        async def forever():
            async def gen():
                while True:
                    await asyncio.sleep(0.05)
                    yield ": still here\\n\\n"
            return StreamingResponse(gen(), media_type="text/event-stream")
        """,
    )
    server = serve_subprocess("proxy.py", cwd=tmp_path)
    with httpx.stream("GET", f"{server.url}/forever") as response:
        next(response.iter_raw())
        began = time.monotonic()
        server.stop()
    assert time.monotonic() - began < 4.0
    assert "still here" not in server.stderr()


@pytest.mark.sockets
def test_interpreter_exit_stops_thread_and_child_servers(tmp_path: Path) -> None:
    import subprocess
    import sys

    write(tmp_path, "proxy.py", ECHO_ENV_APP)
    script = textwrap.dedent(
        """
        from fastapi import FastAPI
        from labkit import serve, serve_subprocess
        serve(FastAPI(), name="left-running")
        child = serve_subprocess("proxy.py", name="child-left-running")
        print(child.pid, flush=True)
        """
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert time.monotonic() - began < 10
    child = int(done.stdout.split()[0])
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


@pytest.mark.sockets
def test_a_missing_working_folder_is_a_start_error(tmp_path: Path) -> None:
    write(tmp_path, "proxy.py", ECHO_ENV_APP)
    with pytest.raises(ServerStartError) as info:
        serve_subprocess(str(tmp_path / "proxy.py"), name="nowhere", cwd=tmp_path / "missing")
    assert str(info.value).startswith("'nowhere' could not start a Python process: ")


@pytest.mark.sockets
def test_inherit_env_false_gives_the_child_only_the_env_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-instructor-secret")
    write(
        tmp_path,
        "proxy.py",
        """
        import os
        from fastapi import FastAPI
        app = FastAPI()

        @app.get("/")
        async def root():
            return sorted(os.environ)
        """,
    )
    with serve_subprocess("proxy.py", cwd=tmp_path, env={"UPSTREAM_URL": "http://up"}) as s:
        assert "OPENAI_API_KEY" in httpx.get(s.url).json()
    with serve_subprocess(
        "proxy.py", cwd=tmp_path, env={"UPSTREAM_URL": "http://up"}, inherit_env=False
    ) as s:
        names = httpx.get(s.url).json()
    assert "OPENAI_API_KEY" not in names
    assert "UPSTREAM_URL" in names
