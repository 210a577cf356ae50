"""interpret_event / interpret_body: what each provider's frames mean."""

from __future__ import annotations

import json
from typing import Any

from labkit.wire import Meaning, interpret_body, interpret_event


def meaning(data: Any, event: str = "message") -> Meaning:
    return interpret_event(event, data if isinstance(data, str) else json.dumps(data))


def chat_chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}], **extra}


def test_chat_role_only_first_chunk_is_not_a_token() -> None:
    assert meaning(chat_chunk({"role": "assistant", "content": ""})) == Meaning()


def test_chat_content_and_tool_arguments_are_tokens() -> None:
    assert meaning(chat_chunk({"content": "Hi"})) == Meaning(token=True, text="Hi", useful=True)
    tool = {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}
    assert meaning(chat_chunk(tool)) == Meaning(token=True, useful=True)


def test_chat_usage_chunk_and_done() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert meaning({"object": "chat.completion.chunk", "choices": [], "usage": usage}) == Meaning(
        usage=usage
    )
    assert meaning("[DONE]") == Meaning(terminal="done")


def test_chat_in_stream_error_is_a_terminal_error() -> None:
    error = {"message": "boom", "type": "server_error"}
    assert meaning({"error": error}) == Meaning(terminal="error", error=error)


def test_a_broken_frame_is_marked_malformed() -> None:
    assert meaning("{not json") == Meaning(malformed=True)


def test_anthropic_events() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}
    assert meaning(start, "message_start").usage == {"input_tokens": 9, "output_tokens": 1}
    delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hey"}}
    assert meaning(delta, "content_block_delta") == Meaning(token=True, text="Hey", useful=True)
    ping = {"type": "ping"}
    assert meaning(ping, "ping") == Meaning()
    end = {"type": "message_delta", "usage": {"output_tokens": 12}}
    assert meaning(end, "message_delta").usage == {"output_tokens": 12}
    assert meaning({"type": "message_stop"}, "message_stop").terminal == "message_stop"
    error = {"type": "overloaded_error", "message": "Overloaded"}
    assert meaning({"type": "error", "error": error}, "error") == Meaning(
        terminal="error", error=error
    )


def test_responses_events() -> None:
    delta: dict[str, Any] = {"type": "response.output_text.delta", "delta": "Yo"}
    assert meaning(delta, delta["type"]) == Meaning(token=True, text="Yo", useful=True)
    usage = {"input_tokens": 2, "output_tokens": 7}
    done: dict[str, Any] = {"type": "response.completed", "response": {"usage": usage}}
    assert meaning(done, done["type"]) == Meaning(usage=usage, terminal="response.completed")
    failed: dict[str, Any] = {"type": "response.failed", "response": {"error": {"code": "x"}}}
    assert meaning(failed, failed["type"]) == Meaning(terminal="error", error={"code": "x"})


def test_unary_bodies_of_each_api() -> None:
    usage = {"prompt_tokens": 1}
    chat = {"choices": [{"message": {"content": "a"}}], "usage": usage}
    assert interpret_body(chat) == Meaning(text="a", usage=usage)
    message = {"type": "message", "content": [{"type": "text", "text": "b"}]}
    assert interpret_body(message).text == "b"
    response = {"object": "response", "output": [{"content": [{"text": "c"}]}]}
    assert interpret_body(response).text == "c"
    assert interpret_body({"error": {"type": "x"}}) == Meaning(
        terminal="error", error={"type": "x"}
    )
