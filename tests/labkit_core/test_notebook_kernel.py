"""labkit inside a real Jupyter kernel: start, re-run cells, capture, stop — quietly."""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.sockets

CELLS = [
    """
    import threading
    import psutil
    import labkit
    from labkit import MockUpstream, capture_stream, running_servers, serve, start_mock_upstream

    def listening():
        conns = psutil.Process().net_connections(kind="inet")
        return {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}

    before = listening()
    """,
    """
    upstream = start_mock_upstream(ttft_ms=20, tps=200, tokens=10)
    """,
    """
    import httpx
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        client = httpx.AsyncClient(timeout=None)
        upstream_request = client.build_request(
            "POST", f"{upstream.url}/v1/chat/completions", content=await request.body(),
            headers={"content-type": "application/json"},
        )
        response = await client.send(upstream_request, stream=True)

        async def body():
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()
                await client.aclose()

        return StreamingResponse(body(), media_type="text/event-stream")

    proxy = serve(app, name="proxy")
    """,
]
CHECKS = [
    """
    first_upstream, first_proxy = upstream, proxy
    """,
    # the same two cells again, as a learner re-running them would
    CELLS[1],
    CELLS[2],
    """
    print(upstream is first_upstream, first_proxy.running, proxy.running)
    print(sorted(server.name for server in running_servers()))
    """,
    """
    request = {
        "model": "mock-1", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hello"}],
    }
    capture = capture_stream(f"{proxy.url}/v1/chat/completions", json=request)
    record = MockUpstream(upstream).last()
    print(capture.terminal, capture.usage["completion_tokens"], record["state"])
    """,
    """
    labkit.stop_all()
    print(running_servers(), [t.name for t in threading.enumerate() if t.name.startswith("labkit")])
    print(listening() - before)
    """,
]


def test_a_notebook_starts_reruns_captures_and_stops_cleanly(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(textwrap.dedent(src).strip()) for src in CELLS + CHECKS]
    client = NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()

    outputs = [output for cell in nb.cells for output in cell.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == []
    printed = [
        "".join(o.text for o in cell.outputs if o.output_type == "stream") for cell in nb.cells[-3:]
    ]
    assert printed == [
        "True False True\n['mock-upstream', 'proxy']\n",
        "done 10 completed\n",
        "[] []\nset()\n",
    ]
