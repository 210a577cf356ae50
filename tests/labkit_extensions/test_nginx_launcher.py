"""labkit.servers.nginx: a real nginx on loopback, generated config (skipped without nginx)."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from labkit import serve
from labkit.servers.nginx import INSTALL_HINT, NginxNotFoundError, find_nginx, start_nginx

needs_nginx = pytest.mark.skipif(
    shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
    reason="nginx is not installed",
)


def _app():
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/hello")
    async def hello():
        return {"hello": "world"}

    return app


def test_missing_nginx_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr("labkit.servers.nginx._SEARCH_PATH", ())
    with pytest.raises(NginxNotFoundError) as info:
        find_nginx()
    assert "apt-get install nginx" in str(info.value)
    assert "conda install -c conda-forge nginx" in str(info.value)
    assert INSTALL_HINT in str(info.value)


@needs_nginx
@pytest.mark.sockets
def test_nginx_proxies_to_a_loopback_app_and_stops():
    backend = serve(_app(), name="nginx-test-backend")
    try:
        edge = start_nginx(f"location / {{ proxy_pass {backend.url}; }}", name="nginx-test")
        assert edge.running
        assert httpx.get(edge.url + "/hello", timeout=5).json() == {"hello": "world"}
        assert str(edge.prefix) in edge.conf_path.read_text()
        edge.stop()
        assert not edge.running
        assert not edge.prefix.exists()
        edge.stop()  # safe twice
    finally:
        backend.stop()


@needs_nginx
@pytest.mark.sockets
def test_same_name_replaces_the_running_nginx():
    first = start_nginx("location / { return 204; }", name="nginx-replace-test")
    second = start_nginx("location / { return 204; }", name="nginx-replace-test")
    try:
        assert not first.running
        assert httpx.get(second.url + "/", timeout=5).status_code == 204
    finally:
        second.stop()


@needs_nginx
@pytest.mark.sockets
def test_a_bad_server_block_is_reported_with_the_config_path():
    from labkit.errors import ServerStartError

    with pytest.raises(ServerStartError, match="rejected the generated config"):
        start_nginx("location / { no_such_directive on; }", name="nginx-bad-test")
