"""Proxy variants for the benchmarks: the reference proxy's behaviour with other upstream clients.

Each module follows the submission contract (module-level ``app``, ``UPSTREAM_URL``,
``USAGE_LOG``) and differs from the others only in how it talks to the upstream:

* :mod:`bench.proxies.httpx_pool` -- httpx with ``max_connections=None`` and a 500-connection
  keep-alive pool (the "just raise the limits" fix);
* :mod:`bench.proxies.httpx2_client` -- httpx2, the client the openai and anthropic SDKs use;
* :mod:`bench.proxies.aiohttp_client` -- aiohttp with an unlimited connector.

The relay itself (bounded queue, heartbeats, usage capture, errors as events) is in
:mod:`bench.proxies.relay`, written after ``labkit/reference/proxy.py``. uvloop/httptools are a
server option, not a module: the runner starts any of these with ``--loop uvloop``.
"""
