"""A stream gateway that runs a release policy inside the stream path (notebook 12).

The gateway is given; the release policy is the lesson: the notebook's (and
``solutions/release.py``'s) ``BySentence`` or ``WholeAnswer`` goes in as ``release``, a class
that makes one validation buffer per answer (:class:`ReleasePolicy`). The default,
:class:`Immediate`, holds nothing back.

It sits in front of a Chat Completions upstream and answers ``POST /v1/answers`` (an OpenAI
chat request) in the gateway's own stable protocol, named SSE events whose ``data`` repeats
the name as ``type`` and whose ``id`` is ``<request id>:<n>``:

``gateway.start``
    at once, before the upstream answers: ``request_id`` (also the ``X-Request-Id`` header),
    the release policy and the restart policy. The client's state goes connecting.
``gateway.delta``
    ``text``: a fragment the release policy let out. The upstream's text goes through the
    policy's validation buffer first; nothing else is sent as text.
``gateway.tool_call``
    ``index``, ``id``, ``name``, ``arguments``: a tool call, held whole (structured content is
    never streamed in pieces) and sent after the upstream's terminal event, once it is
    validated: the answer finished with ``finish_reason: tool_calls`` (any other reason may
    have cut the arguments short), the call names a tool the request offered, and its
    arguments parse as JSON and satisfy that tool's ``parameters`` schema (jsonschema). One
    call that fails ends the answer ``gateway.interrupted`` with ``invalid_tool_call``, and
    none of its calls is sent.
``gateway.restarting``
    ``attempt``, ``reason``: the upstream failed before anything was released, and the restart
    policy allows a fresh upstream request (a new generation, billed again).
``gateway.completed``
    the one success ending, sent only after the upstream's terminal event *and* validation:
    ``finish_reason``, ``usage``, ``upstream_id``, ``attempts``, ``released_chars``.
``gateway.interrupted``
    every other ending: ``reason`` (``upstream_error``, ``upstream_dropped``,
    ``upstream_status``, ``refusal``, ``rejected``, ``invalid_tool_call``), ``message``,
    ``released_chars`` (what the reader has already seen: label it interrupted, not an answer)
    and ``restartable`` with ``why``.

The gateway keeps no replay buffer: a request that carries ``Last-Event-ID`` is a 409 saying
so (the generation it names is gone; resuming it would need the gateway to keep generating
and storing after the client left).

It calls the proxy's own parts (``parts``: ``solutions.proxy`` or the learner's
``load_proxy()``): ``make_client``, ``ask_for_usage``, ``sse_events``, ``event_data``,
``upstream_headers`` and ``log_usage``, one billing line per upstream request (each attempt).
It exports ``gateway_ttft_seconds`` (first upstream content) beside
``gateway_first_useful_content_seconds`` (first released fragment that says something).

Inside, one concept a module, the way a request goes:

    _endpoint    make_stream_gateway: the FastAPI app, its two routes and its client (FastAPI)
    _relay       one answer's stream: attempts through the release policy, restarts
    _upstream    the upstream's chunks, and each way it fails as a GatewayFailure
    _tool_calls  tool calls held whole, and validated before any is sent (jsonschema)
    _policies    the release policy's shape (Immediate) and the RestartPolicy (pure)
    _metrics     GatewayMetrics, in a registry of its own (Prometheus)
    _parts       ProxyParts: what the gateway calls of a proxy module

The names load on first use, as ``labkit``'s do: ``from labkit.stream_gateway import
RestartPolicy`` loads no FastAPI. The gateway is a server app, so it sits in labkit's services
layer (``labkit/__init__.py``), above the core, whose import loads no web framework.
"""

import importlib
import typing

# For type checkers, which do not run __getattr__: _WHERE below, as re-exporting imports.
if typing.TYPE_CHECKING:
    from labkit.stream_gateway._endpoint import ANSWERS_PATH as ANSWERS_PATH
    from labkit.stream_gateway._endpoint import make_stream_gateway as make_stream_gateway
    from labkit.stream_gateway._metrics import GatewayMetrics as GatewayMetrics
    from labkit.stream_gateway._policies import Immediate as Immediate
    from labkit.stream_gateway._policies import ReleasePolicy as ReleasePolicy
    from labkit.stream_gateway._policies import RestartPolicy as RestartPolicy

# The public surface, written once: each name and the module it is loaded from.
_WHERE = {
    "ANSWERS_PATH": "labkit.stream_gateway._endpoint",
    "GatewayMetrics": "labkit.stream_gateway._metrics",
    "Immediate": "labkit.stream_gateway._policies",
    "ReleasePolicy": "labkit.stream_gateway._policies",
    "RestartPolicy": "labkit.stream_gateway._policies",
    "make_stream_gateway": "labkit.stream_gateway._endpoint",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'labkit.stream_gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
