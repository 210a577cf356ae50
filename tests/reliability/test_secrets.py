"""The upstream API key stays a secret: it comes from the environment, goes only to the
upstream, and never shows in a response, an error event, the usage log, a log line, a notebook
output or grader feedback. The grader's learner code runs without the instructor's secrets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import nbformat
import pytest
from upstream_fakes import ScriptedUpstream, chat_frames

import solutions.aiohttp_proxy
import solutions.proxy
from labkit import capture_stream, serve, serve_subprocess
from labkit.servers import ServerHandle
from tests.grading.folder_reports import REPORTER, folder_reports

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-7f3a9c1e5b2d4e6f8a0b"
CLIENT_KEY = "sk-client-key-should-not-go-upstream"
CHAT = "/v1/chat/completions"


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, ServerHandle]]:
    fake = ScriptedUpstream()
    with serve(fake, name="secrets-upstream") as server:
        yield fake, server


# Both references: the one notebook 06 builds (httpx) and the one to deploy (aiohttp).
TARGETS = ["solutions.proxy:app", "solutions.aiohttp_proxy:app"]


@pytest.fixture(params=TARGETS, ids=["httpx", "aiohttp"])
def proxy(
    upstream: tuple[ScriptedUpstream, ServerHandle], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ServerHandle]:
    env = {
        "UPSTREAM_URL": upstream[1].url,
        "USAGE_LOG": str(tmp_path / "usage.jsonl"),
        "UPSTREAM_API_KEY": CANARY,
    }
    with serve_subprocess(request.param, name="secrets-proxy", env=env) as server:
        yield server


def _everything_the_client_saw(response: httpx.Response) -> str:
    return json.dumps(dict(response.headers)) + response.text


@pytest.mark.sockets
def test_key_goes_to_the_upstream_and_nowhere_else(
    upstream: tuple[ScriptedUpstream, ServerHandle], proxy: ServerHandle, tmp_path: Path
) -> None:
    fake, _ = upstream
    seen: list[str] = []
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    body = {"model": "m", "stream": True, "messages": []}

    fake.status, fake.chunks = 200, [f.encode() for f in chat_frames(["hello"])]
    cap = capture_stream(proxy.url + CHAT, json=body, headers=auth)
    assert cap.terminal == "done"
    seen.append(cap.body.decode() + json.dumps(cap.headers))

    error = {"error": {"message": "boom", "type": "server_error"}}
    fake.chunks = [chat_frames(["a"])[1].encode(), f"data: {json.dumps(error)}\n\n".encode()]
    cap = capture_stream(proxy.url + CHAT, json=body, headers=auth)
    assert cap.terminal == "error"
    seen.append(cap.body.decode() + json.dumps(cap.headers))

    fake.chunks = [chat_frames(["a"])[1].encode()]  # ends without [DONE]: the proxy's own error
    cap = capture_stream(proxy.url + CHAT, json=body, headers=auth)
    assert cap.terminal == "error"
    seen.append(cap.body.decode() + json.dumps(cap.headers))

    fake.status, fake.content_type = 429, b"application/json"
    fake.chunks = [json.dumps({"error": {"message": "slow down", "type": "requests"}}).encode()]
    response = httpx.post(proxy.url + CHAT, json=body, headers=auth, timeout=10.0)
    assert response.status_code == 429
    seen.append(_everything_the_client_saw(response))

    assert {h.get("authorization") for h in fake.seen_headers} == {f"Bearer {CANARY}"}
    for text in seen:
        assert CANARY not in text
    usage_log = (tmp_path / "usage.jsonl").read_text()
    assert len(usage_log.splitlines()) == 4 and CANARY not in usage_log
    proxy.stop()
    assert CANARY not in proxy.stdout() + proxy.stderr()


@pytest.mark.parametrize("target", TARGETS, ids=["httpx", "aiohttp"])
@pytest.mark.sockets
def test_key_is_not_in_the_unreachable_upstream_error(tmp_path: Path, target: str) -> None:
    env = {
        "UPSTREAM_URL": "http://127.0.0.1:9",
        "USAGE_LOG": str(tmp_path / "usage.jsonl"),
        "UPSTREAM_API_KEY": CANARY,
    }
    with serve_subprocess(target, name="secrets-502", env=env) as proxy:
        response = httpx.post(proxy.url + CHAT, json={"stream": True}, timeout=20.0)
    assert response.status_code == 502
    assert CANARY not in _everything_the_client_saw(response)
    assert CANARY not in proxy.stdout() + proxy.stderr()


@pytest.mark.parametrize("module", [solutions.proxy, solutions.aiohttp_proxy])
def test_reference_reads_the_key_from_the_environment_only(module: ModuleType) -> None:
    source = Path(module.__file__ or "").read_text()
    # the aiohttp reference serves proxy.py's own route, which takes the key from the environment
    assert 'os.environ.get("UPSTREAM_API_KEY")' in source or "proxy_app(" in source
    assert not re.search(r"sk-[A-Za-z0-9_-]{8,}", source), "a key written into the reference"


# A key-shaped string: OpenAI/Anthropic style keys, AWS access keys, GitHub tokens.
KEY_SHAPES = re.compile(
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
)


def _outputs(path: Path) -> Iterator[str]:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            yield json.dumps(output)


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_outputs_hold_no_secret(path: Path) -> None:
    secrets = [
        value
        for name, value in os.environ.items()
        if re.search(r"KEY|TOKEN|SECRET|PASSWORD", name) and len(value) >= 12
    ]
    for text in _outputs(path):
        match = KEY_SHAPES.search(text)
        assert match is None, f"{path.name}: a key-shaped string in an output: {match.group()!r}"
        for value in secrets:
            assert value not in text, f"{path.name}: an environment secret in an output"


# ---------------------------------------------------------------------------------------------
# The grader: learner code sees no secrets and no other submission's files

# The sandbox lets learner code write only into its own folder, and a grading's network is its
# own, so the spy writes what it saw into its folder, where the test reads it (folder_reports).
SPY = """\
import os as _os
_report({{
    "env": dict(_os.environ),
    "cwd": _os.getcwd(),
    "listing": sorted(_os.listdir(".")),
    "other": _os.path.exists({other!r}),
}})
print("ENVIRONMENT", dict(_os.environ))  # feedback must not carry this either

"""


@pytest.mark.slow
@pytest.mark.sockets
def test_grader_runs_learner_code_without_secrets_or_other_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = tmp_path / "alice", tmp_path / "bob"
    mine.mkdir()
    theirs.mkdir()
    (mine / "notes.txt").write_text("alice's private notes")
    (theirs / "notes.txt").write_text(f"bob's notes {CANARY}")
    reference = Path(solutions.proxy.__file__).read_text()
    future_import = "from __future__ import annotations\n"
    head, _, rest = reference.partition(future_import)
    spy = REPORTER + SPY.format(other=str(theirs / "notes.txt"))
    (mine / "proxy.py").write_text(head + future_import + "\n" + spy + rest)

    with folder_reports(tmp_path / "homes", monkeypatch) as runs:
        env = {
            **os.environ,
            "UPSTREAM_API_KEY": CANARY,
            "OPENAI_API_KEY": CANARY,
            "LABKIT_INSTRUCTOR_SECRET": CANARY,
        }
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "labkit.cli",
                "grade",
                str(mine / "proxy.py"),
                "--only",
                "trickle",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=110,
            cwd=tmp_path,
        )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert CANARY not in result.stdout + result.stderr

    assert runs, "the submission never ran"
    for run in runs:
        assert CANARY not in json.dumps(run["env"]), "a secret reached learner code"
        assert not {"UPSTREAM_API_KEY", "OPENAI_API_KEY"} & set(run["env"])
        assert not Path(run["cwd"]).is_relative_to(mine), "graded in the learner's own folder"
        assert "notes.txt" not in run["listing"], run["listing"]
        assert Path(run["env"]["HOME"]) != Path.home()
        assert not Path(run["cwd"]).exists(), "the sandbox folder was left behind"
