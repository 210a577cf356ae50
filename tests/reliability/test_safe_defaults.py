"""Safe by default: every server binds 127.0.0.1 unless told otherwise; JupyterLab keeps its
token; no configuration in the repository turns authentication off."""

from __future__ import annotations

import inspect
import re
import socket
from pathlib import Path

import pytest
from fastapi import FastAPI

import labkit
from labkit import serve, serve_subprocess, start_mock_upstream
from labkit.servers import SubprocessServer, ThreadServer
from labkit.servers._child import main as _child_main
from labkit.servers.nginx import NginxServer
from mock_upstream.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


@pytest.mark.parametrize(
    "function",
    [
        serve,
        serve_subprocess,
        ThreadServer.__init__,
        SubprocessServer.__init__,
        NginxServer.__init__,
    ],
    ids=lambda f: f.__qualname__,
)
def test_server_starters_default_to_loopback(function: object) -> None:
    host = inspect.signature(function).parameters["host"].default  # type: ignore[arg-type]
    assert host == LOOPBACK


def test_mock_upstream_cli_defaults_to_loopback() -> None:
    assert build_parser().parse_args([]).host == LOOPBACK


def test_subprocess_child_defaults_to_loopback() -> None:
    source = inspect.getsource(_child_main)
    assert re.search(r'"--host", default="127\.0\.0\.1"', source), "the child's --host default"


def _listening_address(port: int) -> str:
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
            return str(conn.laddr.ip)
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.sockets
def test_servers_really_listen_on_loopback_only() -> None:
    with serve(FastAPI(), name="loopback-thread") as thread_server:
        assert _listening_address(thread_server.port) == LOOPBACK
    with serve_subprocess("mock_upstream.served:app", name="loopback-child") as child:
        assert _listening_address(child.port) == LOOPBACK
        with pytest.raises(OSError):  # not reachable on another local address either
            with socket.create_connection(("127.0.0.2", child.port), timeout=1.0):
                pass


@pytest.mark.sockets
def test_start_mock_upstream_listens_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(labkit.servers.UPSTREAM_URL_ENV, raising=False)
    mock = start_mock_upstream(ttft_ms=0)
    try:
        assert mock.url.startswith(f"http://{LOOPBACK}:")
        assert _listening_address(mock.port) == LOOPBACK
    finally:
        mock.stop()


def _recipe(target: str) -> str:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(f"{target}: $(STAMP)")
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line)
    return "\n".join(recipe)


def test_make_lab_keeps_token_auth_and_binds_loopback() -> None:
    recipe = _recipe("lab")
    assert "jupyter lab" in recipe
    assert "--ip=127.0.0.1" in recipe
    for switch_off in ("token=", "password=", "disable_check_xsrf", "--ip=0.0.0.0", "--ip=*"):
        assert switch_off not in recipe, f"make lab must not pass {switch_off!r}"


AUTH_OFF = re.compile(
    r"(IdentityProvider|NotebookApp|ServerApp)\.(token|password)\s*=\s*(''|\"\")"
    r"|disable_check_xsrf\s*=\s*True|allow_origin\s*=\s*['\"]\*['\"]"
)


def test_no_file_in_the_repository_switches_jupyter_auth_off() -> None:
    offenders = []
    for path in ROOT.rglob("*"):
        if any(
            part in {".venv", ".git", "node_modules", "student"} or part.startswith(".venv")
            for part in path.relative_to(ROOT).parts
        ):
            continue
        if path.suffix not in {".py", ".json", ".toml", ".cfg", ".yml", ".yaml", ".ipynb"} and (
            path.name != "Makefile"
        ):
            continue
        if path.is_file() and path != Path(__file__).resolve():
            if AUTH_OFF.search(path.read_text(encoding="utf-8", errors="replace")):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders
