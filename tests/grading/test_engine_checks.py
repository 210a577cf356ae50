"""The parts of grading against a real engine that need no engine: how its books, its sockets
and its prompts are read, which checks it leaves out and why, and the command line."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path

import pytest

from labkit.checks import arun_checks
from labkit.checks.catalogue import BY_ID, CHECK_IDS, ENGINE_IDS
from labkit.checks.engine_books import Books, Watch
from labkit.checks.engine_requests import MAX_PROMPT_TOKENS, PromptRate, engine_body
from labkit.checks.engine_sockets import EngineSockets, tcp_ends
from labkit.checks.machine import Budget
from labkit.cli import main
from labkit.grading.report import SubmissionReport, render_table
from labkit.grading.rubric import Rubric

# Two lines of /proc/net/tcp: a listener on 8080 (0x1F90) and the engine's end of a connection
# from port 0xD431 that its peer has closed (08: CLOSE_WAIT).
ONE_CPU = Budget(cpus=1.0)
TCP_TABLE = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:1F90 0100007F:D431 08 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:D431 0100007F:1F90 05 00000000:00000000 00:00000000 00000000     0        0 3 1
"""


def books(at: float, *, running: int = 1, decoded: int = 0, read: int = 0) -> Books:
    return Books(at, running, decoded, 0, read, 0)


def test_tcp_ends_are_the_peers_of_one_local_port_with_our_ends_state() -> None:
    assert tcp_ends(TCP_TABLE, 8080) == {("0100007F", 0xD431): "08"}
    assert tcp_ends(TCP_TABLE, 0xD431) == {("0100007F", 8080): "05"}
    assert tcp_ends("garbage\n1: x y\n", 8080) == {}


def test_engine_sockets_are_seen_only_for_an_engine_on_this_machine() -> None:
    assert EngineSockets.for_url("http://example.com:8080") is None
    assert EngineSockets.for_url("http://127.0.0.1") is None  # no port to look for
    local = EngineSockets.for_url("http://127.0.0.1:8080")
    assert local is not None and local.port == 8080


@pytest.mark.sockets
def test_a_connection_closed_by_the_client_is_seen_at_once() -> None:
    """What ``cancel_before_first_token`` times on the engine: the peer's close, not ours."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    sockets = EngineSockets.for_url(f"http://127.0.0.1:{port}")
    assert sockets is not None
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    watched = sockets.open_ends()
    assert len(watched) == 1

    async def close_then_watch() -> float:
        closed = time.time()
        client.close()
        at = await sockets.closed_by_peer(watched, 10.0)
        assert at is not None, "the client's close was not seen in 10 s"
        return at - closed

    # Seen within a poll or two (about 0.01 s), or not within 10 s: a bound of 1 s keeps the
    # two 10x apart, where 0.2 s failed once at 0.28 s on a loaded machine (polls read /proc).
    try:
        assert asyncio.run(close_then_watch()) < 1.0
    finally:
        accepted.close()
        server.close()


@pytest.mark.sockets
def test_a_connection_the_engine_closed_first_is_not_the_clients_doing() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    sockets = EngineSockets(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    watched = sockets.open_ends()
    accepted.close()  # the engine's end first: FIN_WAIT, then TIME_WAIT when the client closes
    client.close()
    try:
        assert asyncio.run(sockets.closed_by_peer(watched, 0.3)) is None
    finally:
        server.close()


def test_books_since_subtracts_counters_and_keeps_the_gauge() -> None:
    before = Books(10.0, 0, 5, 7, 100, 20)
    after = Books(12.5, 1, 9, 10, 130, 44)
    assert after.since(before) == Books(2.5, 1, 4, 3, 30, 24)
    assert after.since(before).prompt == 54  # what a usage chunk's prompt_tokens counts


def test_generation_runs_from_the_prompt_read_to_the_last_decoded_token() -> None:
    watch = Watch(None, 0.05)  # type: ignore[arg-type]  # samples only: no engine read
    watch.samples = [
        books(1.0),
        books(1.1, decoded=1),  # a prompt step: decoded moves, the prompt is not read yet
        books(1.2, decoded=2, read=40),  # the prompt read: the first token comes from here
        books(1.3, decoded=3, read=40),
        books(1.4, decoded=4, read=40),
        books(1.5, decoded=4, read=40, running=0),
    ]
    assert watch.generation() == (1.2, 1.4)
    watch.samples = [books(1.0), books(1.1)]
    assert watch.generation() is None


def test_a_prompt_is_sized_in_seconds_of_the_engines_reading_and_capped() -> None:
    rate = PromptRate(tokens_per_s=100.0, tokens_per_sentence=12.5)
    assert rate.sentences_for(4.0) == 32
    assert rate.seconds_for(32) == pytest.approx(4.0)
    fast = PromptRate(tokens_per_s=10_000.0, tokens_per_sentence=10.0)
    assert fast.sentences_for(4.0) == MAX_PROMPT_TOKENS // 10


def test_engine_requests_ask_for_exact_lengths_and_never_repeat_a_prompt() -> None:
    one, two = (engine_body("m", max_tokens=8, sentences=2, include_usage=True) for _ in "ab")
    assert one["max_tokens"] == 8 and one["ignore_eos"] is True
    assert one["stream_options"] == {"include_usage": True}
    assert one["messages"][0]["content"] != two["messages"][0]["content"]


def test_every_check_runs_on_the_engine_or_says_in_one_line_why_not() -> None:
    assert ENGINE_IDS == (
        "trickle",
        "cancel",
        "cancel_before_first_token",
        "cancel_queued",
        "cancel_whole_answer",
        "usage",
        "concurrency",
    )
    for check in BY_ID.values():
        if not check.on_engine:
            assert check.mock_only.startswith("needs "), check.id
            assert not re.search(r"\d", check.mock_only), check.id  # it becomes a verdict
        else:
            assert check.engine_budget_s > 0 and not check.mock_only, check.id


def test_checks_that_need_the_mock_come_back_skipped_with_their_reason() -> None:
    """No engine is touched: nothing it could run was asked for."""
    only = ["midstream_error", "tool_calls"]
    results = asyncio.run(
        arun_checks(
            "http://127.0.0.1:9", upstream_url="http://127.0.0.1:9", only=only, upstream="engine"
        )
    )
    assert [str(r) for r in results] == [
        "SKIP midstream_error: not run on the engine: needs fault injection, which only the "
        "mock does (an error after the first token)",
        "SKIP tool_calls: not run on the engine: needs parallel tool-call deltas on demand, "
        "which only the mock sends",
    ]
    assert all(r.skipped and not r.inconclusive for r in results)


def test_the_engine_time_limit_covers_its_checks_one_after_another() -> None:
    rubric = Rubric(submission_timeout_s=10.0)
    engine = sum(BY_ID[i].engine_budget_s for i in ENGINE_IDS)
    assert rubric.time_limit_s(CHECK_IDS, engine=True, budget=ONE_CPU) >= engine
    assert rubric.time_limit_s(CHECK_IDS, budget=ONE_CPU) < engine


def test_the_report_names_the_engine_and_reads_it_back() -> None:
    results = asyncio.run(
        arun_checks("http://x:9", upstream_url="http://x:9", only=["tool_calls"], upstream="engine")
    )
    report = SubmissionReport("p.py", "p.py", results, Rubric(), upstream="engine m at http://e")
    assert "  upstream: engine m at http://e" in render_table(report).splitlines()
    assert SubmissionReport.from_json(report.to_json(), Rubric()).upstream == report.upstream
    plain = SubmissionReport("p.py", "p.py", results, Rubric())
    assert plain.to_json()["upstream"] == "mock"
    assert SubmissionReport.from_json(plain.to_json(), Rubric()).upstream == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["grade-class", "x", "--out", "y", "--engine"], "unrecognized arguments: --engine"),
        (
            ["grade-url", "http://127.0.0.1:9", "--engine"],
            "argument --engine: expected one argument",
        ),
        (
            ["grade-url", "http://127.0.0.1:9", "--upstream", "http://m", "--engine", "http://e"],
            "argument --engine: not allowed with argument --upstream",
        ),
    ],
)
def test_engine_usage_errors_are_refused_by_the_commands_parser_with_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class is graded against the mock (one engine shared by every check cannot grade many
    proxies at once); a running proxy needs the URL of the engine it already forwards to."""
    assert main(argv) == 2
    assert capsys.readouterr().err.endswith(f"labkit {argv[0]}: error: {message}\n")


@pytest.mark.sockets
def test_an_engine_that_does_not_answer_is_a_setup_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = tmp_path / "proxy.py"
    proxy.write_text("app = None\n")
    assert main(["grade", str(proxy), "--engine", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: Expected the engine's own numbers from http://127.0.0.1:9/v1/models"
    )
