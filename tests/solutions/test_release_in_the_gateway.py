"""The release policies inside labkit's stream gateway: a validation buffer in the stream path,
a restart policy, over real sockets (real mock, real uvicorn, real HTTP client)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit import Capture, MockUpstream, capture_stream, serve
from labkit.servers import ServerHandle
from labkit.stream_gateway import (
    ANSWERS_PATH,
    Immediate,
    ReleasePolicy,
    RestartPolicy,
    make_stream_gateway,
)
from labkit.stream_gateway._tool_calls import Failure, checked_calls, offered_schemas
from labkit.wire import says_something
from solutions import proxy as parts
from solutions.release import BySentence, Checked, WholeAnswer

CHAT = "/v1/chat/completions"
PACE = {"ttft_ms": 50, "tps": 100, "tokens": 40}
SENTENCE = re.compile(r"[^.!?]*[.!?]+")


def sentences(text: str) -> list[str]:
    """The whole sentences of an answer without filler, cut here on their own (not by the
    policy under test)."""
    return SENTENCE.findall(text)


def chat(seed: int, **scenario: object) -> dict[str, Any]:
    return {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": "Why is my broadband slow?"}],
        "stream": True,
        "mock": {**PACE, **scenario, "seed": seed},
    }


def gateway(mock: ServerHandle, release: Callable[[], ReleasePolicy] = BySentence) -> ServerHandle:
    app = make_stream_gateway(parts, mock.url, release=release)
    return serve(app, name=f"gateway-{getattr(release, 'name', 'custom')}")


@pytest.fixture
def by_sentence(mock: ServerHandle, usage_log: Path) -> Iterator[ServerHandle]:
    with gateway(mock) as server:
        yield server


def kinds(capture: Capture) -> list[str]:
    return [e.event for e in capture.events]


def data(capture: Capture, kind: str) -> list[dict[str, Any]]:
    return [e.json() for e in capture.events if e.event == kind]


def released(capture: Capture) -> list[str]:
    return [d["text"] for d in data(capture, "gateway.delta")]


def billing(usage_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in usage_log.read_text().splitlines()]


@pytest.mark.sockets
def test_a_start_event_with_the_request_id_comes_first_and_completion_last(
    by_sentence: ServerHandle, mock: ServerHandle, books: MockUpstream
) -> None:
    capture = capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(1))
    start = capture.events[0]
    assert start.event == "gateway.start"
    assert start.json()["request_id"] == capture.headers["x-request-id"]
    assert start.json()["release"] == "by_sentence"
    assert kinds(capture)[-1] == "gateway.completed" and capture.terminal == "completed"
    assert all(e.id and e.id.startswith(capture.headers["x-request-id"]) for e in capture.events)
    done = data(capture, "gateway.completed")[0]
    record = books.last()
    assert done["upstream_id"] == record["id"]
    assert done["usage"]["completion_tokens"] == record["tokens_generated"] == 40


@pytest.mark.sockets
def test_by_sentence_releases_whole_valid_sentences_and_the_same_text(
    by_sentence: ServerHandle, mock: ServerHandle
) -> None:
    direct = capture_stream(mock.url + CHAT, json=chat(2))
    through = capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(2))
    pieces = released(through)
    assert "".join(pieces) == direct.text
    assert all(p.endswith((".", "!", "?")) for p in pieces[:-1]), pieces  # the last: at the end
    whole = sentences(direct.text)
    assert pieces[: len(whole)] == whole
    assert len(pieces) == len(whole) + (1 if "".join(whole) != direct.text else 0)


@pytest.mark.sockets
def test_filler_is_held_until_the_first_sentence_so_first_useful_content_is_honest(
    mock: ServerHandle, usage_log: Path
) -> None:
    scenario = {"filler_tokens": 10, "tps": 20, "tokens": 30}
    with gateway(mock, Immediate) as immediate, gateway(mock, BySentence) as held:
        fast = capture_stream(immediate.url + ANSWERS_PATH, json=chat(3, **scenario))
        slow = capture_stream(held.url + ANSWERS_PATH, json=chat(3, **scenario))
        exported = httpx.get(held.url + "/metrics").text
    assert fast.ttft is not None and fast.first_useful_content is not None
    assert fast.first_useful_content - fast.ttft >= 0.35  # 10 blank tokens at 20/s
    assert slow.ttft is not None and slow.ttft == slow.first_useful_content
    assert not says_something(released(fast)[0])  # immediate: the filler goes out alone
    first = released(slow)[0]  # by sentence: the filler waits for, and goes with, a sentence
    assert first.startswith("\n") and says_something(first) and first.endswith(".")
    assert slow.first_useful_content >= fast.first_useful_content
    assert "gateway_first_useful_content_seconds_count 1.0" in exported
    assert "gateway_ttft_seconds_count 1.0" in exported


@pytest.mark.sockets
def test_a_rejected_sentence_is_never_shown_and_nothing_after_it(
    mock: ServerHandle, usage_log: Path
) -> None:
    direct = capture_stream(mock.url + CHAT, json=chat(4))
    complete = sentences(direct.text)
    first_words = set(complete[0].lower().replace(".", " ").split())
    banned = next(w for w in complete[1].lower().replace(".", " ").split() if w not in first_words)
    with gateway(mock, Checked(BySentence, lambda s: banned not in s.lower().split())) as server:
        capture = capture_stream(server.url + ANSWERS_PATH, json=chat(4))
    assert released(capture) == [complete[0]]
    end = data(capture, "gateway.interrupted")[0]
    assert end["reason"] == "rejected" and end["released_chars"] == len(complete[0])
    assert "gateway.completed" not in kinds(capture) and capture.terminal == "interrupted"


@pytest.mark.sockets
def test_whole_answer_releases_everything_at_the_end_or_nothing(
    mock: ServerHandle, usage_log: Path
) -> None:
    direct = capture_stream(mock.url + CHAT, json=chat(10))
    banned = sentences(direct.text)[-1].lower().replace(".", " ").split()[-1]
    with gateway(mock, WholeAnswer) as whole:  # (one at a time: serve() names them alike)
        released_whole = capture_stream(whole.url + ANSWERS_PATH, json=chat(10))
    with gateway(mock, Checked(WholeAnswer, lambda s: banned not in s.lower())) as strict:
        refused_whole = capture_stream(strict.url + ANSWERS_PATH, json=chat(10))
    assert released(released_whole) == [direct.text]  # one piece, after the upstream ended
    assert kinds(released_whole)[-2:] == ["gateway.delta", "gateway.completed"]
    assert released(refused_whole) == []  # one bad sentence at the end withholds all of it
    end = data(refused_whole, "gateway.interrupted")[0]
    assert end["reason"] == "rejected" and end["released_chars"] == 0


@pytest.mark.sockets
def test_a_refusal_discards_the_held_text_and_ends_interrupted(
    by_sentence: ServerHandle, mock: ServerHandle
) -> None:
    direct = capture_stream(mock.url + CHAT, json=chat(5, refusal_after=25))
    capture = capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(5, refusal_after=25))
    shown = "".join(released(capture))
    assert direct.text.startswith(shown) and len(shown) < len(direct.text)
    end = data(capture, "gateway.interrupted")[0]
    assert end["reason"] == "refusal" and end["restartable"] is False


@pytest.mark.sockets
def test_tool_calls_are_held_whole_and_sent_once_they_parse(
    by_sentence: ServerHandle,
) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "line_test",
            "parameters": {
                "type": "object",
                "properties": {"line": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
    capture = capture_stream(by_sentence.url + ANSWERS_PATH, json={**chat(6), "tools": [tool]})
    calls = data(capture, "gateway.tool_call")
    assert [c["name"] for c in calls] == ["line_test"]
    assert set(json.loads(calls[0]["arguments"])) == {"line", "days"}
    assert kinds(capture)[-2:] == ["gateway.tool_call", "gateway.completed"]
    assert released(capture) == []


@pytest.mark.sockets
def test_a_tool_call_cut_off_by_max_tokens_is_never_sent(by_sentence: ServerHandle) -> None:
    tool = {"type": "function", "function": {"name": "line_test", "parameters": LINE_TEST}}
    body = {**chat(6), "tools": [tool], "max_tokens": 4}
    capture = capture_stream(by_sentence.url + ANSWERS_PATH, json=body)
    assert data(capture, "gateway.tool_call") == []
    end = data(capture, "gateway.interrupted")[0]
    assert end["reason"] == "invalid_tool_call" and "'length'" in end["message"]


LINE_TEST = {
    "type": "object",
    "properties": {"line": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["line", "days"],
}
VALID_CALL = {"id": "call_1", "name": "line_test", "arguments": '{"line": "A1", "days": 3}'}


@pytest.mark.parametrize(
    ("call", "finish", "problem"),
    [
        (VALID_CALL, "length", "finish_reason 'length', not 'tool_calls'"),
        (VALID_CALL, "stop", "finish_reason 'stop', not 'tool_calls'"),
        ({**VALID_CALL, "name": "reboot"}, "tool_calls", "'reboot', a tool the request did not"),
        ({**VALID_CALL, "arguments": '{"line": "A1", "da'}, "tool_calls", "not JSON"),
        ({**VALID_CALL, "arguments": '{"line": "A1"}'}, "tool_calls", "'days' is a required"),
        ({**VALID_CALL, "arguments": '{"line": "A1", "days": "3"}'}, "tool_calls", "'3' is not"),
    ],
)
def test_a_held_tool_call_is_sent_only_once_validated(
    call: dict[str, str], finish: str, problem: str
) -> None:
    schemas = offered_schemas(
        {
            "tools": [
                {"type": "function", "function": {"name": "line_test", "parameters": LINE_TEST}}
            ]
        }
    )
    assert checked_calls({0: VALID_CALL}, "tool_calls", schemas) == [(0, VALID_CALL)]
    assert checked_calls({}, "stop", schemas) == []  # a text answer has nothing to check
    with pytest.raises(Failure) as failed:
        checked_calls({0: VALID_CALL, 1: call}, finish, schemas)
    assert failed.value.reason == "invalid_tool_call"
    assert problem in failed.value.message


@pytest.mark.sockets
def test_the_gateway_restarts_only_while_nothing_was_shown(
    by_sentence: ServerHandle, books: MockUpstream, usage_log: Path
) -> None:
    books.reset()
    early = capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(7, error_after=0))
    assert kinds(early) == [
        "gateway.start",
        "gateway.restarting",
        "gateway.interrupted",
    ]  # the mock fails the same way twice: two attempts, then an honest end
    assert data(early, "gateway.interrupted")[0]["attempts"] == 2
    assert len(books.requests()) == 2
    books.reset()
    late = capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(7, error_after=30))
    end = data(late, "gateway.interrupted")[0]
    assert "gateway.restarting" not in kinds(late) and released(late)
    assert end["reason"] == "upstream_error" and "already shown" in end["why"]
    assert len(books.requests()) == 1
    outcomes = [line["outcome"] for line in billing(usage_log)]
    assert outcomes == ["error", "error", "error"]  # every upstream request is billed


@pytest.mark.sockets
def test_a_client_that_leaves_stops_the_upstream_and_is_billed_cancelled(
    by_sentence: ServerHandle, books: MockUpstream, usage_log: Path
) -> None:
    capture_stream(by_sentence.url + ANSWERS_PATH, json=chat(8, tps=20), disconnect_after_events=2)
    assert books.wait_until_idle(timeout=5.0)
    assert books.last()["state"] == "cancelled"
    assert [line["outcome"] for line in billing(usage_log)] == ["cancelled"]


@pytest.mark.sockets
def test_last_event_id_is_refused_with_what_to_do_instead(by_sentence: ServerHandle) -> None:
    response = httpx.post(
        by_sentence.url + ANSWERS_PATH, json=chat(9), headers={"Last-Event-ID": "req_x:4"}
    )
    assert response.status_code == 409
    message = response.json()["error"]["message"]
    assert "keeps no replay buffer" in message and "Send a new request" in message


@pytest.mark.parametrize(
    ("reason", "shown", "attempt", "allowed"),
    [
        ("upstream_error", 0, 1, True),
        ("upstream_dropped", 0, 1, True),
        ("upstream_status", 0, 2, False),
        ("upstream_error", 12, 1, False),
        ("refusal", 0, 1, False),
        ("rejected", 0, 1, False),
    ],
)
def test_the_restart_policy(reason: str, shown: int, attempt: int, allowed: bool) -> None:
    assert RestartPolicy(max_attempts=2).decide(reason, shown, attempt)[0] is allowed


def test_the_gateways_public_names_are_its_all_and_the_same_from_labkit() -> None:
    """The package's surface is its sorted ``__all__`` (the rest is in private modules), and
    ``from labkit import make_stream_gateway, RestartPolicy`` (notebook 12) gives the same
    objects."""
    import labkit
    import labkit.stream_gateway as package

    assert package.__all__ == sorted(package._WHERE)
    assert all(getattr(package, name) is not None for name in package.__all__)
    assert labkit.make_stream_gateway is package.make_stream_gateway is make_stream_gateway
    assert labkit.RestartPolicy is package.RestartPolicy is RestartPolicy
    unknown = re.escape("module 'labkit.stream_gateway' has no attribute 'Relay'")
    with pytest.raises(AttributeError, match=unknown):
        package.Relay  # noqa: B018  # private: import it from labkit.stream_gateway._relay
