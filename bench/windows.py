"""What a hang-up costs a real engine in the two windows the route watches (issue 43).

    python -m bench windows [--rounds N] [--out FILE.json]

On llama.cpp's ``llama-server`` (``make engine``), each through three paths: straight to the
engine, through ``solutions/proxy.py``, and through the same file with ``while_connected``
unwrapped (``await while_connected(request, x)`` made ``await x``), the proxy that watches no
client in the route.

- **A whole answer**: the engine as the lab runs it (four slots); a non-streamed request for
  WHOLE_TOKENS tokens (``ignore_eos``), the client hangs up after HANG_UP_S. Then the engine's
  decode counter over WATCH_S: the steps decoded after the hang-up, and when its running gauge
  fell to 0 (None: not within WATCH_S).
- **Queued**: the engine with one slot (``--parallel 1``). An occupier, straight to the engine,
  decodes a long answer; the probe, with a prompt of PROBE_SENTENCES sentences of its own, waits
  behind it, and its client hangs up after HANG_UP_S, before any header. Then the occupier is
  hung up on, so the slot frees, and the engine's books show whether it read the probe's prompt
  (the prompt tokens it counted beyond the occupier's) and what it predicted for it.

The unwatched proxy's upstream requests stay open until the proxy is stopped: it is stopped
after each measurement, which is what finally ends its generation. Prints a table; with
``--out`` writes the rounds as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labkit.capture import capture_stream
from labkit.checks.engine_requests import engine_body
from labkit.engine import EngineSettings, start_engine
from labkit.engine.serve import EngineHandle
from labkit.servers import serve_subprocess

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "proxy.py"
CHAT = "/v1/chat/completions"
WHOLE_TOKENS = 400
HANG_UP_S = 1.3  # off the engine's one-second ticks
WATCH_S = 4.0
OCCUPIER_TOKENS = 300
OCCUPY_S = 2.5
PROBE_SENTENCES = 30
PROBE_TOKENS = 50


def unwatched_source() -> str:
    """The reference with its route's watched await unwrapped."""
    source, count = re.subn(
        r"await while_connected\(request, (.+)\)\n", r"await \1\n", REFERENCE.read_text()
    )
    assert count == 1, count
    return source


def prompt_tokens(engine: EngineHandle) -> int:
    return int(engine.metrics().get("llamacpp:prompt_tokens_total", 0))


def whole_answer(engine: EngineHandle, url: str) -> dict[str, Any]:
    """Nothing reads the engine's books between the hang-up and WATCH_S later: every read is a
    task whose answer wakes the engine's waiting HTTP threads, and a whole answer's thread
    checks for a gone client only after a second without a wake-up (see
    labkit.checks.engine_books). Reading every 20 ms kept a direct client's hang-up hidden
    from it for as long as the reads went on."""
    engine.wait_until_idle(30)
    body = engine_body(engine.model, max_tokens=WHOLE_TOKENS, stream=False)
    decoded = engine.tokens_decoded()
    capture_stream(url + CHAT, json=body, disconnect_after_s=HANG_UP_S, timeout=30)
    before_hangup = engine.tokens_decoded() - decoded
    time.sleep(WATCH_S)
    return {
        "decoded_before_hangup": before_hangup,
        "decoded_after_hangup": engine.tokens_decoded() - decoded - before_hangup,
        "running_after_watch": engine.requests_running(),
        "watched_s": WATCH_S,
    }


def queued(engine: EngineHandle, url: str) -> dict[str, Any]:
    """The occupier's prompt is measured first (same length, its own nonce), so the prompt
    tokens the engine counts beyond it are the probe's. The occupier hangs up OCCUPY_S after it
    was sent, after the probe's client has left, and so frees the slot."""
    engine.wait_until_idle(30)
    calibration = engine_body(engine.model, max_tokens=1, stream=False)
    done = capture_stream(engine.url + CHAT, json=calibration, timeout=30)
    occupier_prompt = int(json.loads(done.body)["usage"]["prompt_tokens"])
    before = prompt_tokens(engine)
    occupier_body = engine_body(engine.model, max_tokens=OCCUPIER_TOKENS)
    occupier = threading.Thread(
        target=capture_stream,
        args=(engine.url + CHAT,),
        kwargs={"json": occupier_body, "disconnect_after_s": OCCUPY_S, "timeout": 30},
        daemon=True,
    )
    decoded = engine.tokens_decoded()
    occupier.start()
    deadline = time.monotonic() + 20
    while engine.tokens_decoded() - decoded < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    probe = engine_body(engine.model, max_tokens=PROBE_TOKENS, sentences=PROBE_SENTENCES)
    capture = capture_stream(url + CHAT, json=probe, disconnect_after_s=HANG_UP_S, timeout=30)
    occupier.join(30)
    time.sleep(1.0)  # the slot is free: whatever the engine does with the probe, it does now
    engine.wait_until_idle(30)
    return {
        "probe_got_headers_before_hangup": capture.status is not None,
        "probe_prompt_tokens_read_after_hangup": max(
            0, prompt_tokens(engine) - before - occupier_prompt
        ),
        "probe_sentences": PROBE_SENTENCES,
    }


def measure(
    experiment: Callable[[EngineHandle, str], dict[str, Any]],
    engine: EngineHandle,
    unwatched: Path,
) -> dict[str, dict[str, Any]]:
    out = {"direct": experiment(engine, engine.url)}
    for name, path in (("reference", REFERENCE), ("unwatched", unwatched)):
        proxy = serve_subprocess(
            str(path), name=f"windows-{name}", env={"UPSTREAM_URL": engine.url}
        )
        try:
            out[name] = experiment(engine, proxy.url)
        finally:
            proxy.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench windows", description=__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="windows-"))
    unwatched = folder / "unwatched.py"
    unwatched.write_text(unwatched_source())
    rounds: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        engine = start_engine(EngineSettings())
        whole = measure(whole_answer, engine, unwatched)
        engine = start_engine(EngineSettings(parallel=1))
        waiting = measure(queued, engine, unwatched)
        rounds.append({"whole_answer": whole, "queued": waiting})
        for window, seen in rounds[-1].items():
            for path, figures in seen.items():
                print(f"{window:13} {path:10} {json.dumps(figures)}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"rounds": rounds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
