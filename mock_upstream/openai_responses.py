"""OpenAI Responses: ``POST /v1/responses``, streamed (and unary).

Stream grammar (``event:`` + ``data:``; every event carries ``sequence_number`` from 0)::

    response.created, response.in_progress
    per text part:  response.output_item.added (message), response.content_part.added,
                    response.output_text.delta ..., response.output_text.done,
                    response.content_part.done, response.output_item.done
    per tool call:  response.output_item.added (function_call),
                    response.function_call_arguments.delta ...,
                    response.function_call_arguments.done, response.output_item.done
    then one of:    response.completed | response.incomplete (max_output_tokens,
                    content_filter) | response.failed (injected error)

A refusal (``refusal_after``) ends the answer ``response.incomplete`` with reason
``content_filter``; with ``refusal_deltas`` it is said as OpenAI says a refusal instead: the
text part is closed, a ``refusal`` content part follows in the same message
(``response.content_part.added``, ``response.refusal.delta`` ..., ``response.refusal.done``,
``response.content_part.done``), and the response is ``response.completed``. The refusal's
words are fixed (:data:`REFUSAL`) and are not counted as completion tokens.

``"background": true`` (with ``"stream": true``; without it the mock answers a 400) makes the
answer a background response (:mod:`mock_upstream.background`): the same events, its response
objects saying ``"background": true``, and :meth:`ResponsesWire.snapshot` says how the response
stands at any moment, for ``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from mock_upstream.bodies import (
    content_text,
    optional_bool,
    optional_int,
    optional_list,
    optional_str,
)
from mock_upstream.errors import Flavour, bad_request
from mock_upstream.events import (
    Delta,
    Dropped,
    Ended,
    Event,
    Failed,
    Finished,
    Malformed,
    Opened,
    PartStarted,
    PartStopped,
    Usage,
)
from mock_upstream.exchange import Parsed
from mock_upstream.ids import new_id
from mock_upstream.plan import Part, Plan, Prompt, ToolSpec
from mock_upstream.scenario import Scenario
from mock_upstream.sse import frame
from mock_upstream.stream import Outcome
from mock_upstream.tokenizer import tokenize

NAME: Final = "responses"
ID_PREFIX: Final = "resp_"
CALL_ID_PREFIX: Final = "call_"
DEFAULT_MODEL: Final = "mock-gpt"
#: What a refusal says with ``refusal_deltas``, one ``response.refusal.delta`` per token.
REFUSAL: Final = "I'm sorry, but I can't help with that request."


def _input_text(body: dict[str, Any]) -> str:
    if "input" not in body:
        raise bad_request("Missing required parameter: 'input'.", "input")
    value = body["input"]
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value:
        texts = []
        for number, item in enumerate(value):
            where = f"input[{number}]"
            if not isinstance(item, dict):
                raise bad_request(f"'{where}' must be an object.", where)
            texts.append(content_text(item.get("content"), f"{where}.content"))
    else:
        raise bad_request("'input' must be a string or a non-empty array of items.", "input")
    instructions = optional_str(body, "instructions", "")
    return "\n".join([instructions, *texts] if instructions else texts)


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = []
    for number, tool in enumerate(optional_list(body, "tools")):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise bad_request(
                f'\'tools[{number}]\' must be {{"type": "function", "name": ...}}.',
                f"tools[{number}].name",
            )
        parameters = tool.get("parameters")
        tools.append(ToolSpec(tool["name"], parameters if isinstance(parameters, dict) else {}))
    return tuple(tools)


def _tool_choice(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        return str(choice["name"])
    raise bad_request(
        '\'tool_choice\' must be "auto", "none", "required" or {"type": "function", "name": ...}.',
        "tool_choice",
    )


def parse(body: dict[str, Any]) -> Parsed:
    """Read a responses request."""
    prompt = Prompt(
        text=_input_text(body),
        model=optional_str(body, "model", DEFAULT_MODEL),
        seed=optional_int(body, "seed"),
        max_tokens=optional_int(body, "max_output_tokens", 1),
        tools=_tools(body),
        tool_choice=_tool_choice(body),
        parallel_tool_calls=optional_bool(body, "parallel_tool_calls", True),
    )
    stream = optional_bool(body, "stream")
    background = optional_bool(body, "background")
    if background and not stream:
        raise bad_request(
            'The mock runs a background response only as a stream: send "stream": true with '
            '"background": true (a reader who leaves resumes it with GET /v1/responses/{id}'
            "?stream=true&starting_after=N), or leave background out.",
            "background",
        )
    return Parsed(prompt=prompt, stream=stream, include_usage=False, background=background)


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


class ResponsesWire:
    """Responses events for one answer; keeps the output items for the final response."""

    flavour: Flavour = "openai"

    def __init__(self, response_id: str, plan: Plan, parsed: Parsed, scenario: Scenario) -> None:
        self.id = response_id
        self.plan = plan
        self.opened = False
        self.created = int(time.time())
        self.sequence = 0
        self.items: list[dict[str, Any]] = []  # output items, in output_index order
        self.item_ids: dict[int, str] = {}  # part index -> item id
        self.texts: dict[int, str] = {}  # part index -> text or arguments so far
        self.refusal_deltas = scenario.refusal_deltas
        self.refusals: dict[int, str] = {}  # part index -> refusal said in that message
        self.background = parsed.background
        self.final: dict[str, Any] | None = None  # the response object of the terminal event

    # -- building blocks ----------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return frame(payload, kind)

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            **({"background": True} if self.background else {}),
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "model": self.plan.model,
            "output": [],
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "usage": None,
            **fields,
        }

    def _terminal(self, kind: str, response: dict[str, Any]) -> str:
        """The event that ends the answer; its response object is the final one."""
        self.final = response
        return self._event(kind, response=response)

    def _item(self, index: int, part: Part, status: str) -> dict[str, Any]:
        text = self.texts.get(index, "")
        if part.kind == "text":
            content: list[dict[str, Any]] = (
                [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
                if status != "in_progress"
                else []
            )
            if index in self.refusals and status != "in_progress":
                content.append({"type": "refusal", "refusal": self.refusals[index]})
            return {
                "id": self.item_ids[index],
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": content,
            }
        return {
            "id": self.item_ids[index],
            "type": "function_call",
            "status": status,
            "call_id": part.call_id,
            "name": part.name,
            "arguments": text,
        }

    def _text_done(self, index: int) -> str:
        """The events that finish an output item's text part."""
        item_id, text = self.item_ids[index], self.texts[index]
        frames = self._event(
            "response.output_text.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            text=text,
            logprobs=[],
        )
        return frames + self._event(
            "response.content_part.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part={"type": "output_text", "text": text, "annotations": [], "logprobs": []},
        )

    def _refusal(self, index: int) -> str:
        """A refusal part after the text part of message ``index``, said token by token."""
        item_id = self.item_ids[index]
        where = {"item_id": item_id, "output_index": index, "content_index": 1}
        frames = self._event(
            "response.content_part.added", **where, part={"type": "refusal", "refusal": ""}
        )
        for token in tokenize(REFUSAL):
            frames += self._event("response.refusal.delta", **where, delta=token)
        self.refusals[index] = REFUSAL
        frames += self._event("response.refusal.done", **where, refusal=REFUSAL)
        return frames + self._event(
            "response.content_part.done", **where, part={"type": "refusal", "refusal": REFUSAL}
        )

    def _refuse(self) -> str:
        """Close the open text part (or open a message) and say the refusal in it."""
        open_parts = [i for i in self.item_ids if i >= len(self.items)]
        frames = "".join(
            self._close(i, self.plan.parts[i], "completed")
            for i in open_parts
            if self.plan.parts[i].kind != "text"
        )
        text = next((i for i in open_parts if self.plan.parts[i].kind == "text"), None)
        part = Part("text", ())
        if text is None:  # refused before any text: a message of its own
            text = len(self.item_ids)
            frames += self.encode(PartStarted(text, part))
        frames += self._text_done(text) + self._refusal(text)
        item = self._item(text, part, "completed")
        self.items.append(item)
        return frames + self._event("response.output_item.done", output_index=text, item=item)

    def _close(self, index: int, part: Part, status: str) -> str:
        """The events that finish one output item."""
        item_id, text = self.item_ids[index], self.texts[index]
        if part.kind == "text":
            frames = self._text_done(index)
        else:
            frames = self._event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=part.name,
                arguments=text,
            )
        item = self._item(index, part, status)
        self.items.append(item)
        return frames + self._event("response.output_item.done", output_index=index, item=item)

    def _close_open(self, status: str) -> str:
        open_parts = [i for i in self.item_ids if i >= len(self.items)]
        return "".join(self._close(i, self.plan.parts[i], status) for i in open_parts)

    # -- Wire ---------------------------------------------------------------------------
    def encode(self, event: Event) -> str:
        if isinstance(event, Opened):
            self.opened = True
            response = self._response("in_progress")
            return self._event("response.created", response=response) + self._event(
                "response.in_progress", response=response
            )
        if isinstance(event, PartStarted):
            index, part = event.index, event.part
            self.item_ids[index] = new_id("msg_" if part.kind == "text" else "fc_")
            self.texts[index] = ""
            frames = self._event(
                "response.output_item.added",
                output_index=index,
                item=self._item(index, part, "in_progress"),
            )
            if part.kind == "text":
                frames += self._event(
                    "response.content_part.added",
                    item_id=self.item_ids[index],
                    output_index=index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                )
            return frames
        if isinstance(event, Delta):
            self.texts[event.index] += event.text
            if event.part.kind == "text":
                return self._event(
                    "response.output_text.delta",
                    item_id=self.item_ids[event.index],
                    output_index=event.index,
                    content_index=0,
                    delta=event.text,
                    logprobs=[],
                )
            return self._event(
                "response.function_call_arguments.delta",
                item_id=self.item_ids[event.index],
                output_index=event.index,
                delta=event.text,
            )
        if isinstance(event, PartStopped):
            return self._close(event.index, event.part, "completed")
        if isinstance(event, Finished):
            if event.reason == "refusal" and self.refusal_deltas:
                frames = self._refuse()
                response = self._response("completed", output=self.items, usage=_usage(event.usage))
                return frames + self._terminal("response.completed", response)
            if event.reason in ("stop", "tool_calls"):
                response = self._response("completed", output=self.items, usage=_usage(event.usage))
                return self._terminal("response.completed", response)
            reason = "max_output_tokens" if event.reason == "length" else "content_filter"
            frames = self._close_open("incomplete")
            response = self._response(
                "incomplete",
                output=self.items,
                usage=_usage(event.usage),
                incomplete_details={"reason": reason},
            )
            return frames + self._terminal("response.incomplete", response)
        if isinstance(event, Failed):
            # A failure before the first token still comes after response.created: the
            # Responses grammar opens every stream with it.
            frames = "" if self.opened else self.encode(Opened())
            frames += self._close_open("incomplete")
            error = {
                "code": "server_error",
                "message": "The server had an error while generating the response "
                f"(mock scenario error_after={event.usage.completion_tokens}).",
            }
            response = self._response(
                "failed", output=self.items, usage=_usage(event.usage), error=error
            )
            return frames + self._terminal("response.failed", response)
        if isinstance(event, Malformed):
            return 'event: response.output_text.delta\ndata: {"type":"response.output_te\n\n'
        assert isinstance(event, Dropped | Ended)
        return ""

    # -- a background response as it stands --------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The response object now: ``queued`` before the answer opens, ``in_progress`` with
        the output items finished so far, then the one its terminal event carried (or the
        cancelled one)."""
        if self.final is not None:
            return self.final
        return self._response("in_progress" if self.opened else "queued", output=list(self.items))

    def cancel(self) -> dict[str, Any]:
        """The answer was cancelled: from now on the response is ``cancelled``, with the output
        items finished before it and no usage (as OpenAI answers a cancel)."""
        self.final = self._response("cancelled", output=list(self.items))
        return self.final

    def body(self, outcome: Outcome) -> dict[str, Any]:
        for index, (part, text) in enumerate(outcome.parts):
            self.item_ids[index] = new_id("msg_" if part.kind == "text" else "fc_")
            self.texts[index] = text
        status = "completed" if outcome.finish in ("stop", "tool_calls") else "incomplete"
        items = [self._item(i, part, status) for i, (part, _) in enumerate(outcome.parts)]
        details = None
        if status == "incomplete":
            reason = "max_output_tokens" if outcome.finish == "length" else "content_filter"
            details = {"reason": reason}
        return self._response(
            status, output=items, usage=_usage(outcome.usage), incomplete_details=details
        )
