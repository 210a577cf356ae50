"""Notebook 14's ``predict`` part is graded without a browser, against the chat page's state
machine written again in Python (``labkit.chat.twin``: ``page_input`` and ``page_state``). The
two must agree: the Python twin follows the JavaScript rule by rule here, and the JavaScript is
pinned by its digest, so a change to the page's machine fails this test until the twin is
brought along.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from labkit.chat import machine_source
from labkit.chat.twin import page_input, page_state

#: sha256 of ``machine_source()`` when ``page_input``/``page_state`` were last checked against it.
MACHINE_DIGEST = "38d95962c8ceaf6c61b0e809d66151b3b5de9311ee2468a479695fa0b0af1d46"


def test_the_pages_machine_is_the_one_the_python_twin_was_checked_against() -> None:
    digest = hashlib.sha256(machine_source().encode()).hexdigest()
    assert digest == MACHINE_DIGEST, (
        "the chat page's state machine (labkit/chat/page.html) changed: bring "
        "labkit/chat/twin.py's page_input and page_state along (nb14.predict is graded by "
        "them), then set "
        f"MACHINE_DIGEST to {digest}"
    )


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("[DONE]", "done"),
        (" [DONE] ", "done"),
        ("not json", "ignore"),
        ("null", "ignore"),
        ("[1]", "ignore"),
        (json.dumps({"error": {"message": "upstream failed"}}), "error"),
        (_chunk({"role": "assistant", "content": ""}), "ignore"),
        (_chunk({"content": "Hel"}), "token"),
        (_chunk({"refusal": "I can't"}), "refusal"),
        (_chunk({}, "content_filter"), "refusal"),
        (_chunk({"content": "x"}, "content_filter"), "token"),  # the content comes first
        (_chunk({}, "stop"), "finish"),
        (json.dumps({"choices": [], "usage": {"total_tokens": 3}}), "ignore"),
        (json.dumps({"choices": ["odd"]}), "ignore"),
    ],
)
def test_page_input_reads_an_event_as_the_pages_input_of_does(data: str, expected: str) -> None:
    assert page_input(data) == expected


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ([], "connecting"),
        (["ignore", "token", "finish", "done", "eof"], "completed"),
        (["token", "refusal", "done", "eof"], "interrupted"),  # terminal before its [DONE]
        (["token", "cancel", "done"], "cancelled"),
        (["token", "token", "eof"], "interrupted"),  # cut: no [DONE]
        (["error"], "interrupted"),
        (["done", "cancel"], "completed"),  # terminal states never change
        (["finish"], "connecting"),
        (["token", "drop"], "reconnecting"),  # a resumable stream's connection failed
        (["drop"], "reconnecting"),  # before the first token too
        (["token", "drop", "token", "done", "eof"], "completed"),  # resumed
        (["token", "drop", "drop", "token"], "generating"),  # dropped again while resuming
        (["token", "drop", "eof"], "interrupted"),  # the resume failed
        (["token", "drop", "cancel"], "cancelled"),  # Stop while reconnecting
        (["done", "drop"], "completed"),  # terminal states never change
    ],
)
def test_page_state_follows_the_pages_next_state(inputs: list[str], expected: str) -> None:
    assert page_state(inputs) == expected
