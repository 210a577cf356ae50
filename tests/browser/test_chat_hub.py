"""labkit.chat.hub without a server: the link it prints, and that it changes nothing until a
Jupyter server loads it (the behaviour itself: test_chat_behind_jupyter_server_proxy.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from labkit.chat.hub import EXTENSION, HUB_PREFIX_ENV, hub_link
from labkit.packaging import TEMPLATES


@pytest.mark.parametrize(
    ("prefix", "link"),
    [
        ("/user/ada/", "/user/ada/proxy/8010/chat/"),
        ("/user/ada", "/user/ada/proxy/8010/chat/"),
        ("/", "/proxy/8010/chat/"),
    ],
)
def test_the_link_is_under_the_servers_base_url(prefix: str, link: str) -> None:
    assert hub_link(8010, prefix=prefix) == link


def test_the_link_comes_from_the_hubs_prefix_and_is_none_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(HUB_PREFIX_ENV, "/user/grace/")
    assert hub_link(9001) == "/user/grace/proxy/9001/chat/"
    monkeypatch.delenv(HUB_PREFIX_ENV)
    assert hub_link(9001) is None


@pytest.mark.sockets
def test_importing_it_changes_nothing_until_a_server_loads_it() -> None:
    script = (
        "import sys, labkit.chat.hub as hub\n"
        "assert 'jupyter_server_proxy' not in sys.modules\n"
        "try:\n"
        "    from jupyter_server_proxy.handlers import ProxyHandler\n"
        "except ImportError:\n"
        "    print('absent'); raise SystemExit\n"
        "before = ProxyHandler._build_proxy_request\n"
        "first, again = hub.pass_hangups_on(), hub.pass_hangups_on()\n"
        "print(before is not ProxyHandler._build_proxy_request, first, again, sep='|')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "absent":
        pytest.skip("jupyter-server-proxy is not installed")
    changed, first, again = done.stdout.strip().split("|")
    assert changed == "True"
    assert first == "jupyter-server-proxy now closes a streamed request when its browser leaves"
    assert again.startswith("jupyter-server-proxy already closes")


@pytest.mark.sockets
def test_the_bundles_post_build_enables_it_where_the_jupyter_server_reads_it(
    tmp_path: Path,
) -> None:
    """postBuild's lines after its pip install, run with a ``python`` whose ``sys.prefix`` is a
    folder of the test's, then read by Jupyter's own extension config: enabled, and valid."""
    if importlib.util.find_spec("jupyter_server") is None:
        pytest.skip("jupyter-server is not installed")
    script = (TEMPLATES / "postBuild").read_text()
    enabling = script[script.index("config_d=") :]
    prefix, bin_dir = tmp_path / "prefix", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f"#!/bin/sh\necho {prefix}\n")
    (bin_dir / "python").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", enabling], check=True, env={**os.environ, "PATH": path}
    )
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyter_server.extension.manager import ExtensionPackage

    read = ExtensionConfigManager(read_config_path=[str(prefix / "etc" / "jupyter")])
    assert read.get_jpserver_extensions() == {EXTENSION: True}
    assert ExtensionPackage(name=EXTENSION, enabled=True).validate()


def test_the_bundles_binder_environment_brings_jupyter_server_proxy(tmp_path: Path) -> None:
    """repo2docker's base environment has no jupyter-server-proxy: the bundle's own pip list
    (the runtime lock) brings it, at the version labkit.chat.hub's change to its internals was
    tested with (an upgrade fails here first: run test_chat_behind_jupyter_server_proxy.py with
    it, then update the pin)."""
    from labkit.student import make_bundle

    root = Path(__file__).resolve().parents[2]
    make_bundle(root / "notebooks", root / "solutions" / "proxy.py", tmp_path / "lab")
    env = yaml.safe_load((tmp_path / "lab" / "binder" / "environment.yml").read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert "jupyter-server-proxy==4.6.0" in pip
    post_build = (tmp_path / "lab" / "binder" / "postBuild").read_text()
    assert f'"{EXTENSION}": true' in post_build
