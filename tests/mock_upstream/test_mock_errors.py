"""Bad requests get a 4xx in the provider's shape; nothing the client sends gives a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mock_support import USER, LiveServer

pytestmark = pytest.mark.sockets

ROUTES = ["/v1/chat/completions", "/v1/responses", "/v1/messages"]


def assert_openai_error(response: Any, status: int, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param
    error: dict[str, Any] = body["error"]
    return error


def assert_anthropic_error(response: Any, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error_type
    message: str = body["error"]["message"]
    return message


def test_invalid_json_is_a_400_in_openai_shape(server: LiveServer) -> None:
    response = server.client.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    error = assert_openai_error(response, 400, None)
    assert error["type"] == "invalid_request_error"
    assert "not valid JSON" in error["message"]


def test_invalid_json_is_a_400_in_anthropic_shape(server: LiveServer) -> None:
    response = server.client.post("/v1/messages", content=b"[1, 2")
    assert "not valid JSON" in assert_anthropic_error(response, 400, "invalid_request_error")


def test_missing_messages_names_the_field(server: LiveServer) -> None:
    error = assert_openai_error(
        server.client.post("/v1/chat/completions", json={"model": "m"}), 400, "messages"
    )
    assert error["message"] == "Missing required parameter: 'messages'."
    message = assert_anthropic_error(
        server.client.post("/v1/messages", json={"model": "m", "max_tokens": 5}),
        400,
        "invalid_request_error",
    )
    assert "'messages'" in message


def test_missing_input_names_the_field(server: LiveServer) -> None:
    assert_openai_error(server.client.post("/v1/responses", json={"model": "m"}), 400, "input")


def test_unknown_scenario_key_names_the_key_and_lists_the_valid_ones(server: LiveServer) -> None:
    response = server.client.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": USER},
        headers={"X-Mock-Scenario": "ttft=5"},
    )
    error = assert_openai_error(response, 400, "X-Mock-Scenario.ttft")
    assert error["code"] == "invalid_scenario"
    assert error["message"].startswith("X-Mock-Scenario: unknown key 'ttft': expected one of ")
    assert "ttft_ms" in error["message"]


def test_out_of_range_scenario_value_in_the_body_says_what_was_expected(
    server: LiveServer,
) -> None:
    response = server.client.post(
        "/v1/messages", json={"max_tokens": 5, "messages": USER, "mock": {"tps": 0}}
    )
    message = assert_anthropic_error(response, 400, "invalid_request_error")
    assert message == "mock: tps=0 is not valid: expected a number > 0"


def test_bad_field_types_name_the_field(server: LiveServer) -> None:
    cases = [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"content": "hi"}]}, "messages[0].role"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "tools": [{"type": "function"}]}, "tools[0].function.name"),
        ({"messages": USER, "tool_choice": "sometimes"}, "tool_choice"),
    ]
    for body, param in cases:
        assert_openai_error(server.client.post("/v1/chat/completions", json=body), 400, param)


def test_unknown_route_and_wrong_method_are_provider_shaped(server: LiveServer) -> None:
    assert_openai_error(server.client.get("/v1/nothing"), 404, None)
    assert_openai_error(server.client.get("/v1/chat/completions"), 405, None)
    assert_anthropic_error(server.client.get("/v1/messages"), 405, "invalid_request_error")


def test_status_scenario_in_the_body_field_works_too(server: LiveServer) -> None:
    response = server.client.post(
        "/v1/chat/completions",
        json={"messages": USER, "mock": {"status": 503, "retry_after": 2}},
    )
    error = assert_openai_error(response, 503, None)
    assert error["code"] == "service_unavailable"
    assert response.headers["retry-after"] == "2"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
request_fields = st.fixed_dictionaries(
    {},
    optional={
        "model": json_values,
        "messages": json_values | st.just(USER),
        "input": json_values,
        "max_tokens": json_values,
        "tools": json_values,
        "tool_choice": json_values,
        "stream_options": json_values,
        "system": json_values,
        "mock": json_values,
    },
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    route=st.sampled_from(ROUTES),
    body=st.one_of(
        st.binary(max_size=40),
        json_values.map(lambda v: json.dumps(v).encode()),
        request_fields.map(lambda v: json.dumps(v).encode()),
    ),
    header=st.none() | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
)
def test_garbage_never_gives_a_500(
    server_module: LiveServer, route: str, body: bytes, header: str | None
) -> None:
    # answers that turn out valid must be quick: start from a tiny, fast completion
    scenario = "ttft_ms=0;tps=10000;tokens=2;" + (header or "")
    headers = {"content-type": "application/json", "X-Mock-Scenario": scenario.strip()}
    response = server_module.client.post(route, content=body, headers=headers)
    assert response.status_code < 500 or "mock scenario status=" in response.text, response.text


@pytest.mark.parametrize("route", ROUTES)
def test_empty_body_is_a_400(server: LiveServer, route: str) -> None:
    assert server.client.post(route, content=b"").status_code == 400
