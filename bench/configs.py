"""The configurations under test, each a server in its own process on 127.0.0.1.

A :class:`Config` names a way of reaching the mock; its ``kind`` picks the :class:`Launcher`
(``LAUNCHERS``) that starts it in front of the mock upstream and hands back a :class:`Server`
(labkit's server handle: url, ``pid`` to meter, ``stop()``; every child is a
:class:`labkit.servers.ProcessServer`). ``direct`` is the do-nothing launcher. A launcher whose tool
is missing (nginx, LiteLLM's venv, uvloop) says why in :meth:`Launcher.unavailable` and the
configuration is skipped, never faked.

Ports: the bench binds each listening socket itself (``labkit.servers.bind_socket``, port 0)
and hands the bound socket to the child (``bench.serve``, nginx's inherited ``NGINX``
sockets), so no other process can take the port between choosing and listening.
LiteLLM only takes a port number: :func:`free_port` is for it alone (``bench.gateways`` binds
and closes a socket likewise for the gateways that take only an address).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from bench.mock_server import SCENARIO_ENV
from labkit.errors import ServerExitedError, ServerStartError, StartTimeoutError
from labkit.servers import ExternalServer, ProcessServer, ServerHandle, bind_socket

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
UVLOOP_EXTRA = ROOT / "bench" / ".extra-uvloop"  # pip install --target (see README of bench)
LITELLM_VENV = ROOT / "bench" / ".venv-litellm"
START_TIMEOUT_S = 20.0
LITELLM_START_TIMEOUT_S = 90.0
NGINX_PATH = "/usr/sbin:/usr/local/sbin:/usr/bin:/bin"

Server = ServerHandle  # the bench's name for a started server's handle

Kind = Literal["direct", "uvicorn", "nginx", "litellm"]


def listening_socket(name: str) -> socket.socket:
    """A socket bound to a free port on 127.0.0.1 and listening, to hand to a child."""
    return bind_socket(HOST, 0, name=name)


def free_port() -> int:
    """A port that was free a moment ago, for a program that takes only a port number
    (LiteLLM). Another process may take it before the program binds it: prefer
    :func:`listening_socket` wherever the program accepts a socket."""
    with listening_socket("a port for LiteLLM") as sock:
        port: int = sock.getsockname()[1]
        return port


def _raise_nofile() -> None:
    """In the child: lift the soft open-files limit to the hard one (1000 streams = 2000 fds)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def spawn(
    name: str,
    argv: Sequence[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    ready_path: str | None = None,
    timeout: float = START_TIMEOUT_S,
    workdir: Path | None = None,
    sock: socket.socket | None = None,
) -> ProcessServer:
    """Start ``argv`` in its own session (labkit's :class:`ProcessServer`), wait until ``port``
    accepts (and ``ready_path`` answers 200 when given), or raise ``RuntimeError`` with the end
    of its log. ``sock``, the listening socket the child is told about, is handed down and
    closed here."""
    server = ProcessServer(
        argv,
        name=name,
        host=HOST,
        port=port,
        env=env,
        cwd=ROOT,
        workdir=workdir or Path(tempfile.mkdtemp(prefix=f"bench-{name}-")),
        sock=sock,
        ready_path=ready_path,
        start_timeout=timeout,
        stop_grace=5.0,
        merge_stderr=True,
        preexec_fn=_raise_nofile,
    )
    server.poll_interval = 0.1
    try:
        return server.start()
    except ServerExitedError as exc:
        rc = server.process.returncode if server.process is not None else None
        raise RuntimeError(f"{name} exited with code {rc}:\n{exc.stderr_tail}") from None
    except StartTimeoutError:
        tail = "\n".join(server.stdout().splitlines()[-10:])
        raise RuntimeError(
            f"{name} did not answer on port {port} within {timeout:g} s:\n{tail}"
        ) from None
    except ServerStartError as exc:
        raise RuntimeError(str(exc)) from None


def uvicorn_argv(target: str, fd: int, fast: bool, *, factory: bool = False) -> list[str]:
    """uvicorn serving ``target`` on the inherited listening socket ``fd``. Not ``uvicorn
    --fd``: that leaves Nagle's algorithm on for every connection (``bench.serve``
    says why and what it cost)."""
    loop, http = ("uvloop", "httptools") if fast else ("asyncio", "h11")
    return [
        sys.executable,
        "-m",
        "bench.serve",
        target,
        *(["--factory"] if factory else []),
        "--fd",
        str(fd),
        "--loop",
        loop,
        "--http",
        http,
        "--backlog",
        "4096",
    ]


def serve_uvicorn(
    name: str, target: str, env: dict[str, str], *, fast: bool = False, factory: bool = False
) -> Server:
    """``target`` under uvicorn on a socket bound here."""
    sock = listening_socket(name)
    port = sock.getsockname()[1]
    argv = uvicorn_argv(target, sock.fileno(), fast, factory=factory)
    ready = "/healthz" if factory else None
    return spawn(name, argv, port, env=env, ready_path=ready, sock=sock)


def start_mock(ttft_ms: int, tps: float, tokens: int) -> Server:
    """The mock upstream (``bench.mock_server``) with these defaults for every request."""
    scenario = f"ttft_ms={ttft_ms};tps={tps:g};tokens={tokens}"
    return serve_uvicorn("mock", "bench.mock_server:app", {SCENARIO_ENV: scenario}, factory=True)


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 16384;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream mock {{ server {upstream};{keepalive} }}
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            proxy_pass http://mock;
{directives}
        }}
    }}
}}
"""
# The bench's nginx: HTTP/1.1 to the mock with pooled connections, no buffering.
STREAMING_NGINX = (
    'proxy_http_version 1.1;\nproxy_set_header Connection "";\n'
    "proxy_buffering off;\nproxy_read_timeout 3600s;"
)


def find_nginx() -> str | None:
    return shutil.which("nginx", path=NGINX_PATH + ":" + os.environ.get("PATH", ""))


def render_nginx_conf(
    prefix: Path, upstream_port: int, port: int, directives: str, keepalive: int | None = None
) -> str:
    """The bench's nginx.conf (one worker, files under ``prefix``) proxying every path to the
    mock on ``upstream_port``, with ``directives`` in its ``location /``."""
    return NGINX_CONF.format(
        prefix=prefix,
        upstream=f"{HOST}:{upstream_port}",
        keepalive=f" keepalive {keepalive};" if keepalive else "",
        host=HOST,
        port=port,
        directives="\n".join(f"            {line}" for line in directives.splitlines()),
    )


def start_nginx(
    name: str, upstream: Server, directives: str, *, keepalive: int | None = None
) -> Server:
    """nginx (one worker) proxying every path to ``upstream`` with ``directives`` in its
    ``location /``; ``keepalive`` idle connections to the upstream are kept when given."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    sock = listening_socket(name)
    port = sock.getsockname()[1]
    conf = workdir / "nginx.conf"
    conf.write_text(render_nginx_conf(workdir, upstream.port, port, directives, keepalive))
    argv = [str(find_nginx()), "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "e.log")]
    # nginx takes listening sockets from $NGINX ("fd;fd;") when one matches a `listen`.
    env = {"NGINX": f"{sock.fileno()};"}
    # A connect succeeds as soon as the socket is bound here: ready is the mock answering
    # through nginx.
    ready = "/healthz"
    return spawn(name, argv, port, env=env, ready_path=ready, workdir=workdir, sock=sock)


LITELLM_CONF = """\
model_list:
  - model_name: mock-gpt
    litellm_params:
      model: openai/mock-gpt
      api_base: {upstream}/v1
      api_key: sk-bench
"""


class Launcher:
    """Starts one kind of configuration. This base is the direct path: nothing to start."""

    # Why the idle and slow-reader shapes are not measured for this kind (None: they are).
    memory_note: ClassVar[str | None] = None

    def unavailable(self, config: Config) -> str | None:
        """Why ``config`` cannot run here, or None."""
        return None

    def start(self, config: Config, upstream: Server) -> Server:
        return ExternalServer(upstream.url, name=config.name)


class Uvicorn(Launcher):
    """A proxy app (``config.target``) under uvicorn, forwarding to the mock."""

    def unavailable(self, config: Config) -> str | None:
        if config.fast_loop and not (UVLOOP_EXTRA / "uvloop").exists():
            return (
                "uvloop/httptools are not in bench/.extra-uvloop "
                "(pip install --target bench/.extra-uvloop uvloop httptools)"
            )
        return None

    def start(self, config: Config, upstream: Server) -> Server:
        env = {"UPSTREAM_URL": upstream.url, "HEARTBEAT_S": "2"}
        if config.fast_loop:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(UVLOOP_EXTRA), os.environ.get("PYTHONPATH", "")) if p
            )
        return serve_uvicorn(config.name, config.target, env, fast=config.fast_loop)


class Nginx(Launcher):
    """nginx from the system, configured for streaming (:data:`STREAMING_NGINX`)."""

    def unavailable(self, config: Config) -> str | None:
        if find_nginx() is None:
            return "nginx is not installed (apt-get install nginx)"
        return None

    def start(self, config: Config, upstream: Server) -> Server:
        return start_nginx(config.name, upstream, STREAMING_NGINX, keepalive=256)


class Litellm(Launcher):
    """LiteLLM's proxy from ``bench/.venv-litellm``, one worker."""

    memory_note = (
        "not measured: LiteLLM does not forward the X-Mock-Scenario header "
        "that the idle and slow-reader shapes need"
    )

    def unavailable(self, config: Config) -> str | None:
        if not (LITELLM_VENV / "bin" / "litellm").exists():
            return (
                f"LiteLLM is not installed in {LITELLM_VENV.relative_to(ROOT)} "
                "(python -m venv bench/.venv-litellm && bench/.venv-litellm/bin/pip install "
                "'litellm[proxy]')"
            )
        return None

    def start(self, config: Config, upstream: Server) -> Server:
        conf = LITELLM_CONF.format(upstream=upstream.url)
        return start_litellm(config.name, conf, {"LITELLM_MASTER_KEY": "sk-bench"})


# LiteLLM's proxy, quiet and offline (no cost map download, no telemetry, no docs page).
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
    "NO_DOCS": "True",
}


def start_litellm(name: str, conf_text: str, env: dict[str, str] | None = None) -> Server:
    """LiteLLM's proxy (one worker) with ``conf_text`` as its config and ``env`` on top."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    conf = workdir / "litellm.yaml"
    conf.write_text(conf_text)
    port = free_port()
    argv = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(conf), "--host", HOST]
    argv += ["--port", str(port), "--num_workers", "1"]
    return spawn(
        name,
        argv,
        port,
        env={**LITELLM_ENV, **(env or {})},
        ready_path="/health/liveliness",
        timeout=LITELLM_START_TIMEOUT_S,
        workdir=workdir,
    )


LAUNCHERS: dict[Kind, Launcher] = {
    "direct": Launcher(),
    "uvicorn": Uvicorn(),
    "nginx": Nginx(),
    "litellm": Litellm(),
}


@dataclass(frozen=True)
class Config:
    """One way of reaching the mock: directly or through a proxy."""

    name: str
    kind: Kind
    label: str
    target: str = ""  # uvicorn target for kind "uvicorn"
    fast_loop: bool = False  # uvloop + httptools instead of asyncio + h11
    quick: bool = False  # part of --quick
    notes: list[str] = field(default_factory=list, compare=False)

    @property
    def launcher(self) -> Launcher:
        return LAUNCHERS[self.kind]

    def unavailable(self) -> str | None:
        """Why this configuration cannot run here, or None."""
        return self.launcher.unavailable(self)

    def start(self, upstream: Server) -> Server:
        return self.launcher.start(self, upstream)


REFERENCE = "solutions.proxy:app"
AIOHTTP_REFERENCE = "solutions.aiohttp_proxy:app"

CONFIGS: tuple[Config, ...] = (
    Config("direct", "direct", "direct to the mock (the floor)", quick=True),
    Config(
        "reference", "uvicorn", "reference proxy (httpx, default limits)", REFERENCE, quick=True
    ),
    Config(
        "reference-uvloop",
        "uvicorn",
        "reference proxy on uvloop + httptools",
        REFERENCE,
        fast_loop=True,
    ),
    Config(
        "httpx-pool",
        "uvicorn",
        "reference relay on httpx, max_connections=None, 500 keep-alive",
        "bench.proxies.httpx_client:app_pool",
    ),
    Config(
        "httpx-wide",
        "uvicorn",
        "reference relay on httpx, max_connections=1000, 100 keep-alive",
        "bench.proxies.httpx_client:app_wide",
    ),
    Config(
        "httpx-sharded",
        "uvicorn",
        "reference relay on one httpx client over 8 connection pools, taken in turn",
        "bench.proxies.httpx_sharded:app",
    ),
    Config(
        "httpx-floor",
        "uvicorn",
        "the least a relay on httpx + Starlette costs: raw bytes on, none of the lessons' parts",
        "bench.proxies.httpx_floor:app",
    ),
    Config(
        "httpx-pool-counted",
        "uvicorn",
        "the reference, its httpcore pool's passes and retries counted a second in $POOL_COUNTS",
        "bench.proxies.httpx_pool_counted:app",
    ),
    Config(
        "httpx-aiohttp",
        "uvicorn",
        "reference relay on httpx, aiohttp's transport under it (httpx-aiohttp)",
        "bench.proxies.httpx_over_aiohttp:app",
    ),
    Config(
        "httpx-aiohttp-uvloop",
        "uvicorn",
        "reference relay on httpx over aiohttp's transport, on uvloop + httptools",
        "bench.proxies.httpx_over_aiohttp:app",
        fast_loop=True,
    ),
    Config(
        "httpx2",
        "uvicorn",
        "reference relay on httpx2, default limits",
        "bench.proxies.httpx2_client:app",
    ),
    Config(
        "httpx2-wide",
        "uvicorn",
        "reference relay on httpx2, max_connections=None, 100 keep-alive",
        "bench.proxies.httpx2_client:app_wide",
    ),
    Config(
        "aiohttp",
        "uvicorn",
        "aiohttp reference (the reference relay, unlimited connector)",
        AIOHTTP_REFERENCE,
        quick=True,
    ),
    Config(
        "aiohttp-uvloop",
        "uvicorn",
        "aiohttp reference on uvloop + httptools",
        AIOHTTP_REFERENCE,
        fast_loop=True,
    ),
    Config("nginx", "nginx", "nginx 1 worker, proxy_buffering off, upstream keepalive", quick=True),
    Config("litellm", "litellm", "LiteLLM proxy, 1 worker (own venv)"),
)


def select(names: Sequence[str] | None, quick: bool) -> list[Config]:
    """The configurations to run: by name, else the quick set, else all. ``direct`` is always
    first (every added figure is measured against it)."""
    known = {c.name: c for c in CONFIGS}
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown configuration(s) {unknown}; expected some of {list(known)}")
        chosen = [known[n] for n in names]
    else:
        chosen = [c for c in CONFIGS if c.quick or not quick]
    return [known["direct"], *(c for c in chosen if c.name != "direct")]
