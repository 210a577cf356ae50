"""Routes around the answers: models, health, debug records, reset and per-app metrics."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from fastapi.routing import APIRoute
from mock_support import USER, LiveServer, serve

from mock_upstream import Scenario, create_app
from mock_upstream.plan import Prompt, build_plan

CHAT = {"model": "mock-gpt", "messages": USER}


@pytest.mark.sockets
def test_healthz_and_models(server: LiveServer) -> None:
    assert server.client.get("/healthz").json() == {"status": "ok"}
    models = server.client.get("/v1/models").json()
    assert models["object"] == "list"
    assert "mock-gpt" in [m["id"] for m in models["data"]]


@pytest.mark.sockets
def test_debug_requests_lists_records_oldest_first_with_the_contract_fields(
    server: LiveServer,
) -> None:
    first = server.client.post("/v1/chat/completions", json=CHAT).json()
    second = server.client.post("/v1/chat/completions", json={**CHAT, "seed": 3}).json()
    records = server.records()
    assert [r["id"] for r in records] == [first["id"], second["id"]]
    assert set(records[0]) >= {
        "id",
        "api",
        "state",
        "stream",
        "tokens_generated",
        "tokens_sent",
        "tokens_after_disconnect",
        "include_usage",
        "prompt_tokens",
        "completion_tokens",
        "started_at",
        "first_token_at",
        "ended_at",
        "disconnected_at",
    }
    record = records[0]
    assert record["prompt_tokens"] == first["usage"]["prompt_tokens"]
    assert record["started_at"] <= record["first_token_at"] <= record["ended_at"]
    assert record["disconnected_at"] is None


@pytest.mark.sockets
def test_reset_clears_records_and_counters(server: LiveServer) -> None:
    server.client.post("/v1/chat/completions", json=CHAT)
    assert server.metric("mock_requests_completed_total") == 1
    assert server.client.post("/debug/reset").json() == {"reset": True, "running": 0, "waiting": 0}
    assert server.records() == []
    assert server.metric("mock_requests_completed_total") == 0
    assert server.metric("mock_tokens_generated_total") == 0


@pytest.mark.sockets
def test_metrics_are_prometheus_text_with_every_series(server: LiveServer) -> None:
    server.client.post("/v1/chat/completions", json=CHAT)
    response = server.client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    for name in [
        "mock_requests_running",
        "mock_requests_started_total",
        "mock_requests_completed_total",
        "mock_requests_cancelled_total",
        "mock_requests_errored_total",
        "mock_tokens_generated_total",
        "mock_tokens_sent_total",
        "mock_tokens_after_disconnect_total",
        "mock_ttft_seconds_bucket",
    ]:
        assert f"\n{name}" in response.text, name
    assert server.metric("mock_tokens_generated_total") == 24
    assert server.metric("mock_tokens_sent_total") == 0  # a unary answer sends no frames


@pytest.mark.sockets
def test_a_stream_read_to_the_end_was_sent_whole(server: LiveServer) -> None:
    with server.client.stream(
        "POST", "/v1/chat/completions", json={**CHAT, "stream": True}
    ) as response:
        response.read()
    [record] = server.records()
    assert record["tokens_sent"] == record["tokens_generated"] == record["completion_tokens"] == 24
    assert server.metric("mock_tokens_sent_total") == 24


@pytest.mark.sockets
def test_the_vllm_series_exist_on_a_fresh_mock_before_any_request(
    fresh_server: LiveServer,
) -> None:
    """As on vLLM, a dashboard (or a notebook cell) finds them before the first request,
    labelled with the mock's default model."""
    text = fresh_server.client.get("/metrics").text
    for line in [
        'vllm:num_requests_running{model_name="mock-gpt"} 0.0',
        'vllm:num_requests_waiting{model_name="mock-gpt"} 0.0',
        'vllm:generation_tokens_total{model_name="mock-gpt"} 0.0',
        'vllm:time_to_first_token_seconds_count{model_name="mock-gpt"} 0.0',
        'vllm:request_success_total{finished_reason="stop",model_name="mock-gpt"} 0.0',
        'vllm:request_success_total{finished_reason="length",model_name="mock-gpt"} 0.0',
        'vllm:request_success_total{finished_reason="abort",model_name="mock-gpt"} 0.0',
    ]:
        assert f"\n{line}\n" in text, line
    assert fresh_server.records() == []


@pytest.mark.sockets
def test_a_reset_keeps_the_default_models_vllm_series_and_forgets_the_others(
    server: LiveServer,
) -> None:
    server.client.post("/v1/chat/completions", json={**CHAT, "model": "lab-model"})
    assert 'model_name="lab-model"' in server.client.get("/metrics").text
    server.client.post("/debug/reset").raise_for_status()
    text = server.client.get("/metrics").text
    assert '\nvllm:num_requests_running{model_name="mock-gpt"} 0.0\n' in text
    assert '\nvllm:generation_tokens_total{model_name="mock-gpt"} 0.0\n' in text
    assert 'model_name="lab-model"' not in text


@pytest.mark.sockets
def test_metrics_carry_the_vllm_names_labelled_by_model(server: LiveServer) -> None:
    server.client.post("/v1/chat/completions", json={**CHAT, "model": "lab-model"})
    text = server.client.get("/metrics").text
    for line in [
        'vllm:num_requests_running{model_name="lab-model"} 0.0',
        'vllm:num_requests_waiting{model_name="lab-model"} 0.0',
        'vllm:generation_tokens_total{model_name="lab-model"} 24.0',
        'vllm:request_success_total{finished_reason="stop",model_name="lab-model"} 1.0',
        'vllm:time_to_first_token_seconds_count{model_name="lab-model"} 1.0',
    ]:
        assert f"\n{line}\n" in text, line


@pytest.mark.sockets
def test_two_apps_keep_separate_records_and_metrics(
    server: LiveServer, fresh_server: LiveServer
) -> None:
    server.client.post("/v1/chat/completions", json=CHAT)
    assert server.metric("mock_requests_started_total") == 1
    assert fresh_server.metric("mock_requests_started_total") == 0
    assert fresh_server.records() == []
    assert server.app.state.registry is not fresh_server.app.state.registry


def test_apps_built_in_one_process_share_no_state() -> None:
    one, two = create_app(), create_app(Scenario(tps=100))
    assert one.state.mock.recorder is not two.state.mock.recorder
    assert one.state.mock.defaults == Scenario()
    assert two.state.mock.defaults.tps == 100


@pytest.mark.sockets
def test_app_defaults_apply_and_requests_override_them(server: LiveServer) -> None:
    server.client.post("/v1/chat/completions", json=CHAT)
    server.client.post("/v1/chat/completions", json=CHAT, headers={"X-Mock-Scenario": "tokens=7"})
    server.client.post(
        "/v1/chat/completions",
        json={**CHAT, "mock": {"tokens": 9}},
        headers={"X-Mock-Scenario": "tokens=7"},
    )
    assert [r["completion_tokens"] for r in server.records()] == [24, 7, 9]


@pytest.mark.sockets
def test_a_long_answer_starts_at_once_because_its_words_are_made_as_they_are_sent(
    server: LiveServer,
) -> None:
    """Bug: a 400,000-token answer (the backpressure check's) was made whole before its first
    byte: about 2 s here (planned on the event loop, the mock answered nothing meanwhile;
    then on a worker thread, the first byte still waited). Fix: the words are made as they are
    sent. Measured with a margin no machine closes: a hundred million tokens made whole take
    minutes and gigabytes; the first token of them arrives within seconds, and the mock
    answers a health check while it streams."""
    body = {**CHAT, "stream": True, "mock": {"ttft_ms": 0, "tps": 1000, "tokens": 100_000_000}}
    with server.client.stream("POST", "/v1/chat/completions", json=body, timeout=10) as response:
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
        assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"] is not None
        assert server.client.get("/healthz", timeout=10).status_code == 200


def test_a_long_plan_is_made_in_no_time_and_says_how_long_it_is() -> None:
    prompt = Prompt(
        "Explain how a streaming proxy keeps tokens flowing.", "lab-gpt", max_tokens=10**9
    )
    plan = build_plan(prompt, Scenario(tokens=10**12))
    assert (plan.completion_tokens, plan.finish) == (10**9, "length")
    first = next(plan.steps())
    assert first[0] == 0 and 1 <= len(first[1].tokens) <= 3


def _quiet_filters() -> list[logging.Filter]:
    from mock_upstream.stream import QuietDropFilter

    return [f for f in logging.getLogger("uvicorn.error").filters if isinstance(f, QuietDropFilter)]


@pytest.mark.sockets
def test_building_an_app_changes_no_logger_and_serving_it_keeps_drops_out_of_the_log(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """An intended drop (``drop_after``) is not logged as "Exception in ASGI application", but
    only while a mock is served: building an app changes no global logger."""
    before = list(logging.getLogger("uvicorn.error").filters)
    app = create_app(Scenario(ttft_ms=0, tps=1000, tokens=10))
    assert logging.getLogger("uvicorn.error").filters == before
    for url in serve(app):
        assert len(_quiet_filters()) == 1
        with httpx.Client(base_url=url, timeout=5.0) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                with client.stream(
                    "POST",
                    "/v1/chat/completions",
                    json={"model": "mock-gpt", "messages": USER, "stream": True},
                    headers={"X-Mock-Scenario": "drop_after=3"},
                ) as response:
                    for _ in response.iter_bytes():
                        pass
            assert client.get("/healthz").status_code == 200  # the mock goes on serving
    assert logging.getLogger("uvicorn.error").filters == before
    err = capfd.readouterr().err
    assert "ConnectionDropped" not in err and "Exception in ASGI application" not in err


def test_no_route_declares_what_fastapi_builds_under_a_borrowed_warning_filter() -> None:
    """FastAPI builds each declared parameter and response model inside
    ``warnings.catch_warnings()``, which is not thread-safe: a mock built on one thread while
    another left its own catch_warnings raised pydantic's UnsupportedFieldAttributeWarning under
    pytest's "error" filter. The mock's routes read the request and return a Response."""
    declared = {
        route.path: [
            p.name
            for p in route.dependant.path_params
            + route.dependant.query_params
            + route.dependant.header_params
            + route.dependant.cookie_params
        ]
        + (["response model"] if route.response_field is not None else [])
        for route in create_app().routes
        if isinstance(route, APIRoute)
    }
    assert declared and all(names == [] for names in declared.values()), declared
