"""The instructor's complete deliverable and the proxies built from it (not installed).

* ``proxy.py``: the proxy the notebooks build part by part, over httpx. Its solution regions
  are the notebooks' own (a test keeps them identical); ``labkit student`` stubs them into the
  learner bundle's ``proxy.py``. The grader's tests grade it as "correct".
* ``client_seam.py``: ``proxy.py``'s route and relay served over another upstream client: the
  little of httpx's API that the relay uses, written down, and the app around it.
* ``aiohttp_proxy.py``: ``proxy.py`` over aiohttp (an adapter of that API), the one that meets
  the benchmark goals for holding many streams (README, "Benchmarks").
* ``release.py``: the release policies (validation buffers) that ``labkit``'s stream gateway
  (``labkit.make_stream_gateway``) runs inside the stream path (notebook 12).
* ``responses_adapter.py``: OpenAI Responses events normalised into chat chunks (notebook 08).
* ``accumulate.py``: one Anthropic turn's thinking, text and tool deltas by (index, delta type)
  (notebook 09).
* ``billing.py``: billing events priced per model that add up against the provider's books,
  errored and cancelled requests included (notebook 11).

Nothing here ships in the ``labkit`` package or in the learner bundle.
"""
