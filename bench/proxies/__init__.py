"""Proxy variants for the benchmarks: the reference proxy with other upstream clients.

Each app is ``solutions/proxy.py``'s own route and relay served by
:func:`solutions.client_seam.proxy_app` over one upstream client, so it follows the submission
contract (module-level app, ``UPSTREAM_URL``, ``USAGE_LOG``) and behaves like the reference:

* :mod:`bench.proxies.httpx_client` -- httpx with ``max_connections=None`` and 500 kept alive,
  and with ``max_connections=1000``;
* :mod:`bench.proxies.httpx2_client` -- httpx2, with its default limits and without a cap.

The aiohttp variant is not here: it is ``solutions.aiohttp_proxy``, the reference to
deploy. uvloop/httptools are a server option, not a module: the runner starts any app with
``--loop uvloop --http httptools``.
"""
