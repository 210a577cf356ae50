"""Near-copies: renamed and reordered copies of the reference score high, independently written
proxies (other designs, honest fill-ins of the same scaffold, and the three whole honest
solutions of ``honest/``, written for the calibration) score low, the scaffold alone scores
nothing, a flagged pair comes with the lines that matched, and ``labkit grade-class`` writes the
columns and the instructor's page."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest
from grading_support import REFERENCE, VARIANTS, broken_source

from labkit.checks import CheckResult
from labkit.cli import main
from labkit.grading.report import SubmissionReport, csv_row, feedback_markdown
from labkit.grading.rubric import Rubric
from labkit.grading.similarity import (
    DEFAULT_THRESHOLD,
    MIN_SHARED,
    SimilarityRow,
    compare_roster,
    fingerprints,
    matched_spans,
    normalised_tokens,
    own_fingerprints,
    scaffold_of,
    similarity,
    similarity_markdown,
)
from labkit.regions import BEGIN, END, STUB_MARK, regions

# ---------------------------------------------------------------------------------------------
# Samples


def renamed_and_reordered(source: str) -> str:
    """``source`` with every name it binds renamed, the functions after ``app = ...`` in reverse
    order, and the whole re-printed by ``ast.unparse`` (comments gone, quotes and parentheses
    redone): what a learner who copied and disguised the reference might hand in."""
    tree = ast.parse(source)
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    names = {name: f"my_{name.lower()}_2" for name in bound - imported}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = names.get(node.id, node.id)
            return node

        def visit_arg(self, node: ast.arg) -> ast.arg:
            node.arg = names.get(node.arg, node.arg)
            return node

        def generic_visit(self, node: ast.AST) -> ast.AST:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                node.name = names.get(node.name, node.name)
            return super().generic_visit(node)

    tree = Rename().visit(tree)
    body = tree.body
    after_app = next(i for i, n in enumerate(body) if isinstance(n, ast.Assign)
                     and ast.unparse(n.targets[0]) == names["app"]) + 1  # fmt: skip
    slots = [i for i in range(after_app, len(body)) if isinstance(body[i], ast.AsyncFunctionDef
             | ast.FunctionDef)]  # fmt: skip
    functions = [body[i] for i in slots]
    for slot, function in zip(slots, reversed(functions), strict=True):
        body[slot] = function
    return ast.unparse(tree)


def fill_regions(reference: str, bodies: dict[str, str]) -> str:
    """``reference`` with each solution region replaced by the body given for its function:
    what a learner who wrote every part in the notebooks, in their own way, hands in."""
    out: list[str] = []
    inside = False
    function = ""
    for line in reference.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("def ", "async def ")):
            function = stripped.removeprefix("async ").removeprefix("def ").split("(")[0]
        if stripped == BEGIN:
            inside = True
            out.append(bodies[function].rstrip("\n"))
        elif stripped == END:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" if line else line for line in text.strip("\n").split("\n"))


# An honest learner: the same scaffold, every part written from the notebooks' instructions.
HONEST_PARTS = {
    name: _indent(body)
    for name, body in {
        "make_client": """
timeout = upstream_timeout()
return httpx.AsyncClient(base_url=upstream_url, timeout=timeout)
""",
        "chat_completions": """
client = request.app.state.client
streaming = bool(body.get("stream"))
wants_usage = False
if streaming:
    body, wants_usage = ask_for_usage(body)
try:
    req = client.build_request("POST", CHAT_PATH, json=body, headers=upstream_headers(request))
    resp = await client.send(req, stream=True)
except httpx.HTTPError as err:
    log_usage(Usage(), "error")
    problem = error_body(f"cannot reach the upstream ({err!r})", "upstream_error")
    return JSONResponse(problem, status_code=502)
if not streaming or resp.status_code >= 400:
    return await forward_whole(resp)
events = relay(resp, wants_usage)
return StreamingResponse(
    events, headers=SSE_HEADERS, media_type="text/event-stream",
    background=BackgroundTask(resp.aclose),
)
""",
        "sse_events": """
buffer = []
async for raw in lines:
    if raw == "":
        if buffer:
            yield "\\n".join(buffer)
        buffer = []
        continue
    buffer.append(raw)
""",
        "while_connected": """
async def wait_gone():
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
job = asyncio.ensure_future(work)
gone = asyncio.ensure_future(wait_gone())
done, pending = await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
for leftover in pending:
    leftover.cancel()
if job in done:
    return job.result()
with contextlib.suppress(asyncio.CancelledError):
    await job
raise ClientGone()
""",
        "read_events": """
try:
    async for ev in sse_events(upstream.aiter_lines()):
        await queue.put(ev)
except Exception as err:
    await queue.put(UpstreamFailed(f"upstream read failed: {err.__class__.__name__}"))
else:
    await queue.put(UpstreamFailed("upstream ended early"))
finally:
    await upstream.aclose()
""",
        "relay": """
q = make_queue()
task = asyncio.create_task(read_events(upstream, q))
usage = Usage()
result = None
try:
    while result is None:
        got = await next_item(q)
        if got is None:
            yield HEARTBEAT
        elif isinstance(got, UpstreamFailed):
            result = "error"
            yield error_event(got.message)
        else:
            out, result = pass_on(got, usage, client_wants_usage)
            if out:
                yield out
finally:
    if result is None:
        task.cancel()
        log_usage(usage, "cancelled")
    else:
        asyncio.get_running_loop().call_later(READER_GRACE_S, task.cancel)
        log_usage(usage, result)
""",
        "ask_for_usage": """
opts = dict(body.get("stream_options") or {})
asked = bool(opts.get("include_usage"))
opts["include_usage"] = True
new_body = dict(body)
new_body["stream_options"] = opts
return new_body, asked
""",
        "pass_on": """
payload = event_data(event)
if payload.strip() == "[DONE]":
    return DONE, "completed"
try:
    parsed = json.loads(payload)
    assert isinstance(parsed, dict)
except (ValueError, AssertionError):
    return None, None
if usage.id is None:
    usage.id = parsed.get("id")
if parsed.get("error"):
    return (event + "\\n\\n").encode(), "error"
counts = parsed.get("usage")
if counts:
    usage.take(counts)
    if not parsed.get("choices") and not client_wants_usage:
        return None, None
return (event + "\\n\\n").encode(), None
""",
        "log_usage": """
target = os.environ.get("USAGE_LOG")
if target:
    record = asdict(usage)
    record["outcome"] = outcome
    with open(target, "a") as handle:
        print(json.dumps(record), file=handle)
""",
        "error_event": """
payload = json.dumps(error_body(message, "upstream_error"))
return ("data: " + payload + "\\n\\n").encode()
""",
        "forward_whole": """
try:
    data = await upstream.aread()
except httpx.HTTPError as err:
    await upstream.aclose()
    log_usage(Usage(), "error")
    problem = error_body(f"the upstream failed: {err!r}", "upstream_error")
    return JSONResponse(problem, status_code=502)
await upstream.aclose()
failed = upstream.status_code >= 400
usage = Usage()
if not failed:
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        usage.id = parsed.get("id")
        usage.take(parsed.get("usage") or {})
log_usage(usage, "error" if failed else "completed")
headers = {}
if "retry-after" in upstream.headers:
    headers["Retry-After"] = upstream.headers["retry-after"]
kind = upstream.headers.get("content-type", "application/json")
return Response(content=data, status_code=upstream.status_code, headers=headers, media_type=kind)
""",
        "upstream_timeout": """
return httpx.Timeout(10.0, connect=5.0, read=UPSTREAM_IDLE_S)
""",
        "next_item": """
try:
    return await asyncio.wait_for(queue.get(), HEARTBEAT_S)
except asyncio.TimeoutError:
    return None
""",
        "make_queue": """
return asyncio.Queue(QUEUE_EVENTS)
""",
        "asks_to_resume": """
if scope["method"] != "POST":
    return False
value = _header(scope, RESUMABLE_HEADER)
return value is not None and value.lower() == "true"
""",
        "produce": """
number = 0

async def pump():
    nonlocal number
    try:
        async for chunk in pieces:
            if chunk.startswith(b":"):
                continue
            number += 1
            await log.append(stream_id, number, chunk)
    finally:
        await pieces.aclose()

pumping = asyncio.create_task(pump())
stopping = asyncio.create_task(log.stopped(stream_id))
try:
    while True:
        done, _ = await asyncio.wait(
            {pumping, stopping}, timeout=WATCH_S, return_when=asyncio.FIRST_COMPLETED
        )
        if pumping in done:
            break
        if stopping in done:
            break
        if not await log.watched(stream_id):
            break
finally:
    for task in (pumping, stopping):
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=WATCH_S)
    try:
        await log.append(stream_id, number + 1, None)
    except LogFailed:
        pass
""",
        "follow": """
last = after
while True:
    try:
        batch = await log.read(stream_id, last, HEARTBEAT_S)
    except NotKept as err:
        yield error_event(str(err))
        break
    except LogFailed as err:
        yield error_event(str(err))
        break
    if len(batch) == 0:
        yield HEARTBEAT
        continue
    finished = False
    for number, data in batch:
        if data is None:
            finished = True
            break
        yield b"id: " + str(number).encode() + b"\\n" + data
        last = number
    if finished:
        break
""",
        "resume_stream": """
raw = request.headers.get("last-event-id")
if raw is None:
    raw = request.query_params.get("after", "0")
try:
    start = int(raw)
except ValueError:
    return bad_request("Last-Event-ID must be an integer")
log = request.app.state.replay_log
try:
    await log.read(stream_id, start, 0)
except NotKept as err:
    return JSONResponse(error_body(str(err), "not_found_error"), status_code=404)
except LogFailed as err:
    return JSONResponse(error_body(str(err), "service_unavailable"), status_code=503)
headers = dict(SSE_HEADERS)
headers["X-Stream-Id"] = stream_id
body = follow(log, stream_id, start)
return StarletteStreamingResponse(body, headers=headers, media_type="text/event-stream")
""",
        "stop_stream": """
try:
    ok = await request.app.state.replay_log.stop(stream_id)
except LogFailed as err:
    return JSONResponse(error_body(str(err), "service_unavailable"), status_code=503)
if ok:
    return JSONResponse({"id": stream_id, "object": "stream", "status": "cancelled"})
return JSONResponse(error_body("unknown stream " + stream_id, "not_found_error"), status_code=404)
""",
    }.items()
}

# A second honest learner, who writes tighter code and keeps state in small helpers.
HONEST_TERSE_PARTS = {
    name: _indent(body)
    for name, body in {
        "make_client": """
return httpx.AsyncClient(timeout=upstream_timeout(), base_url=upstream_url)
""",
        "chat_completions": """
http = request.app.state.client
if body.get("stream") is not True:
    return await send_unary(http, body, request)
body, include = ask_for_usage(body)
try:
    response = await http.send(
        http.build_request("POST", CHAT_PATH, json=body, headers=upstream_headers(request)),
        stream=True,
    )
except httpx.HTTPError:
    log_usage(Usage(), "error")
    return JSONResponse(error_body("upstream unreachable", "upstream_error"), 502)
if response.is_error:
    return await forward_whole(response)
gen = relay(response, include)
resp = StreamingResponse(gen, media_type="text/event-stream", headers=SSE_HEADERS)
resp.background = BackgroundTask(response.aclose)
return resp
""",
        "sse_events": """
pending = ""
async for line in lines:
    if not line and pending:
        yield pending.rstrip("\\n")
        pending = ""
    elif line:
        pending += line + "\\n"
""",
        "while_connected": """
task = asyncio.ensure_future(work)
while not task.done():
    if await request.is_disconnected():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ClientGone()
    await asyncio.wait({task}, timeout=0.05)
return task.result()
""",
        "read_events": """
reason = "the upstream stopped early"
try:
    async for item in sse_events(upstream.aiter_lines()):
        await queue.put(item)
except BaseException as exc:
    if isinstance(exc, asyncio.CancelledError):
        raise
    reason = f"the upstream broke: {exc.__class__.__name__}"
finally:
    await upstream.aclose()
await queue.put(UpstreamFailed(reason))
""",
        "relay": """
box = make_queue()
worker = asyncio.create_task(read_events(upstream, box))
seen = Usage()
status = "cancelled"
try:
    while status == "cancelled":
        nxt = await next_item(box)
        if nxt is None:
            yield HEARTBEAT
        elif isinstance(nxt, UpstreamFailed):
            status = "error"
            yield error_event(nxt.message)
        else:
            chunk, end = pass_on(nxt, seen, client_wants_usage)
            if chunk:
                yield chunk
            status = end or status
finally:
    loop = asyncio.get_running_loop()
    loop.call_later(0 if status == "cancelled" else READER_GRACE_S, worker.cancel)
    log_usage(seen, status)
""",
        "ask_for_usage": """
had = (body.get("stream_options") or {}).get("include_usage") is True
merged = {**(body.get("stream_options") or {}), "include_usage": True}
return body | {"stream_options": merged}, had
""",
        "pass_on": """
text = event_data(event)
if text == "[DONE]":
    return DONE, "completed"
try:
    obj = json.loads(text)
except json.JSONDecodeError:
    return None, None
if type(obj) is not dict:
    return None, None
usage.id = usage.id or obj.get("id")
raw = f"{event}\\n\\n".encode()
if "error" in obj:
    return raw, "error"
if not obj.get("usage"):
    return raw, None
usage.take(obj["usage"])
return (raw if client_wants_usage or obj.get("choices") else None), None
""",
        "log_usage": """
if (where := os.environ.get("USAGE_LOG")) is None:
    return
with open(where, "a", encoding="utf-8") as f:
    f.write(json.dumps(asdict(usage) | {"outcome": outcome}) + "\\n")
""",
        "error_event": """
data = json.dumps(error_body(message, 'upstream_error')).encode()
return b'data: ' + data + b'\\n\\n'
""",
        "forward_whole": """
async with contextlib.aclosing(upstream):
    try:
        blob = await upstream.aread()
    except httpx.HTTPError:
        log_usage(Usage(), "error")
        return JSONResponse(error_body("upstream answer broke", "upstream_error"), 502)
u = Usage()
ok = upstream.status_code < 400
with contextlib.suppress(ValueError, AttributeError):
    if ok:
        doc = json.loads(blob)
        u.id, _ = doc.get("id"), u.take(doc.get("usage") or {})
log_usage(u, "completed" if ok else "error")
extra = {k: v for k, v in upstream.headers.items() if k.lower() == "retry-after"}
ctype = upstream.headers.get("content-type") or "application/json"
return Response(blob, upstream.status_code, headers=extra, media_type=ctype)
""",
        "upstream_timeout": "return httpx.Timeout(5.0, read=UPSTREAM_IDLE_S)",
        "next_item": """
getter = asyncio.ensure_future(queue.get())
done, _ = await asyncio.wait({getter}, timeout=HEARTBEAT_S)
if getter in done:
    return getter.result()
getter.cancel()
return None
""",
        "make_queue": "return asyncio.Queue(maxsize=QUEUE_EVENTS)",
        "asks_to_resume": """
return scope["method"] == "POST" and _header(scope, RESUMABLE_HEADER) in ("true", "True")
""",
        "produce": """
state = {"n": 0}

async def feed():
    async with aclosing(pieces):
        async for p in pieces:
            if p[:1] != b":":
                state["n"] += 1
                await log.append(stream_id, state["n"], p)

jobs = [asyncio.ensure_future(feed()), asyncio.ensure_future(log.stopped(stream_id))]
try:
    while not jobs[0].done() and not jobs[1].done():
        await asyncio.wait(jobs, timeout=WATCH_S, return_when=asyncio.FIRST_COMPLETED)
        if not await log.watched(stream_id):
            break
finally:
    for job in jobs:
        while not job.done():
            job.cancel()
            await asyncio.wait([job], timeout=WATCH_S)
    with suppress(LogFailed):
        await log.append(stream_id, state["n"] + 1, None)
""",
        "follow": """
pos = after
while True:
    try:
        got = await log.read(stream_id, pos, HEARTBEAT_S)
    except (NotKept, LogFailed) as e:
        yield error_event(f"cannot resume: {e}")
        return
    yield HEARTBEAT if not got else b""
    for n, ev in got:
        if ev is None:
            return
        pos = n
        yield f"id: {n}\\n".encode() + ev
""",
        "resume_stream": """
where = request.headers.get("last-event-id", request.query_params.get("after", "0"))
if not where.isdigit():
    return bad_request("bad cursor")
try:
    await request.app.state.replay_log.read(stream_id, int(where), 0)
except NotKept as e:
    return JSONResponse(error_body(str(e), "not_found_error"), 404)
except LogFailed as e:
    return JSONResponse(error_body(str(e), "service_unavailable"), 503)
body = follow(request.app.state.replay_log, stream_id, int(where))
headers = SSE_HEADERS | {"X-Stream-Id": stream_id}
return StarletteStreamingResponse(body, media_type="text/event-stream", headers=headers)
""",
        "stop_stream": """
try:
    if await request.app.state.replay_log.stop(stream_id):
        return JSONResponse({"id": stream_id, "object": "stream", "status": "cancelled"})
except LogFailed as e:
    return JSONResponse(error_body(str(e), "service_unavailable"), 503)
return JSONResponse(error_body("no such stream", "not_found_error"), 404)
""",
    }.items()
}

RAW_ASGI_PROXY = '''
"""A streaming proxy with no framework: raw ASGI over one httpx client."""

import asyncio
import json
import os

import httpx

PATH = "/v1/chat/completions"
state: dict[str, httpx.AsyncClient] = {}


def log(record):
    if os.environ.get("USAGE_LOG"):
        with open(os.environ["USAGE_LOG"], "a") as out:
            out.write(json.dumps(record) + "\\n")


async def send_json(send, status, payload, extra=()):
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            limits = httpx.Timeout(5.0, read=float(os.environ.get("UPSTREAM_IDLE_S", "60")))
            state["http"] = httpx.AsyncClient(base_url=os.environ["UPSTREAM_URL"], timeout=limits)
            await send({"type": "lifespan.startup.complete"})
        else:
            await state.pop("http").aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def watch_disconnect(receive, gone):
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def stream(upstream, send, receive, record, echo_usage):
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    gone = asyncio.Event()
    watcher = asyncio.create_task(watch_disconnect(receive, gone))
    lines = upstream.aiter_lines().__aiter__()
    frame = []
    try:
        while not gone.is_set():
            step = asyncio.create_task(lines.__anext__())
            stop = asyncio.create_task(gone.wait())
            finished, _ = await asyncio.wait({step, stop}, timeout=2.0,
                                             return_when=asyncio.FIRST_COMPLETED)
            if stop in finished:
                step.cancel()
                break
            stop.cancel()
            if not finished:
                ping = {"type": "http.response.body", "body": b": ping\\n\\n", "more_body": True}
                await send(ping)
                await step if step.done() else None
                continue
            try:
                line = step.result()
            except StopAsyncIteration:
                record["outcome"] = "error"
                break
            if line:
                frame.append(line)
                continue
            text = "\\n".join(l[5:].strip() for l in frame if l.startswith("data:"))
            raw, frame = "\\n".join(frame) + "\\n\\n", []
            if text == "[DONE]":
                record["outcome"] = "completed"
                await send({"type": "http.response.body", "body": raw.encode(), "more_body": True})
                break
            chunk = json.loads(text)
            record["id"] = record["id"] or chunk.get("id")
            if chunk.get("usage"):
                for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                    record[key] = chunk["usage"].get(key)
                if not echo_usage and not chunk.get("choices"):
                    continue
            await send({"type": "http.response.body", "body": raw.encode(), "more_body": True})
    except httpx.HTTPError:
        record["outcome"] = "error"
        oops = {"error": {"message": "upstream broke", "type": "upstream_error"}}
        await send({"type": "http.response.body", "more_body": True,
                    "body": f"data: {json.dumps(oops)}\\n\\n".encode()})
    finally:
        watcher.cancel()
        await upstream.aclose()
        log(record)
    if not gone.is_set():
        await send({"type": "http.response.body", "body": b""})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    if scope["path"] != PATH or scope["method"] != "POST":
        return await send_json(send, 404, {"error": {"message": "no such route"}})
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    try:
        request = json.loads(body)
    except ValueError:
        return await send_json(send, 400, {"error": {"message": "not JSON"}})
    record = {"id": None, "prompt_tokens": None, "completion_tokens": None,
              "total_tokens": None, "outcome": "cancelled"}
    echo_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    if request.get("stream"):
        request["stream_options"] = {**(request.get("stream_options") or {}),
                                     "include_usage": True}
    headers = {k.decode(): v.decode() for k, v in scope["headers"]
               if k in (b"authorization", b"x-mock-scenario")}
    http = state["http"]
    upstream = await http.send(http.build_request("POST", PATH, json=request,
                                                  headers=headers), stream=True)
    if upstream.status_code >= 400 or not request.get("stream"):
        data = await upstream.aread()
        await upstream.aclose()
        record["outcome"] = "error" if upstream.status_code >= 400 else "completed"
        log(record)
        extra = [(b"retry-after", upstream.headers["retry-after"].encode())] \\
            if "retry-after" in upstream.headers else []
        await send({"type": "http.response.start", "status": upstream.status_code,
                    "headers": [(b"content-type", b"application/json"), *extra]})
        return await send({"type": "http.response.body", "body": data})
    await stream(upstream, send, receive, record, echo_usage)
'''

FASTAPI_GENERATOR_PROXY = '''
"""A different FastAPI proxy: one async generator per request, no queue, no reader task."""

import json
import os
import time

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

app = FastAPI()
HEADERS_KEPT = {"authorization", "x-mock-scenario"}


def client() -> httpx.AsyncClient:
    if not hasattr(app.state, "http"):
        app.state.http = httpx.AsyncClient(
            base_url=os.environ["UPSTREAM_URL"],
            timeout=httpx.Timeout(connect=3, read=90, write=5, pool=5),
        )
    return app.state.http


class Ledger:
    def __init__(self) -> None:
        self.fields = dict.fromkeys(["id", "prompt_tokens", "completion_tokens",
                                     "total_tokens"])

    def write(self, outcome: str) -> None:
        target = os.getenv("USAGE_LOG")
        if target:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({**self.fields, "outcome": outcome}) + "\\n")


async def events(response: httpx.Response, ledger: Ledger, echo: bool, request: Request):
    outcome, block, last = "cancelled", [], time.monotonic()
    try:
        async for line in response.aiter_lines():
            if await request.is_disconnected():
                break
            if time.monotonic() - last > 2:
                yield ": still here\\n\\n"
            last = time.monotonic()
            if line:
                block.append(line)
                continue
            payload = "".join(part.partition(":")[2].lstrip() for part in block)
            text, block = "\\n".join(block) + "\\n\\n", []
            if payload == "[DONE]":
                outcome = "completed"
                yield text
                break
            try:
                piece = json.loads(payload)
            except json.JSONDecodeError:
                continue
            ledger.fields["id"] = ledger.fields["id"] or piece.get("id")
            if "usage" in piece and piece["usage"]:
                ledger.fields.update({k: piece["usage"].get(k) for k in
                                      ("prompt_tokens", "completion_tokens", "total_tokens")})
                if not echo and not piece.get("choices"):
                    continue
            yield text
        else:
            outcome = "error"
            early = {"message": "stream ended early", "type": "upstream_error"}
            yield f"data: {json.dumps({'error': early})}\\n\\n"
    except httpx.TransportError as problem:
        outcome = "error"
        yield "data: " + json.dumps({"error": {"message": str(problem),
                                               "type": "upstream_error"}}) + "\\n\\n"
    finally:
        await response.aclose()
        ledger.write(outcome)


@app.post("/v1/chat/completions")
async def completions(request: Request):
    try:
        payload = await request.json()
    except json.JSONDecodeError:
        return JSONResponse({"error": {"message": "invalid JSON"}}, status_code=400)
    wanted = (payload.get("stream_options") or {}).get("include_usage") is True
    if payload.get("stream"):
        payload.setdefault("stream_options", {})["include_usage"] = True
    forwarded = {k: v for k, v in request.headers.items() if k.lower() in HEADERS_KEPT}
    upstream = await client().send(
        client().build_request("POST", "/v1/chat/completions", json=payload, headers=forwarded),
        stream=True,
    )
    ledger = Ledger()
    if upstream.status_code != 200 or not payload.get("stream"):
        content = await upstream.aread()
        await upstream.aclose()
        ledger.write("completed" if upstream.status_code == 200 else "error")
        passed = {h: upstream.headers[h] for h in ("retry-after",) if h in upstream.headers}
        return JSONResponse(json.loads(content), upstream.status_code, headers=passed)
    return StreamingResponse(events(upstream, ledger, wanted, request),
                             media_type="text/event-stream")
'''


def reference_source() -> str:
    return REFERENCE.read_text(encoding="utf-8")


def samples() -> dict[str, str]:
    """Every source the similarity table of the report is measured on."""
    reference = reference_source()
    return {
        "renamed+reordered": renamed_and_reordered(reference),
        **{f"broken/{name}": broken_source(name) for name in VARIANTS},
        "honest fill-in": fill_regions(reference, HONEST_PARTS),
        "honest fill-in (terse)": fill_regions(reference, HONEST_TERSE_PARTS),
        "raw ASGI proxy": RAW_ASGI_PROXY,
        "FastAPI generator proxy": FASTAPI_GENERATOR_PROXY,
        "scaffold only": scaffold_of(reference),
    }


def to_reference(source: str) -> float:
    reference = reference_source()
    scaffold = scaffold_of(reference)
    return similarity(own_fingerprints(source, scaffold), own_fingerprints(reference, scaffold))


# Three whole proxies written for the threshold's calibration from the learner bundle and the
# notebooks alone, each in its own style (each file's header says how; 100/100 by labkit grade).
HONEST_DIR = Path(__file__).parent / "honest"
HONEST = sorted(p.stem for p in HONEST_DIR.glob("*.py"))


def honest_source(name: str) -> str:
    return (HONEST_DIR / f"{name}.py").read_text(encoding="utf-8")


def bodies_of(source: str, functions: set[str]) -> dict[str, str]:
    """The bodies of ``functions`` in ``source``, docstrings left out, indented as written."""
    lines = source.split("\n")
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in functions:
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            found[node.name] = "\n".join(lines[body[0].lineno - 1 : node.end_lineno])
    return found


# ---------------------------------------------------------------------------------------------
# Normalisation and fingerprints


def test_normalising_drops_comments_docstrings_and_names_but_keeps_structure() -> None:
    source = (
        'def total(prices):\n    """Add them up."""\n    s = 0  # running\n'
        "    for p in prices:\n        s += p * 1.5\n    return len(prices), 'done'\n"
    )
    assert normalised_tokens(source) == [
        "def", "V", "(", "V", ")", ":",
        "V", "=", "N",
        "for", "V", "in", "V", ":", "V", "+=", "V", "*", "N",
        "return", "len", "(", "V", ")", ",", "S",
    ]  # fmt: skip


def test_renaming_every_name_changes_no_fingerprint() -> None:
    source = "def area(w, h):\n    result = w * h\n    return max(result, 0)\n" * 4
    renamed = source.replace("area", "f").replace("result", "r").replace("w", "x")
    assert fingerprints(renamed) == fingerprints(source)


def test_a_submission_that_does_not_tokenize_is_fingerprinted_up_to_where_it_breaks() -> None:
    broken = reference_source() + '\n\nx = """never closed\n'
    assert to_reference(broken) == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------
# Scores on real inputs


def test_a_renamed_and_reordered_copy_of_the_reference_scores_above_the_threshold() -> None:
    copy = renamed_and_reordered(reference_source())
    assert "my_relay_2" in copy and "### BEGIN SOLUTION" not in copy
    assert to_reference(copy) > 0.85 > DEFAULT_THRESHOLD


@pytest.mark.parametrize("name", VARIANTS)
def test_each_broken_variant_is_flagged_as_the_near_copy_of_the_reference_it_is(
    name: str,
) -> None:
    assert to_reference(broken_source(name)) > DEFAULT_THRESHOLD


def test_a_learner_who_copied_half_of_their_parts_is_still_flagged() -> None:
    reference = reference_source()
    copied = {"make_client", "chat_completions", "sse_events", "read_events", "relay", "produce"}
    parts = {r.function: "\n".join(r.solution) for r in regions(reference)}
    half = fill_regions(reference, {f: parts[f] if f in copied else HONEST_PARTS[f] for f in parts})
    row = compare_roster({"ana": half}, reference=reference)["ana"]
    assert row.to_reference is not None
    assert DEFAULT_THRESHOLD < row.to_reference.score < 0.7
    assert row.flag == "near-copy"


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(RAW_ASGI_PROXY, id="raw-asgi"),
        pytest.param(FASTAPI_GENERATOR_PROXY, id="fastapi-generator"),
        pytest.param(fill_regions(reference_source(), HONEST_PARTS), id="honest-fill-in"),
        pytest.param(fill_regions(reference_source(), HONEST_TERSE_PARTS), id="honest-terse"),
    ],
)
def test_an_independently_written_proxy_scores_below_the_threshold(source: str) -> None:
    compile(source, "proxy.py", "exec")
    assert to_reference(source) < DEFAULT_THRESHOLD


def test_two_honest_learners_on_the_same_scaffold_are_not_flagged() -> None:
    reference = reference_source()
    rows = compare_roster(
        {
            "ana": fill_regions(reference, HONEST_PARTS),
            "ben": fill_regions(reference, HONEST_TERSE_PARTS),
        },
        reference=reference,
    )
    assert rows["ana"].closest == "ben"
    assert rows["ana"].to_closest is not None
    assert rows["ana"].to_closest.score < DEFAULT_THRESHOLD
    assert (rows["ana"].flag, rows["ben"].flag) == ("", "")


@pytest.mark.parametrize("name", HONEST)
def test_each_honest_solution_scores_below_the_threshold_against_the_reference(name: str) -> None:
    source = honest_source(name)
    compile(source, f"{name}.py", "exec")
    assert "# YOUR CODE HERE:" not in source  # every part written: a whole hand-in
    row = compare_roster({name: source}, reference=reference_source())[name]
    assert row.to_reference is not None
    assert row.to_reference.score < DEFAULT_THRESHOLD - 0.15
    assert (row.flag, row.matched) == ("", ())


def test_the_honest_solutions_and_fill_ins_are_no_near_copies_of_each_other() -> None:
    reference = reference_source()
    roster = {name: honest_source(name) for name in HONEST}
    roster["fill-in"] = fill_regions(reference, HONEST_PARTS)
    roster["terse"] = fill_regions(reference, HONEST_TERSE_PARTS)
    rows = compare_roster(roster, reference=reference)
    assert len(HONEST) == 3
    for row in rows.values():
        assert row.to_closest is not None and row.to_closest.score < DEFAULT_THRESHOLD - 0.15
        assert row.flag == ""


@pytest.mark.parametrize("name", HONEST)
def test_a_renamed_copy_of_an_honest_solution_is_flagged_as_the_copy_it_is(name: str) -> None:
    honest = honest_source(name)
    rows = compare_roster(
        {"ana": honest, "ben": renamed_and_reordered(honest)}, reference=reference_source()
    )
    assert rows["ben"].to_closest is not None and rows["ben"].to_closest.score > 0.9
    assert rows["ben"].near_copy is not None and rows["ben"].near_copy[0] == "learner"


def test_an_honest_hand_in_of_two_notebooks_is_not_flagged_for_its_given_signatures() -> None:
    """Bug (issue 45): an honest learner's proxy, written from the notebooks alone, was flagged
    as a near-copy of the reference. Notebooks 03 and 07 of ``tasks_and_classes``, alone,
    scored 0.80 on 24 shared fingerprints: the file was fingerprinted whole, so k-grams across
    a given signature and the first or last line of a part (which everybody starts alike)
    counted as the learner's. Fix: only the learner's own lines are fingerprinted; they share
    8, too few to flag."""
    reference = reference_source()
    parts = bodies_of(
        honest_source("tasks_and_classes"), {"sse_events", "upstream_timeout", "next_item"}
    )
    hand_in = write_parts(scaffold_of(reference), parts)
    assert hand_in.count("# YOUR CODE HERE:") == 16
    row = compare_roster({"ana": hand_in}, reference=reference)["ana"]
    assert row.to_reference is not None and row.to_reference.shared < MIN_SHARED
    assert row.flag == ""


def test_the_scaffold_alone_scores_nothing_once_the_scaffold_is_subtracted() -> None:
    reference = reference_source()
    scaffold = scaffold_of(reference)
    assert "# YOUR CODE HERE: relay" in scaffold
    assert to_reference(scaffold) == 0.0
    rows = compare_roster({"ana": scaffold, "ben": scaffold}, reference=reference)
    assert rows["ana"].own == 0
    assert rows["ana"].to_closest is not None and rows["ana"].to_closest.score == 0.0
    assert rows["ana"].flag == ""


def test_without_the_scaffold_subtracted_the_scaffold_alone_would_look_copied() -> None:
    reference = reference_source()
    rows = compare_roster({"ana": scaffold_of(reference)}, reference=reference, base="")
    assert rows["ana"].to_reference is not None
    assert rows["ana"].to_reference.score > DEFAULT_THRESHOLD


def write_parts(scaffold: str, parts: dict[str, str]) -> str:
    """``scaffold`` (the learner bundle's proxy.py) with the stubs of ``parts`` written: each
    stub's marker line and the lines up to the next blank one replaced by the part's body."""
    lines, out = scaffold.split("\n"), []
    index = 0
    while index < len(lines):
        line = lines[index]
        function = line.strip().removeprefix(STUB_MARK).split(",")[0]
        if line.strip().startswith(STUB_MARK) and function in parts:
            out.append(parts[function])
            while index < len(lines) and lines[index].strip():
                index += 1
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


def test_a_learner_who_wrote_only_the_parts_everybody_writes_alike_is_not_flagged() -> None:
    """Bug: short parts, as the docstrings all but dictate them, scored 0.93 against the
    reference and were flagged. Fix: a flag also needs ``MIN_SHARED`` fingerprints.
    (``make_queue`` left this set when it gained its stall deadline: it is a design now.)"""
    reference = reference_source()
    alike = {"make_client", "error_event", "upstream_timeout"}
    parts = {r.function: "\n".join(r.solution) for r in regions(reference) if r.function in alike}
    row = compare_roster({"ana": write_parts(scaffold_of(reference), parts)}, reference=reference)
    assert row["ana"].to_reference is not None
    assert row["ana"].to_reference.score > DEFAULT_THRESHOLD
    assert 0 < row["ana"].to_reference.shared < MIN_SHARED
    assert row["ana"].flag == ""


def test_a_copy_between_two_learners_names_the_other_learner() -> None:
    reference = reference_source()
    honest = fill_regions(reference, HONEST_PARTS)
    rows = compare_roster(
        {"ana": honest, "ben": renamed_and_reordered(honest), "cy": RAW_ASGI_PROXY},
        reference=reference,
    )
    assert (rows["ana"].closest, rows["ben"].closest) == ("ben", "ana")
    assert rows["ana"].near_copy is not None and rows["ana"].near_copy[0] == "learner"
    assert rows["cy"].flag == ""


def test_matched_spans_pair_each_copied_line_with_the_line_it_copies() -> None:
    reference = reference_source()
    copy = renamed_and_reordered(reference)
    spans = matched_spans(copy, reference, base=scaffold_of(reference))
    assert spans and all(span.shared > 0 for span in spans)
    assert [span.lines for span in spans] == sorted(span.lines for span in spans)
    lines, copy_lines = reference.split("\n"), copy.split("\n")
    for span in spans:
        assert span.text == "\n".join(copy_lines[span.lines[0] - 1 : span.lines[1]])
        assert span.other_text == "\n".join(lines[span.other_lines[0] - 1 : span.other_lines[1]])
    (relay,) = [s for s in spans if "reader = asyncio.create_task(read_events(" in s.other_text]
    assert "my_reader_2 = asyncio.create_task(my_read_events_2(" in relay.text
    assert sum(span.shared for span in spans) == len(
        own_fingerprints(copy, scaffold_of(reference))
        & own_fingerprints(reference, scaffold_of(reference))
    )


def test_the_instructor_page_shows_a_flagged_pairs_matched_lines_next_to_each_other() -> None:
    reference = reference_source()
    honest = honest_source("minimal")
    rows = compare_roster(
        {"ana": honest, "ben": renamed_and_reordered(honest), "cy": RAW_ASGI_PROXY},
        reference=reference,
    )
    assert rows["ben"].matched and rows["cy"].matched == ()
    page = similarity_markdown(rows, reference="solutions/proxy.py")
    evidence = page.split("## The lines that matched\n", 1)[1]
    assert "### ben: near-copy of ana (" in evidence and "### cy" not in evidence
    span = next(s for s in rows["ben"].matched if "put_unless_stalled" in s.other_text)
    first, last = span.lines
    assert f"**ben, lines {first}-{last}** matches **ana, lines " in evidence
    ana_line = next(line for line in span.other_text.split("\n") if "put_unless_stalled" in line)
    number = span.other_lines[0] + span.other_text.split("\n").index(ana_line)
    assert f"{number}  {ana_line}" in evidence  # numbered as in ana's file


def test_a_reference_without_solution_regions_has_no_scaffold() -> None:
    assert scaffold_of(RAW_ASGI_PROXY) == ""


# ---------------------------------------------------------------------------------------------
# The CSV, the learner's feedback and the CLI


def make_flagged_report() -> tuple[SubmissionReport, dict[str, SimilarityRow]]:
    reference = reference_source()
    rows = compare_roster({"ana": reference, "ben": RAW_ASGI_PROXY}, reference=reference)
    report = SubmissionReport(
        "ana", "ana.py", [CheckResult("trickle", True, "ok", {})], Rubric(max_score=10)
    )
    return report, rows


def test_the_csv_row_shows_the_scores_and_the_flag() -> None:
    report, rows = make_flagged_report()
    row = csv_row(report, rows["ana"])
    assert row["similar_to_reference"] == "1.00"
    assert row["most_similar_learner"] == "ben"
    assert row["similarity_flag"] == "near-copy"
    assert csv_row(report)["similarity_flag"] == ""


def test_the_learners_feedback_mentions_a_flag_neutrally_and_names_nobody() -> None:
    report, rows = make_flagged_report()
    text = feedback_markdown(report, rows["ana"])
    assert (
        "## Similarity\n\nMuch of this code closely matches the reference solution "
        "(similarity 1.00, where 1 means the same code once names, comments and layout are "
        "set aside). Your instructor sees this note next to your grade; "
        "it does not change your score." in text
    )
    assert "ben" not in text
    unflagged = feedback_markdown(report, rows["ben"])
    assert "Similarity" not in unflagged


SYNTAX_ERROR_TAIL = "\n\ndef not_finished(:\n    pass\n"


@pytest.mark.sockets
def test_the_roster_writes_similarity_columns_and_an_instructor_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each submission ends in a syntax error, so grading is instant; fingerprints still see
    the code before it."""
    reference = reference_source()
    roster = tmp_path / "submissions"
    roster.mkdir()
    (roster / "ana.py").write_text(reference + SYNTAX_ERROR_TAIL)
    (roster / "ben.py").write_text(renamed_and_reordered(reference) + SYNTAX_ERROR_TAIL)
    (roster / "cy.py").write_text(RAW_ASGI_PROXY + SYNTAX_ERROR_TAIL)
    out = tmp_path / "grades"
    argv = ["grade-class", str(roster), "--out", str(out), "--reference", str(REFERENCE)]

    assert main([*argv, "--only", "trickle", "--jobs", "3", "--similar-above", "0.6"]) == 1

    with (out / "grades.csv").open() as handle:
        rows = {row["learner"]: row for row in csv.DictReader(handle)}
    assert {name: row["similarity_flag"] for name, row in rows.items()} == {
        "ana": "near-copy",
        "ben": "near-copy",
        "cy": "",
    }
    assert rows["ana"]["most_similar_learner"] == "ben"
    assert float(rows["cy"]["similar_to_reference"]) < 0.6
    page = (out / "similarity.md").read_text()
    assert "Flagged above 0.60" in page
    assert "| cy |" in page
    assert "### ana: near-copy of " in page and "### cy" not in page
    assert page.count("reader = asyncio.create_task(read_events(upstream, queue))") >= 1
    assert "## Similarity" in (out / "feedback" / "ben.md").read_text()
    assert "## Similarity" not in (out / "feedback" / "cy.md").read_text()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ana  0/100  [syntax_error]  near-copy of the reference (1.00)"
    assert lines[2] == "cy   0/100  [syntax_error]"


@pytest.mark.sockets
def test_without_a_reference_the_roster_says_so_and_leaves_the_columns_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ana.py").write_text(reference_source() + SYNTAX_ERROR_TAIL)
    monkeypatch.chdir(tmp_path)  # no solutions/proxy.py here

    assert main(["grade-class", "ana.py", "--out", "grades", "--only", "trickle"]) == 1

    assert (
        "Similarity not measured: no solutions/proxy.py here. Pass --reference PATH "
        "(the instructor's proxy.py) to flag near-copies.\n" in capsys.readouterr().err
    )
    with (tmp_path / "grades" / "grades.csv").open() as handle:
        (row,) = csv.DictReader(handle)
    assert (row["similar_to_reference"], row["similarity_flag"]) == ("", "")
    assert not (tmp_path / "grades" / "similarity.md").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--reference", "nowhere/proxy.py"],
            "There is no reference solution at nowhere/proxy.py. Pass --reference the "
            "instructor's proxy.py (the one with ### BEGIN SOLUTION regions).",
        ),
        (
            ["--similar-above", "1.5"],
            "--similar-above must be between 0 and 1 (a share of fingerprints), got 1.5. "
            f"The default, {DEFAULT_THRESHOLD:.2f}, is above every independent proxy measured.",
        ),
    ],
)
def test_roster_similarity_usage_errors_say_what_to_do(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ana.py").write_text("x = 1\n")
    base = ["grade-class", str(tmp_path / "ana.py"), "--out", str(tmp_path / "out")]
    assert main([*base, *argv]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
