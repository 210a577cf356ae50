"""Resumable streams across two replicas sharing one Redis (notebook 15).

    python -m bench resume [--streams 100] [--grace 3] [--only resume stop ...] [--out FILE.json]
    python -m bench resume --proxy OTHER.py     the same experiments on another proxy file

The setup: the mock (``bench.mock_server``), one private redis-server (``labkit.servers.redis``),
two replicas of ``solutions/proxy.py`` under uvicorn (A and B, the same ``REDIS_URL``, a usage
log each) and one nginx in front of both (an ``upstream`` block holding the two, round robin,
buffering off). A new stream goes to whichever replica nginx picks; nginx names it in the
response header ``X-Replica`` (its ``$upstream_addr``). A request that carries ``X-Replica: a``
or ``b`` is pinned to that replica (a ``map`` picks the upstream group), so every resume and
every Stop here goes through nginx to the *other* replica than the one that runs the answer.

Experiments, each on ``--streams`` concurrent resumable streams from the mock (20 tokens a
second in chunks of 1 to 3 tokens; the cut or the Stop at a random event):

- **resume**: each client is cut once, a quarter to three quarters of the way through a 5 s
  answer, and comes back RECONNECT_S later on the other replica with
  ``Last-Event-ID``. Counted: texts equal, event by event, to the undisturbed answer (the same
  seed asked straight from the mock), events received twice, events missing, the time from the
  resume to its first event, and the usage lines (one each, ``completed``, on the replica that
  ran the answer).
- **stop**: each client presses Stop on the other replica, a quarter to three quarters of the
  way through a 20 s answer. Counted: the mock's records ``cancelled``, the time from the Stop
  sent to the record's end, and to the client's stream's end.
- **abandon**: each client is cut in the first 5 s of a 20 s answer and nobody comes back.
  Counted: records ``cancelled``, the time from the cut to the record's end
  (``RESUME_GRACE_S`` is ``--grace``), usage lines once each.
- **redis-down**: every answer read by its first client and by a follower on the other replica;
  Redis is killed. Counted: the time until every client has its error event, clients that
  hang (nothing within ``HANG_S``), records cancelled, usage lines once each. Then Redis is
  restarted on its port and ``--streams`` / 5 new streams are cut and resumed across replicas.
- **memory**: a ``MemoryLog`` holding 1,000 answers of 200 real chunks (tracemalloc and RSS),
  and the same in Redis through ``RedisLog`` (``INFO memory`` ``used_memory`` before and after,
  ``MEMORY USAGE`` of the answers' keys).

Raw results go to ``--out`` (default ``bench/results/resume-<time>.json``); a summary is
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil
import redis.asyncio as aioredis

from bench.configs import HOST, Server, find_nginx, listening_socket, serve_uvicorn, spawn
from bench.configs import start_mock as start_bench_mock
from labkit.servers.redis import RedisServer
from labkit.sse import SSEDecoder, SSEEvent
from labkit.upstream import MockUpstream

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
REFERENCE = ROOT / "solutions" / "proxy.py"
CHAT = "/v1/chat/completions"
STREAMS = "/v1/streams"
RESUMABLE = {"X-Resumable": "true"}
PROMPT = "Tell me about lighthouses."
PACE: Mapping[str, float] = {"ttft_ms": 200, "tps": 20}
SHORT_TOKENS = 100  # 5 s: resume and stop
LONG_TOKENS = 400  # 20 s: long enough that the grace period and a dead Redis end it first
CUT_BETWEEN = (0.25, 0.75)
RECONNECT_S = 0.5  # how long a cut client is away before it resumes
HANG_S = 30.0
MEMORY_ANSWERS = 1000
MEMORY_EVENTS = 200
EXPERIMENTS = ("resume", "stop", "abandon", "redis-down", "memory")

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 16384;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream both {{ server {a}; server {b}; keepalive 64; }}
    upstream a {{ server {a}; keepalive 32; }}
    upstream b {{ server {b}; keepalive 32; }}
    # X-Replica: a (or b) pins a request to that replica; without it nginx picks, round robin.
    map $http_x_replica $replicas {{ a a; b b; default both; }}
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            proxy_pass http://$replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
            add_header X-Replica $upstream_addr always;
        }}
    }}
}}
"""


def log(message: str) -> None:
    print(f"[resume {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The servers


@dataclass
class Replica:
    name: str  # "a" or "b"
    server: Server
    usage_log: Path

    def usage_lines(self) -> list[dict[str, Any]]:
        if not self.usage_log.exists():
            return []
        return [json.loads(line) for line in self.usage_log.read_text().splitlines()]


@dataclass
class Setup:
    mock: Server
    redis: RedisServer
    replicas: dict[str, Replica]
    nginx: Server
    folder: Path

    @property
    def url(self) -> str:
        return self.nginx.url

    def replica_at(self, upstream_addr: str | None) -> str | None:
        """Which replica (``a`` or ``b``) nginx's ``$upstream_addr`` of a response names."""
        for replica in self.replicas.values():
            if upstream_addr == f"{HOST}:{replica.server.port}":
                return replica.name
        return None

    def stop(self) -> None:
        for server in (self.nginx, *(r.server for r in self.replicas.values()), self.mock):
            server.stop()
        self.redis.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_replica(
    name: str, proxy: Path, mock: Server, redis_url: str, env: dict[str, str], folder: Path
) -> Replica:
    usage_log = folder / f"usage-{name}.jsonl"
    paths = [str(proxy.parent), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **env,
        "UPSTREAM_URL": mock.url,
        "REDIS_URL": redis_url,
        "USAGE_LOG": str(usage_log),
        "PYTHONPATH": os.pathsep.join(paths),
    }
    server = serve_uvicorn(f"replica-{name}", f"{proxy.stem}:app", env)
    return Replica(name, server, usage_log)


def start_nginx(a: Server, b: Server) -> Server:
    nginx = find_nginx()
    if nginx is None:
        raise SystemExit("bench resume: nginx is not installed (apt-get install nginx)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-resume-nginx-"))
    sock = listening_socket("nginx")
    port = sock.getsockname()[1]
    conf = workdir / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            prefix=workdir, a=f"{HOST}:{a.port}", b=f"{HOST}:{b.port}", host=HOST, port=port
        )
    )
    argv = [nginx, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "e.log")]
    return spawn(
        "nginx", argv, port, env={"NGINX": f"{sock.fileno()};"}, workdir=workdir, sock=sock
    )


def start(proxy: Path, grace_s: float) -> Setup:
    folder = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    started: list[Server] = []
    try:
        started.append(mock := start_bench_mock(int(PACE["ttft_ms"]), PACE["tps"], SHORT_TOKENS))
        started.append(redis := RedisServer(name="bench-resume-redis").start())
        env = {"RESUME_GRACE_S": str(grace_s)}
        replicas = {}
        for name in ("a", "b"):
            replicas[name] = start_replica(name, proxy, mock, redis.url, env, folder)
            started.append(replicas[name].server)
        nginx = start_nginx(replicas["a"].server, replicas["b"].server)
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    setup = Setup(mock, redis, replicas, nginx, folder)
    for pin in ("a", "b"):  # each replica answers, through nginx, once its app has started
        deadline = time.monotonic() + 20
        while True:
            try:
                got = httpx.get(f"{setup.url}{STREAMS}/none", headers={"X-Replica": pin})
                if got.status_code == 404 and setup.replica_at(got.headers.get("x-replica")):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                setup.stop()
                raise SystemExit(f"bench resume: replica {pin} did not answer through nginx")
            time.sleep(0.1)
    return setup


# ---------------------------------------------------------------------------------------------
# A client: every event stamped with the arrival of the raw bytes that completed it


@dataclass
class Read:
    status: int = 0
    replica: str | None = None  # which replica answered (nginx's X-Replica)
    stream_id: str | None = None
    events: list[tuple[float, int | None, str]] = field(default_factory=list)  # (t, id, data)
    end: Literal["end", "cut", "hung", "broken"] = "end"
    error: str | None = None  # what broke it (a transport error)
    ended_at: float = 0.0  # time.monotonic()
    ended_wall: float = 0.0  # time.time(): the mock's records' clock

    @property
    def data(self) -> list[str]:
        return [data for _, _, data in self.events]

    @property
    def numbered(self) -> list[int]:
        """The ids of the answer's own events (an error event has none: by the SSE rules it
        would carry on the last id seen)."""
        return [i for _, i, data in self.events if i is not None and not is_error(data)]

    def error_at(self) -> float | None:
        return next((t for t, _, data in self.events if is_error(data)), None)


def is_error(data: str) -> bool:
    return data.startswith("{") and "error" in json.loads(data)


async def read(
    setup: Setup,
    client: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
    cut_after: int | None = None,
    on_event: Callable[[Read], None] | None = None,
) -> Read:
    """One streamed request through nginx, to its end or cut after ``cut_after`` events."""
    out = Read()
    try:
        async with client.stream(
            method, setup.url + path, json=json_body, headers=headers
        ) as response:
            out.status = response.status_code
            out.replica = setup.replica_at(response.headers.get("x-replica"))
            out.stream_id = response.headers.get("x-stream-id")
            decoder = SSEDecoder()
            async with asyncio.timeout(HANG_S):
                async for chunk in response.aiter_raw():
                    t = time.monotonic()
                    for item in decoder.decode(chunk):
                        if isinstance(item, SSEEvent):
                            event_id = int(item.id) if item.id and item.id.isdigit() else None
                            out.events.append((t, event_id, item.data))
                            if on_event is not None:
                                on_event(out)
                    if cut_after is not None and len(out.events) >= cut_after:
                        out.end = "cut"
                        break
    except TimeoutError:
        out.end = "hung"
    except httpx.TransportError as exc:
        out.end, out.error = "broken", f"{type(exc).__name__}: {exc}"
    out.ended_at, out.ended_wall = time.monotonic(), time.time()
    return out


def chat(seed: int, tokens: int, pace: Mapping[str, float] = PACE) -> dict[str, Any]:
    return {
        "model": "mock-gpt",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "mock": {**pace, "tokens": tokens, "seed": seed},
    }


def texts(data: list[str]) -> list[str]:
    """Each chunk's text, event by event ([DONE], usage and errors carry none)."""
    out = []
    for item in data:
        if item.startswith("{"):
            chunk = json.loads(item)
            if chunk.get("choices"):
                out.append(str(chunk["choices"][0].get("delta", {}).get("content") or ""))
    return out


async def undisturbed(setup: Setup, seeds: list[int], tokens: int) -> dict[int, list[str]]:
    """Each seed's answer straight from the mock, at full speed (the words depend only on the
    seed, the prompt and the length)."""
    fast = {"ttft_ms": 0, "tps": 10_000}
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(seed: int) -> list[str]:
            response = await client.post(setup.mock.url + CHAT, json=chat(seed, tokens, fast))
            blocks = response.text.split("\n\n")
            return texts([b.removeprefix("data: ") for b in blocks if b.startswith("data: ")])

        answers = await asyncio.gather(*(one(seed) for seed in seeds))
    return dict(zip(seeds, answers, strict=True))


def other(replica: str | None) -> str:
    return "b" if replica == "a" else "a"


def cut_points(answers: dict[int, list[str]], rng: random.Random, share: float = 1.0) -> list[int]:
    """For each answer, an event between a quarter and three quarters of the way through its
    first ``share`` (an answer's events: its chunks, 1 to 3 tokens each, and [DONE])."""
    low, high = CUT_BETWEEN
    return [
        max(1, round(rng.uniform(low, high) * share * (len(chunks) + 1)))
        for chunks in answers.values()
    ]


def client_pool() -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=0)
    return httpx.AsyncClient(timeout=httpx.Timeout(HANG_S), limits=limits)


def records_by_seed(setup: Setup, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """The mock's record of the proxy's request for each seed (the first with that seed)."""
    wanted = set(seeds)
    found: dict[int, dict[str, Any]] = {}
    for record in MockUpstream(setup.mock.url, timeout_s=30).requests():
        seed = record["scenario"].get("seed")
        if seed in wanted and seed not in found:
            found[seed] = record
    return found


def wait_for_records(setup: Setup, seeds: list[int], timeout: float) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        records = records_by_seed(setup, seeds)
        ended = [r for r in records.values() if r["state"] not in ("queued", "running")]
        if len(ended) == len(seeds) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def usage_count(setup: Setup, records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """How many usage lines each answer got, on which replica, with which outcome."""
    lines = {name: replica.usage_lines() for name, replica in setup.replicas.items()}
    per_answer: dict[str, list[tuple[str, str]]] = {r["id"]: [] for r in records.values()}
    for name, replica_lines in lines.items():
        for line in replica_lines:
            if line["id"] in per_answer:
                per_answer[line["id"]].append((name, line["outcome"]))
    counts = [len(found) for found in per_answer.values()]
    outcomes: dict[str, int] = {}
    for found in per_answer.values():
        for _, outcome in found:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "answers": len(per_answer),
        "logged_exactly_once": sum(1 for c in counts if c == 1),
        "logged_twice_or_more": sum(1 for c in counts if c > 1),
        "not_logged": sum(1 for c in counts if c == 0),
        "outcomes": outcomes,
    }


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "min": None, "p50": None, "max": None}
    return {
        "n": len(values),
        "min": round(min(values), 4),
        "p50": round(statistics.median(values), 4),
        "max": round(max(values), 4),
    }


# ---------------------------------------------------------------------------------------------
# The experiments


async def cut_and_resume(
    setup: Setup, seed: int, tokens: int, cut_at: int
) -> tuple[Read, Read, float]:
    """Cut after ``cut_at`` events, away RECONNECT_S, back on the other replica."""
    async with client_pool() as client:
        first = await read(
            setup,
            client,
            "POST",
            CHAT,
            json_body=chat(seed, tokens),
            headers=RESUMABLE,
            cut_after=cut_at,
        )
        await asyncio.sleep(RECONNECT_S)
        last = (first.numbered or [0])[-1]
        asked = time.monotonic()
        headers = {"X-Replica": other(first.replica), "Last-Event-ID": str(last)}
        again = await read(setup, client, "GET", f"{STREAMS}/{first.stream_id}", headers=headers)
        return first, again, asked


async def resume(setup: Setup, streams: int, rng: random.Random, base: int) -> dict[str, Any]:
    seeds = list(range(base, base + streams))
    expected = await undisturbed(setup, seeds, SHORT_TOKENS)
    await asyncio.to_thread(MockUpstream(setup.mock.url).reset)
    cuts = cut_points(expected, rng)
    load = os.getloadavg()[0]
    runs = await asyncio.gather(
        *(
            cut_and_resume(setup, seed, SHORT_TOKENS, cut)
            for seed, cut in zip(seeds, cuts, strict=True)
        )
    )
    per_stream: list[dict[str, Any]] = []
    for seed, (first, again, asked) in zip(seeds, runs, strict=True):
        numbered = first.numbered + again.numbered
        data = first.data + again.data
        per_stream.append(
            {
                "seed": seed,
                "cut_after": len(first.events),
                "posted_to": first.replica,
                "post_status": first.status,
                "resumed_on": again.replica,
                "resume_status": again.status,
                "error_events": sum(is_error(item) for item in data),
                "equal": texts(data) == expected[seed] and data[-1:] == ["[DONE]"],
                "repeated": len(numbered) - len(set(numbered)),
                "missing": (max(numbered) - len(set(numbered))) if numbered else 0,
                "first_resumed_event_s": (again.events[0][0] - asked) if again.events else None,
                "end": again.end,
            }
        )
    records = await asyncio.to_thread(wait_for_records, setup, seeds, 10)
    return {
        "streams": streams,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "equal": sum(s["equal"] for s in per_stream),
        "repeated_events": sum(s["repeated"] for s in per_stream),
        "missing_events": sum(s["missing"] for s in per_stream),
        "streams_with_an_error_event": sum(s["error_events"] > 0 for s in per_stream),
        "post_status": {
            str(code): sum(s["post_status"] == code for s in per_stream)
            for code in sorted({s["post_status"] for s in per_stream})
        },
        "resumed_on_the_other_replica": sum(
            s["resumed_on"] is not None and s["resumed_on"] != s["posted_to"] for s in per_stream
        ),
        "posted_to": {name: sum(s["posted_to"] == name for s in per_stream) for name in "ab"},
        "first_resumed_event_s": spread(
            [float(s["first_resumed_event_s"]) for s in per_stream if s["first_resumed_event_s"]]
        ),
        "records": {
            state: sum(r["state"] == state for r in records.values())
            for state in ("completed", "cancelled", "running", "errored")
        },
        "usage": usage_count(setup, records),
        "per_stream": per_stream,
    }


async def press_stop(setup: Setup, seed: int, stop_at: int) -> tuple[Read, float, int]:
    """Read until ``stop_at`` events, press Stop on the other replica, read to the end."""
    async with client_pool() as client:
        ready: asyncio.Future[Read] = asyncio.get_running_loop().create_future()

        def note(out: Read) -> None:
            if len(out.events) >= stop_at and not ready.done():
                ready.set_result(out)

        reading = asyncio.create_task(
            read(
                setup,
                client,
                "POST",
                CHAT,
                json_body=chat(seed, LONG_TOKENS),
                headers=RESUMABLE,
                on_event=note,
            )
        )
        done, _ = await asyncio.wait((ready, reading), return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:
            return await reading, 0.0, 0
        first = ready.result()
        sent = time.time()
        stop = await client.post(
            f"{setup.url}{STREAMS}/{first.stream_id}/cancel",
            headers={"X-Replica": other(first.replica)},
        )
        return await reading, sent, stop.status_code


async def stop(setup: Setup, streams: int, rng: random.Random, base: int) -> dict[str, Any]:
    seeds = list(range(base, base + streams))
    cuts = cut_points(await undisturbed(setup, seeds, LONG_TOKENS), rng)
    await asyncio.to_thread(MockUpstream(setup.mock.url).reset)
    load = os.getloadavg()[0]
    runs = await asyncio.gather(
        *(press_stop(setup, seed, cut) for seed, cut in zip(seeds, cuts, strict=True))
    )
    records = await asyncio.to_thread(wait_for_records, setup, seeds, 10)
    to_cancel, to_end, per_stream = [], [], []
    for seed, cut, (reading, sent, status) in zip(seeds, cuts, runs, strict=True):
        record = records.get(seed, {})
        if record.get("state") == "cancelled" and sent:
            to_cancel.append(record["ended_at"] - sent)
        if sent:
            to_end.append(reading.ended_wall - sent)
        per_stream.append(
            {
                "seed": seed,
                "stop_after": cut,
                "status": reading.status,
                "end": reading.end,
                "error": reading.error,
                "events": len(reading.events),
                "stop_status": status,
                "record": record.get("state"),
                "tokens_generated": record.get("tokens_generated"),
                "stop_to_record_end_s": record["ended_at"] - sent
                if record.get("ended_at") and sent
                else None,
            }
        )
    return {
        "streams": streams,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "stop_answered_200": sum(status == 200 for _, _, status in runs),
        "cancelled": sum(r["state"] == "cancelled" for r in records.values()),
        "completed": sum(r["state"] == "completed" for r in records.values()),
        "stop_to_upstream_cancelled_s": spread(to_cancel),
        "stop_to_client_stream_end_s": spread(to_end),
        "client_streams_ended_with_done": sum(r.data[-1:] == ["[DONE]"] for r, _, _ in runs),
        "usage": usage_count(setup, records),
        "per_stream": per_stream,
    }


async def abandon(
    setup: Setup, streams: int, rng: random.Random, base: int, grace_s: float
) -> dict[str, Any]:
    seeds = list(range(base, base + streams))
    long_answers = await undisturbed(setup, seeds, LONG_TOKENS)
    cuts = cut_points(long_answers, rng, SHORT_TOKENS / LONG_TOKENS)  # in its first 5 s of 20
    await asyncio.to_thread(MockUpstream(setup.mock.url).reset)
    load = os.getloadavg()[0]

    async def cut(seed: int, at: int) -> Read:
        async with client_pool() as client:
            return await read(
                setup,
                client,
                "POST",
                CHAT,
                json_body=chat(seed, LONG_TOKENS),
                headers=RESUMABLE,
                cut_after=at,
            )

    runs = await asyncio.gather(*(cut(seed, at) for seed, at in zip(seeds, cuts, strict=True)))
    records = await asyncio.to_thread(wait_for_records, setup, seeds, grace_s + 15)
    after_cut = [
        records[seed]["ended_at"] - first.ended_wall
        for seed, first in zip(seeds, runs, strict=True)
        if seed in records and records[seed]["state"] == "cancelled"
    ]
    per_stream = [
        {
            "seed": seed,
            "cut_after": len(first.events),
            "end": first.end,
            "record": records.get(seed, {}).get("state"),
            "tokens_generated": records.get(seed, {}).get("tokens_generated"),
        }
        for seed, first in zip(seeds, runs, strict=True)
    ]
    await asyncio.sleep(1.0)  # a second line, if one were coming
    return {
        "streams": streams,
        "grace_s": grace_s,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "cancelled": sum(r["state"] == "cancelled" for r in records.values()),
        "cut_to_upstream_cancelled_s": spread(after_cut),
        "usage": usage_count(setup, records),
        "per_stream": per_stream,
    }


async def first_and_follower(
    setup: Setup, client: httpx.AsyncClient, seed: int, ready: list[asyncio.Future[None]]
) -> list[Read]:
    """An answer read by its first client, and by a follower on the other replica from event
    0; each sets its future in ``ready`` once it has five events."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[Read] = loop.create_future()
    first_five, follower_five = loop.create_future(), loop.create_future()
    ready += [first_five, follower_five]

    def noting(five: asyncio.Future[None]) -> Callable[[Read], None]:
        def note(out: Read) -> None:
            if not opened.done():
                opened.set_result(out)
            if len(out.events) >= 5 and not five.done():
                five.set_result(None)

        return note

    first = asyncio.create_task(
        read(
            setup,
            client,
            "POST",
            CHAT,
            json_body=chat(seed, LONG_TOKENS),
            headers=RESUMABLE,
            on_event=noting(first_five),
        )
    )
    stream = await opened
    follower = read(
        setup,
        client,
        "GET",
        f"{STREAMS}/{stream.stream_id}",
        headers={"X-Replica": other(stream.replica)},
        on_event=noting(follower_five),
    )
    return [await follower, await first]


async def redis_down(setup: Setup, streams: int, base: int) -> dict[str, Any]:
    seeds = list(range(base, base + streams))
    await asyncio.to_thread(MockUpstream(setup.mock.url).reset)
    load = os.getloadavg()[0]
    async with client_pool() as client:
        ready: list[asyncio.Future[None]] = []
        answers = [
            asyncio.create_task(first_and_follower(setup, client, seed, ready)) for seed in seeds
        ]
        await asyncio.sleep(0)  # every answer has put its futures in ready
        await asyncio.wait_for(asyncio.gather(*ready), HANG_S)
        killed, killed_wall = time.monotonic(), time.time()
        await asyncio.to_thread(setup.redis.kill)
        got = [reading for pair in await asyncio.gather(*answers) for reading in pair]
    records = await asyncio.to_thread(wait_for_records, setup, seeds, 10)
    error_after = [at - killed for at in (r.error_at() for r in got) if at is not None]
    await asyncio.sleep(1.0)  # a second line, if one were coming
    out: dict[str, Any] = {
        "streams": streams,
        "clients": len(got),
        "load_before": load,
        "clients_with_an_error_event": len(error_after),
        "clients_hung": sum(r.end == "hung" for r in got),
        "kill_to_error_event_s": spread(error_after),
        "cancelled": sum(r["state"] == "cancelled" for r in records.values()),
        "kill_to_upstream_cancelled_s": spread(
            [r["ended_at"] - killed_wall for r in records.values() if r["state"] == "cancelled"]
        ),
        "usage": usage_count(setup, records),
    }
    restarted = time.monotonic()
    setup.redis.restart()
    out["restart_s"] = time.monotonic() - restarted
    again = max(1, streams // 5)
    later = list(range(base + streams, base + streams + again))
    expected = await undisturbed(setup, later, SHORT_TOKENS)
    runs = await asyncio.gather(*(cut_and_resume(setup, seed, SHORT_TOKENS, 30) for seed in later))
    out["after_restart"] = {
        "streams": again,
        "posted_200": sum(first.status == 200 for first, _, _ in runs),
        "resumed_equal": sum(
            texts(first.data + resumed.data) == expected[seed]
            and resumed.data[-1:] == ["[DONE]"]
            and resumed.replica != first.replica
            for seed, (first, resumed, _) in zip(later, runs, strict=True)
        ),
    }
    out["load_after"] = os.getloadavg()[0]
    return out


async def real_events(setup: Setup, count: int) -> list[bytes]:
    """``count`` chunk events of one answer, as the mock sends them (the log holds these)."""
    async with httpx.AsyncClient(timeout=30) as client:
        body = chat(1, 3 * count, {"ttft_ms": 0, "tps": 10_000})  # chunks of 1 to 3 tokens
        body["stream_options"] = {"include_usage": True}
        response = await client.post(setup.mock.url + CHAT, json=body)
    events = [block.encode() + b"\n\n" for block in response.text.split("\n\n") if block]
    return events[:count]


async def memory(setup: Setup) -> dict[str, Any]:
    """1,000 answers of 200 events, in a MemoryLog and in Redis. Each answer's events carry
    an id of their own (as each answer's chunks do), so no two answers share a bytes object."""
    from solutions.proxy import MemoryLog, RedisLog

    events = await real_events(setup, MEMORY_EVENTS)
    marker = json.loads(events[0][6:])["id"].encode()

    def answer_events(n: int) -> list[bytes]:
        own = f"chatcmpl-{n:024d}".encode()[: len(marker)]
        return [event.replace(marker, own) for event in events]

    payload = sum(len(event) for event in events)
    gc.collect()
    rss_before = psutil.Process().memory_info().rss
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    memory_log = MemoryLog(4096, 300.0, 10.0)
    for n in range(MEMORY_ANSWERS):
        answer = f"answer-{n}"
        await memory_log.open(answer)
        for seq, event in enumerate(answer_events(n), 1):
            await memory_log.append(answer, seq, event)
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = psutil.Process().memory_info().rss
    in_process = {
        "answers": MEMORY_ANSWERS,
        "events_each": len(events),
        "event_bytes_mean": payload / len(events),
        "payload_bytes_per_answer": payload,
        "traced_bytes": after - before,
        "traced_bytes_per_answer": (after - before) / MEMORY_ANSWERS,
        "rss_delta_bytes": rss_after - rss_before,
    }
    await memory_log.close()
    del memory_log

    redis_log = RedisLog(setup.redis.url, 4096, 300.0, 300.0)  # every seen: key still there
    client = aioredis.from_url(setup.redis.url)
    try:
        await client.flushall()
        used_before = (await client.info("memory"))["used_memory"]

        async def fill(n: int) -> None:
            answer = f"answer-{n}"
            await redis_log.open(answer)
            for seq, event in enumerate(answer_events(n), 1):
                await redis_log.append(answer, seq, event)

        for start in range(0, MEMORY_ANSWERS, 100):
            await asyncio.gather(*(fill(n) for n in range(start, start + 100)))
        used_after = (await client.info("memory"))["used_memory"]
        sampled = [
            int(await client.memory_usage(f"replay:answer-{n}", samples=0) or 0)
            for n in range(0, MEMORY_ANSWERS, MEMORY_ANSWERS // 20)
        ]
        seen = await client.memory_usage("seen:answer-0", samples=0)
        in_redis = {
            "answers": MEMORY_ANSWERS,
            "used_memory_delta_bytes": used_after - used_before,
            "used_memory_delta_per_answer": (used_after - used_before) / MEMORY_ANSWERS,
            "memory_usage_replay_key_mean": statistics.mean(sampled),
            "memory_usage_seen_key": seen,
            "keys": await client.dbsize(),
        }
        await client.flushall()
    finally:
        await client.aclose()
        await redis_log.close()
    return {"in_process": in_process, "in_redis": in_redis}


# ---------------------------------------------------------------------------------------------


def summary(results: dict[str, Any]) -> str:
    lines = []
    if "resume" in results:
        r = results["resume"]
        lines.append(
            f"resume: {r['equal']}/{r['streams']} texts equal to the undisturbed, "
            f"{r['repeated_events']} events repeated, {r['missing_events']} missing, "
            f"{r['resumed_on_the_other_replica']} resumed on the other replica; first resumed "
            f"event p50 {r['first_resumed_event_s']['p50']} s, max "
            f"{r['first_resumed_event_s']['max']} s; usage {r['usage']}"
        )
    if "stop" in results:
        r = results["stop"]
        lines.append(
            f"stop: {r['cancelled']}/{r['streams']} upstreams cancelled; Stop to cancelled "
            f"{r['stop_to_upstream_cancelled_s']}; to the client's end "
            f"{r['stop_to_client_stream_end_s']}; usage {r['usage']}"
        )
    if "abandon" in results:
        r = results["abandon"]
        lines.append(
            f"abandon (grace {r['grace_s']} s): {r['cancelled']}/{r['streams']} cancelled, cut "
            f"to cancelled {r['cut_to_upstream_cancelled_s']}; usage {r['usage']}"
        )
    if "redis-down" in results:
        r = results["redis-down"]
        lines.append(
            f"redis down: {r['clients_with_an_error_event']}/{r['clients']} clients got an "
            f"error event, {r['clients_hung']} hung; kill to error {r['kill_to_error_event_s']}"
            f"; {r['cancelled']}/{r['streams']} upstreams cancelled; usage {r['usage']}; after "
            f"the restart {r['after_restart']}"
        )
    if "memory" in results:
        m = results["memory"]
        lines.append(f"memory in process: {m['in_process']}")
        lines.append(f"memory in Redis: {m['in_redis']}")
    return "\n".join(lines)


async def run(args: argparse.Namespace, setup: Setup) -> dict[str, Any]:
    rng = random.Random(args.seed)
    results: dict[str, Any] = {}
    plan: dict[str, Callable[[int], Awaitable[dict[str, Any]]]] = {
        "resume": lambda base: resume(setup, args.streams, rng, base),
        "stop": lambda base: stop(setup, args.streams, rng, base),
        "abandon": lambda base: abandon(setup, args.streams, rng, base, args.grace),
        "redis-down": lambda base: redis_down(setup, args.streams, base),
        "memory": lambda base: memory(setup),
    }
    for number, name in enumerate(args.only or EXPERIMENTS):
        log(f"{name}: load average {os.getloadavg()[0]:.2f}")
        results[name] = await plan[name](20_000 + 1_000 * number)
        log(summary({name: results[name]}))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench resume", description=__doc__)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--grace", type=float, default=3.0, help="RESUME_GRACE_S (s)")
    parser.add_argument("--only", nargs="+", choices=EXPERIMENTS, metavar="EXPERIMENT")
    parser.add_argument("--proxy", type=Path, default=REFERENCE)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    setup = start(args.proxy.resolve(), args.grace)
    started = time.time()
    try:
        results = asyncio.run(run(args, setup))
    finally:
        setup.stop()
    record = {
        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "proxy": str(args.proxy),
        "streams": args.streams,
        "grace_s": args.grace,
        "cpus": os.cpu_count(),
        "wall_s": round(time.time() - started, 1),
        **results,
    }
    out = args.out or RESULTS / time.strftime("resume-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(summary(results))
    print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
