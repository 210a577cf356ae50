"""`labkit engine serve` answers a streamed chat completion, on loopback, until it is stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from labkit.engine import EngineHandle
from labkit.servers import bind_socket

pytestmark = [pytest.mark.sockets, pytest.mark.heavy]  # it starts the real engine

LABKIT = Path(sys.executable).with_name("labkit")


def _free_port() -> int:
    probe = bind_socket("127.0.0.1", 0, name="probe")
    port = int(probe.getsockname()[1])
    probe.close()
    return port


def test_labkit_engine_serve_streams_a_chat_completion_on_loopback(engine: EngineHandle) -> None:
    # `engine` makes sure it is built (or skips); this test serves another copy through the CLI
    port = _free_port()
    process = subprocess.Popen(
        [str(LABKIT), "engine", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, "labkit engine serve exited before it was ready"
            assert time.monotonic() < deadline, "labkit engine serve not ready within 60 s"
            time.sleep(0.1)
        body = {
            "model": "any",
            "stream": True,
            "max_tokens": 8,
            "temperature": 0,  # greedy: a sampled "Hello!" could end before 8 tokens
            "messages": [{"role": "user", "content": "Count from 1 to 50, one number a line."}],
        }
        chunks = []
        with httpx.stream(
            "POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    chunks.append(line.removeprefix("data: "))
        assert chunks[-1] == "[DONE]"
        finishes = [json.loads(c)["choices"][0].get("finish_reason") for c in chunks[:-1]]
        assert finishes[-1] == "length"  # 8 tokens asked, 8 given
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=False
        )
        if listening.returncode == 0:  # the local address column: loopback only
            local = [line.split()[3] for line in listening.stdout.splitlines()]
            assert local == [f"127.0.0.1:{port}"]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode(errors="replace")
    assert f"http://127.0.0.1:{port}" in output.splitlines()[0]
