"""The instructor's complete deliverable and the proxies built from it (not installed).

* ``proxy.py``: the proxy the notebooks build part by part, over httpx. Its solution regions
  are the notebooks' own (a test keeps them identical); ``labkit student`` stubs them into the
  learner bundle's ``proxy.py``. The grader's tests grade it as "correct".
* ``client_seam.py``: ``proxy.py``'s route and relay served over another upstream client: the
  little of httpx's API that the relay uses, written down, and the app around it.
* ``aiohttp_proxy.py``: ``proxy.py`` over aiohttp (an adapter of that API), the one that meets
  the benchmark goals for holding many streams (README, "Benchmarks").

Nothing here ships in the ``labkit`` package or in the learner bundle.
"""
