"""Proxy variants for the benchmarks: the reference proxy's behaviour with other upstream clients.

Each app follows the submission contract (module-level app, ``UPSTREAM_URL``, ``USAGE_LOG``) and
is :mod:`solutions.portable`'s relay (the reference's behaviour around a client interface)
with one upstream client:

* :mod:`bench.proxies.httpx_client` -- httpx with the reference's limits (a control), with
  ``max_connections=None`` and 500 kept alive, and with ``max_connections=1000``;
* :mod:`bench.proxies.httpx2_client` -- httpx2, with its default limits and without a cap.

The aiohttp variant is not here: it is ``solutions.aiohttp_proxy``, the reference to
deploy. uvloop/httptools are a server option, not a module: the runner starts any app with
``--loop uvloop --http httptools``.
"""
