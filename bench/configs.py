"""The configurations under test, each a server in its own process on 127.0.0.1.

A :class:`Config` knows how to start its server in front of the mock upstream and hands back a
:class:`Server` (url, pid to meter, ``stop()``). Configurations whose tool is missing (nginx,
LiteLLM's venv) report why with :meth:`Config.unavailable` and are skipped, never faked.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
UVLOOP_EXTRA = ROOT / "bench" / ".extra-uvloop"  # pip install --target (see README of bench)
LITELLM_VENV = ROOT / "bench" / ".venv-litellm"
START_TIMEOUT_S = 20.0
LITELLM_START_TIMEOUT_S = 90.0

Kind = Literal["direct", "uvicorn", "nginx", "litellm"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _raise_nofile() -> None:
    """In the child: lift the soft open-files limit to the hard one (1000 streams = 2000 fds)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class Server:
    name: str
    url: str
    port: int
    pid: int | None  # the process to meter; None for the direct path
    process: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None
    log: Path | None = None

    def stop(self) -> None:
        """SIGTERM the server's own process group, SIGKILL after 5 s."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
            except ProcessLookupError:
                pass
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 10) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def spawn(
    name: str,
    argv: Sequence[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    ready_path: str | None = None,
    timeout: float = START_TIMEOUT_S,
    workdir: Path | None = None,
) -> Server:
    """Start ``argv`` in its own session, wait until ``port`` accepts (and ``ready_path``
    answers 200 when given), or raise with the end of its log."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    log = workdir / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=_raise_nofile,
        )
    server = Server(name, f"http://{HOST}:{port}", port, process.pid, process, workdir, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"{name} exited with code {process.returncode}:\n{tail}")
        if _answers(port, ready_path):
            return server
        time.sleep(0.1)
    tail = server.log_tail()
    server.stop()
    raise RuntimeError(f"{name} did not answer on port {port} within {timeout:g} s:\n{tail}")


def _answers(port: int, path: str | None) -> bool:
    try:
        if path is None:
            with socket.create_connection((HOST, port), timeout=0.5):
                return True
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start_mock(ttft_ms: int, tps: float, tokens: int) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "mock_upstream.cli", "--host", HOST, "--port", str(port)]
    argv += ["--ttft-ms", str(ttft_ms), "--tps", str(tps), "--tokens", str(tokens)]
    return spawn("mock", argv, port, ready_path="/healthz")


def uvicorn_argv(target: str, port: int, fast: bool) -> list[str]:
    loop, http = ("uvloop", "httptools") if fast else ("asyncio", "h11")
    return [
        sys.executable,
        "-m",
        "uvicorn",
        target,
        "--host",
        HOST,
        "--port",
        str(port),
        "--loop",
        loop,
        "--http",
        http,
        "--log-level",
        "warning",
        "--no-access-log",
        "--timeout-graceful-shutdown",
        "1",
        "--backlog",
        "4096",
    ]


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
    upstream mock {{ server {upstream}; keepalive 256; }}
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""

LITELLM_CONF = """\
model_list:
  - model_name: mock-gpt
    litellm_params:
      model: openai/mock-gpt
      api_base: {upstream}/v1
      api_key: sk-bench
"""


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

    def unavailable(self) -> str | None:
        """Why this configuration cannot run here, or None."""
        if (
            self.kind == "nginx"
            and shutil.which(
                "nginx", path="/usr/sbin:/usr/local/sbin:" + os.environ.get("PATH", "")
            )
            is None
        ):
            return "nginx is not installed (apt-get install nginx)"
        if self.kind == "litellm" and not (LITELLM_VENV / "bin" / "litellm").exists():
            return (
                f"LiteLLM is not installed in {LITELLM_VENV.relative_to(ROOT)} "
                "(python -m venv bench/.venv-litellm && bench/.venv-litellm/bin/pip install "
                "'litellm[proxy]')"
            )
        if self.fast_loop and not (UVLOOP_EXTRA / "uvloop").exists():
            return (
                "uvloop/httptools are not in bench/.extra-uvloop "
                "(pip install --target bench/.extra-uvloop uvloop httptools)"
            )
        return None

    def start(self, upstream: Server) -> Server:
        if self.kind == "direct":
            return Server(self.name, upstream.url, upstream.port, None)
        port = free_port()
        if self.kind == "uvicorn":
            env = {"UPSTREAM_URL": upstream.url, "HEARTBEAT_S": "2"}
            if self.fast_loop:
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (str(UVLOOP_EXTRA), os.environ.get("PYTHONPATH", "")) if p
                )
            return spawn(self.name, uvicorn_argv(self.target, port, self.fast_loop), port, env=env)
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-{self.name}-"))
        if self.kind == "nginx":
            conf = workdir / "nginx.conf"
            conf.write_text(
                NGINX_CONF.format(
                    prefix=workdir, upstream=f"{HOST}:{upstream.port}", host=HOST, port=port
                )
            )
            nginx = shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:" + os.environ["PATH"])
            argv = [str(nginx), "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "e.log")]
            return spawn(self.name, argv, port, workdir=workdir)
        conf = workdir / "litellm.yaml"
        conf.write_text(LITELLM_CONF.format(upstream=upstream.url))
        argv = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(conf), "--host", HOST]
        argv += ["--port", str(port), "--num_workers", "1"]
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "NO_DOCS": "True",
            "LITELLM_MASTER_KEY": "sk-bench",
        }
        return spawn(
            self.name,
            argv,
            port,
            env=env,
            ready_path="/health/liveliness",
            timeout=LITELLM_START_TIMEOUT_S,
            workdir=workdir,
        )


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
        "portable relay on httpx, max_connections=None, 500 keep-alive",
        "bench.proxies.httpx_client:app_pool",
    ),
    Config(
        "httpx-wide",
        "uvicorn",
        "portable relay on httpx, max_connections=1000, 100 keep-alive",
        "bench.proxies.httpx_client:app_wide",
    ),
    Config(
        "httpx2",
        "uvicorn",
        "portable relay on httpx2, default limits",
        "bench.proxies.httpx2_client:app",
    ),
    Config(
        "httpx2-wide",
        "uvicorn",
        "portable relay on httpx2, max_connections=None, 100 keep-alive",
        "bench.proxies.httpx2_client:app_wide",
    ),
    Config(
        "aiohttp",
        "uvicorn",
        "aiohttp reference (portable relay, unlimited connector)",
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

# Run by name only (--configs control-httpx): the portable relay over httpx with the reference's
# own limits. It should measure like "reference"; a gap would be the relay's cost, not httpx's.
EXTRA: tuple[Config, ...] = (
    Config(
        "control-httpx",
        "uvicorn",
        "portable relay on httpx, default limits (control)",
        "bench.proxies.httpx_client:app",
    ),
)


def select(names: Sequence[str] | None, quick: bool) -> list[Config]:
    """The configurations to run: by name, else the quick set, else all. ``direct`` is always
    first (every added figure is measured against it)."""
    known = {c.name: c for c in (*CONFIGS, *EXTRA)}
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown configuration(s) {unknown}; expected some of {list(known)}")
        chosen = [known[n] for n in names]
    else:
        chosen = [c for c in CONFIGS if c.quick or not quick]
    return [known["direct"], *(c for c in chosen if c.name != "direct")]
