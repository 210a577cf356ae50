"""Starting and stopping servers: one package, one public surface (this module).

``serve`` (an ASGI app on a thread), ``serve_subprocess`` (a file or module in a child Python
process), ``start_mock_upstream``, ``start_nginx`` (from ``nginx``) and ``start_redis`` (from
``redis``: its ``.url`` is ``redis://...``, and it can be killed and restarted on its port)
return a :class:`ServerHandle` with ``.name``, ``.url``, ``.port``, ``.stop()``, usable as a
context manager. Starting a server under
a name that is already running stops the old one first, so re-running a notebook cell replaces
its server instead of leaking one; whatever is still running at interpreter exit is stopped.

Inside: ``_handles`` (the handle, ``bind_socket``, the process's registry), ``_thread``
(:class:`ThreadServer`), ``_process`` (:class:`ProcessServer`: any command in a session of its
own, waited for and stopped whole; the bench starts its servers with it), ``_subprocess``
(:class:`SubprocessServer`, a ``ProcessServer`` running ``_child``, which reports one typed
``_status.ChildStatus``), ``nginx``, ``redis``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from labkit.errors import PortInUseError
from labkit.servers._handles import ExternalServer, ServerHandle, bind_socket, registry
from labkit.servers._process import ProcessServer
from labkit.servers._subprocess import (
    CHILD_MODULE,
    DEFAULT_SUBPROCESS_START_TIMEOUT,
    SubprocessServer,
    resolve_target,
)
from labkit.servers._thread import DEFAULT_START_TIMEOUT, ThreadServer
from labkit.servers.nginx import (
    NginxNotFoundError,
    NginxServer,
    find_nginx,
    nginx_version,
    start_nginx,
)
from labkit.servers.redis import (
    RedisNotFoundError,
    RedisServer,
    find_redis_server,
    redis_version,
    start_redis,
)
from labkit.settings import UPSTREAM_URL

__all__ = [
    "CHILD_MODULE",
    "MOCK_UPSTREAM_NAME",
    "UPSTREAM_URL_ENV",
    "ExternalServer",
    "NginxNotFoundError",
    "NginxServer",
    "ProcessServer",
    "RedisNotFoundError",
    "RedisServer",
    "ServerHandle",
    "SubprocessServer",
    "ThreadServer",
    "bind_socket",
    "find_nginx",
    "find_redis_server",
    "next_name",
    "nginx_version",
    "redis_version",
    "resolve_target",
    "running_servers",
    "serve",
    "serve_subprocess",
    "start_mock_upstream",
    "start_nginx",
    "start_redis",
    "stop_all",
]

#: Set this to a running mock's base URL to make ``start_mock_upstream()`` use it.
UPSTREAM_URL_ENV = UPSTREAM_URL.name
MOCK_UPSTREAM_NAME = "mock-upstream"


def _replace(name: str | None, prefix: str) -> str:
    if name is None:
        return registry.next_name(prefix)
    old = registry.get(name)
    if old is not None:
        old.stop()
    return name


def serve(
    app: Any,
    *,
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> ThreadServer:
    """Serve an ASGI app on a background thread and return once it accepts requests.

    ``port=0`` picks a free port (read it back from ``.port`` / ``.url``). A server already
    running under the same ``name`` is stopped first. Raises ``ServerStartError``.
    """
    name = _replace(name, "server")
    server = ThreadServer(app, name=name, host=host, port=port, start_timeout=start_timeout)
    return server.start()


def serve_subprocess(
    target: str,
    *,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    start_timeout: float = DEFAULT_SUBPROCESS_START_TIMEOUT,
    inherit_env: bool = True,
) -> SubprocessServer:
    """Serve ``"path/to/proxy.py"`` (its ``app``) or ``"package.module:attr"`` in a child process.

    ``env`` is added to this process's environment for the child (with ``inherit_env=False`` it
    is the child's whole environment: nothing of ours, e.g. API keys, leaks to learner code); a
    relative file path is taken from ``cwd``. Raises ``InvalidTargetError`` for a malformed
    target and ``ServerStartError`` (with the end of the child's stderr) when the child does not
    come up.
    """
    name = _replace(name, "subprocess")
    server = SubprocessServer(
        target,
        name=name,
        env=env,
        cwd=cwd,
        host=host,
        port=port,
        start_timeout=start_timeout,
        inherit_env=inherit_env,
    )
    return server.start()


def start_mock_upstream(**scenario_defaults: Any) -> ServerHandle:
    """The mock upstream: started on a background thread, or the one already running.

    Keyword arguments are the app's scenario defaults (``ttft_ms=..., tps=..., tokens=...``; see
    ``mock_upstream.Scenario``). Calling it again with the same defaults returns the running
    server; with different ones it restarts it on the same port. If ``LABKIT_UPSTREAM_URL`` is
    set, a handle on that external server is returned instead: its own defaults apply (these
    are ignored, so put anything a lesson depends on in the request's ``mock`` field), and
    ``stop()`` leaves it running.
    """
    external = UPSTREAM_URL.read()
    if external:
        return ExternalServer(external, name=MOCK_UPSTREAM_NAME)
    from mock_upstream import Scenario, create_app

    current = registry.get(MOCK_UPSTREAM_NAME)
    if (
        isinstance(current, _MockUpstreamServer)
        and current.running
        and current.scenario_defaults == scenario_defaults
    ):
        return current
    app = create_app(Scenario(**scenario_defaults) if scenario_defaults else None)
    port = 0
    if current is not None:
        if current.running:
            port = current.port  # restart where it was, so URLs taken from it stay valid
        current.stop()
    server = _MockUpstreamServer(app, name=MOCK_UPSTREAM_NAME, port=port)
    server.scenario_defaults = dict(scenario_defaults)
    try:
        return server.start()
    except PortInUseError:  # someone took the port in between: any free one will do
        server = _MockUpstreamServer(app, name=MOCK_UPSTREAM_NAME)
        server.scenario_defaults = dict(scenario_defaults)
        return server.start()


class _MockUpstreamServer(ThreadServer):
    """The mock on a thread, remembering the defaults it was started with."""

    scenario_defaults: dict[str, Any]


def next_name(prefix: str) -> str:
    """A fresh server name such as ``submission-3`` (unique in this process)."""
    return registry.next_name(prefix)


def running_servers() -> list[ServerHandle]:
    """Every server this process started that is still registered (oldest first)."""
    return registry.live()


def stop_all() -> None:
    """Stop every server this process started (also done automatically at exit)."""
    registry.stop_all()
