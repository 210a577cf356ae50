"""What to do about a failed check when the proxy was graded by URL: advice for a gateway.

A check's own hint is written for the lab's learner: it names the notebook that teaches the fix
and the Python that makes it (``httpx.AsyncClient``, a bounded ``asyncio.Queue``). Graded by URL
(``labkit grade-url``), the thing graded may be nginx, Caddy, HAProxy, Apache, lighttpd,
Varnish or LiteLLM, and that advice is useless there. ``for_gateway`` swaps it for advice about
the property and where a gateway's settings decide it. Verdicts are left alone: they say what was
observed at the wire, which holds for any proxy.

Two checks ask for something a byte-transparent gateway never does by design: ``keepalive`` (it
sends no heartbeats of its own) and ``midstream_error`` (it writes no error event when the
upstream breaks; it closes the client's connection). Their failures say so, so that a deployer
reads them as a property of the architecture, not a misconfiguration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from labkit.checks.result import CheckResult

__all__ = ["BY_DESIGN", "GATEWAY_ADVICE", "for_gateway"]

RESUMABLE = (
    "resumable streams (X-Resumable, GET /v1/streams/{id}, POST /v1/streams/{id}/cancel) are "
    "kept by a replay log in an application behind the gateway; route those paths to it "
    "unbuffered."
)

GATEWAY_ADVICE: Mapping[str, str] = {
    "trickle": "turn off response buffering for this route (nginx: proxy_buffering off; "
    "Caddy: flush_interval -1; Apache: flushpackets=on; lighttpd: stream-response-body 2; "
    "Varnish: do_stream or pipe) and any compression or caching of text/event-stream.",
    "cancel": "make the gateway close its upstream connection as soon as the client's closes, "
    "not at its next write to the client (HAProxy: option abortonclose): until it does, the "
    "model generates for nobody and is billed.",
    "cancel_before_first_token": "make the gateway close its upstream connection when the "
    "client leaves while it still waits for the upstream's response headers or first bytes.",
    "cancel_queued": "make the gateway close its upstream connection when the client leaves "
    "while the request still waits for the upstream's response headers (an engine whose slots "
    "are all busy sends none): the engine can then drop the queued request.",
    "cancel_whole_answer": "make the gateway close its upstream connection when the client "
    "leaves during a non-streamed answer, while it still waits for the whole body.",
    "usage": "the usage log is written by the lab's proxy, not by a gateway: grade the proxy "
    "file to check it.",
    "midstream_error": "put a layer behind the gateway that turns an upstream failure into an "
    "in-stream error event; the gateway itself only closes the connection.",
    "upstream_status": "pass the upstream's status and Retry-After header through unchanged; "
    "do not replace 4xx/5xx with the gateway's own error pages.",
    "long_stream": "allow a slow first token and a long stream: the gateway's timeout for the "
    "upstream's first bytes and between reads must be longer than the model's slowest wait.",
    "keepalive": "send SSE comment lines during the upstream's silences from a layer behind the "
    "gateway, or raise the gateway's and the client's idle timeouts above the longest silence.",
    "keepalive_under_comments": "forward the upstream's SSE comments as they come, or count "
    "only bytes sent to the client as activity when timing heartbeats.",
    "integrity": "forward every upstream event once and in order; nothing the gateway does "
    "between reads (a heartbeat, a timeout) may drop or repeat one.",
    "concurrency": "let every stream through at once for its whole life: check the gateway's "
    "limits on connections to the upstream, on workers or threads, and on queued requests; a "
    "worker held by one stream serves no one else until that stream ends.",
    "backpressure": "bound what the gateway reads ahead of a slow client, in memory and on "
    "disk (its response buffers and temporary files), so that the upstream's sending waits for "
    "the client.",
    "passthrough": "forward the upstream's bytes as they are: lines starting with a colon are "
    "SSE comments and must stay comments.",
    "content_encoding": "decode what the upstream compressed, or forward its bytes with its "
    "Content-Encoding header, and never hand a client an encoding it did not accept.",
    "error_before_first_token": "forward the upstream's first event unchanged, even when it is "
    "an error object under status 200.",
    "tool_calls": "forward the stream's events unchanged and in order: tool-call deltas carry "
    "their own index and id.",
    "resume": RESUMABLE + " A drop must leave the answer running, and Last-Event-ID must "
    "resume it after that event, each event with its id.",
    "resume_twice": RESUMABLE + " Number events by their place in the answer, the same on "
    "every connection, so a second drop resumes where it was.",
    "resume_stop": RESUMABLE + " Stop must cancel the upstream at once.",
    "resume_grace": RESUMABLE + " A drop must not cancel the upstream; nobody back within the "
    "grace period must.",
    "replay_bound": RESUMABLE + " Bound the events kept per answer, and refuse a cursor older "
    "than what is kept.",
    "minute_stream": "keep a long, mostly silent stream open: the gateway's read timeout for "
    "the upstream must outlast the model's longest silence, and something behind it must send "
    "the client bytes (SSE comments) more often than the client's or the load balancer's idle "
    "timeout.",
    "resume_replica": RESUMABLE + " Keep that log where every replica reads it (a shared "
    "store such as Redis), so that a resume or a Stop routed to another replica than the one "
    "generating the answer finds it.",
}

BY_DESIGN: Mapping[str, str] = {
    "keepalive": "A byte-transparent gateway fails this by design: it sends no heartbeats of "
    "its own while the upstream is silent.",
    "midstream_error": "A byte-transparent gateway fails this by design: when the upstream "
    "breaks mid-stream it closes the client's connection instead of writing an error event.",
}


def for_gateway(result: CheckResult) -> CheckResult:
    """``result`` with advice for a gateway graded by URL in place of the lab's Python advice: a
    passed result loses its pointer to the notebook that teaches the property; a skipped or
    inconclusive one keeps its hint, which is about the grading, not the proxy."""
    if result.passed:
        return replace(result, hint="")
    if result.skipped:
        return result
    advice = GATEWAY_ADVICE[result.id]
    by_design = BY_DESIGN.get(result.id)
    return replace(result, hint=f"{by_design} {advice}" if by_design else advice)
