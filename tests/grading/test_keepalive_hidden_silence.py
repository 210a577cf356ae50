"""``keepalive`` says what it saw when the proxy holds the whole stream back: the client never
saw the upstream's silence, so "no comment during the silence" would describe a silence the
client did not have. A proxy that streams but sends no heartbeat keeps the plain verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import write_variant

from labkit.checks import run_checks
from labkit.servers import serve_subprocess, start_mock_upstream


def keepalive_of(name: str, folder: Path) -> str:
    upstream = start_mock_upstream()
    try:
        proxy_file = write_variant(name, folder)
        with serve_subprocess(str(proxy_file), env={"UPSTREAM_URL": upstream.url}) as proxy:
            [result] = run_checks(proxy.url, upstream_url=upstream.url, only=["keepalive"])
    finally:
        upstream.stop()
    assert result.status == "failed", result
    return result.verdict


@pytest.mark.sockets
@pytest.mark.timeout(90)
def test_a_stream_held_back_whole_is_told_apart_from_a_stream_without_heartbeats(
    tmp_path: Path,
) -> None:
    assert keepalive_of("buffering", tmp_path).startswith(
        "no SSE comment arrived, and the client never saw the upstream's silence"
    )
    assert keepalive_of("no_heartbeat", tmp_path) == (
        "no SSE comment arrived while the upstream was silent"
    )
