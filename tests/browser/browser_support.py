"""Serving a proxy file with the chat page mounted, the mock's records of it, and a real Jupyter
server with jupyter-server-proxy in front of it, for the browser tests."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from labkit import MockUpstream, ThreadServer, chat_page, load_proxy, serve
from labkit.chat.hub import EXTENSION
from labkit.servers import ProcessServer

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_PROXY = ROOT / "solutions" / "proxy.py"


def serve_with_page(
    path: Path, upstream_url: str, name: str, *, detached: bool = False, **page: Any
) -> ThreadServer:
    """``path``'s proxy (a fresh module) with the chat page at /chat (``page``: the keywords of
    ``chat_page``), served on a thread; ``detached``: with its reader detached (see
    :func:`detach_reader`)."""
    module = load_proxy(path)
    if detached:
        detach_reader(module)
    module.app.mount("/chat", chat_page(**page))
    before = os.environ.get("UPSTREAM_URL")
    os.environ["UPSTREAM_URL"] = upstream_url  # read once, by the lifespan at start-up
    try:
        return serve(module.app, name=name)
    finally:
        if before is None:
            del os.environ["UPSTREAM_URL"]
        else:
            os.environ["UPSTREAM_URL"] = before


def detach_reader(module: Any) -> set[asyncio.Task[None]]:
    """Break ``module``'s proxy the way notebook 04's leaky proxy is broken: its ``relay`` reads
    the upstream in a task that nothing cancels when the client leaves, and nothing else closes
    the upstream either. Returns the set that holds those tasks (asyncio keeps only weak
    references)."""
    pumps: set[asyncio.Task[None]] = set()

    async def pump(upstream: Any, queue: asyncio.Queue[str | None]) -> None:
        async for line in upstream.aiter_lines():
            await queue.put(line)
        await queue.put(None)
        await upstream.aclose()

    async def relay(upstream: Any, client_wants_usage: bool) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        task = asyncio.create_task(pump(upstream, queue))  # nobody will cancel this
        pumps.add(task)
        task.add_done_callback(pumps.discard)
        while (line := await queue.get()) is not None:
            yield f"{line}\n".encode()

    module.relay = relay
    # The reference route also closes the upstream in a BackgroundTask, which Starlette runs
    # even after the client left: a second link to break, or the hang-up still gets through.
    module.BackgroundTask = lambda *args, **kwargs: None
    return pumps


def records_of(mock: MockUpstream, seed: int) -> list[dict[str, Any]]:
    """Every record the mock has of requests tagged ``seed``, oldest first."""
    return [r for r in mock.requests() if r["scenario"].get("seed") == seed]


def record_of(mock: MockUpstream, seed: int, settle_s: float = 3.0) -> dict[str, Any]:
    """The mock's record of the request tagged ``seed``, once it is no longer running (or, after
    ``settle_s``, as it is)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = records_of(mock, seed)
        if found and (found[-1]["state"] != "running" or time.monotonic() > deadline):
            return found[-1]
        assert time.monotonic() < deadline, f"the mock has no record with seed {seed}"
        time.sleep(0.02)


HUB_TOKEN = "browser-test-token"
HUB_BASE_URL = "/user/learner/"  # what JupyterHub gives a user's server, and Binder too
HUB_START_TIMEOUT_S = 90.0  # a cold start of the server and its extensions on a loaded machine


def hub_problem() -> str | None:
    """Why no Jupyter server with jupyter-server-proxy can run here, in one line; None if it
    can."""
    for module, package in (
        ("jupyter_server", "jupyter-server"),
        ("jupyter_server_proxy", "jupyter-server-proxy==4.6.0"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"the {package} package is not installed (pip install '{package}')"
    return None


class JupyterServer(ProcessServer):
    """A real Jupyter server (``python -m jupyter_server``) on 127.0.0.1 with a token, the base
    URL a hub gives a user's server, and no extension but jupyter-server-proxy (and, with
    ``passes_hangups``, labkit's :mod:`labkit.chat.hub`). Its config, runtime and data folders
    are its own; the OS picks its port, read back from the server's runtime file."""

    def __init__(self, *, name: str, passes_hangups: bool) -> None:
        home = Path(tempfile.mkdtemp(prefix="labkit-hub-"))
        self.runtime = home / "runtime"
        extensions = {
            "jupyter_server_proxy": True,
            EXTENSION: passes_hangups,
            # installed in the lab's environment, and not needed to proxy: off, to start faster
            "jupyterlab": False,
            "jupyter_lsp": False,
            "jupyter_server_terminals": False,
            "notebook_shim": False,
        }
        (home / "config").mkdir()
        (home / "config" / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
        )
        super().__init__(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                "--ServerApp.port=0",
                "--ServerApp.port_retries=0",
                f"--ServerApp.base_url={HUB_BASE_URL}",
                f"--IdentityProvider.token={HUB_TOKEN}",
                f"--ServerApp.root_dir={home}",
            ],
            name=name,
            env={
                "JUPYTER_CONFIG_DIR": str(home / "config"),
                "JUPYTER_RUNTIME_DIR": str(self.runtime),
                "JUPYTER_DATA_DIR": str(home / "data"),
            },
            workdir=home,
            ready_path=HUB_BASE_URL + "api",
            start_timeout=HUB_START_TIMEOUT_S,
        )

    def ready(self) -> bool:
        if not self.port:
            found = sorted(self.runtime.glob("jpserver-*.json"))
            if not found:
                return False
            try:
                self.port = int(json.loads(found[0].read_text())["port"])
            except (ValueError, KeyError):
                return False  # being written
        return super().ready()

    def page_url(self, link: str) -> str:
        """The browser's address of ``link`` (a path under the base URL, e.g. from
        ``hub_link``), with the token that logs the browser in."""
        return f"{self.url}{link}?token={HUB_TOKEN}"
