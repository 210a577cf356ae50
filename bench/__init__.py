"""Benchmarks: the cost of a streaming proxy, measured side by side (``python -m bench``).

Modules, one concept each:

* :mod:`bench.stats` -- pure figures: percentiles, added latency, batching, capacity verdicts;
* :mod:`bench.loadgen` -- the load generator, run in its own process (steady, burst, idle, slow);
* :mod:`bench.meter` -- CPU seconds and resident memory of a server's process tree, and the
  machine's busy CPU seconds (psutil);
* :mod:`bench.configs` -- the configurations: direct, reference proxy, variants, nginx, LiteLLM;
* :mod:`bench.serve` -- uvicorn on a socket the bench bound and handed down (Nagle off);
* :mod:`bench.runner` -- one benchmark run: start the servers, drive the load, collect figures;
* :mod:`bench.report` -- JSON and PNG into ``bench/results/``, a markdown table for the README;
* :mod:`bench.suite` -- wall time of the test suite, grading and nbval (only with ``--suite``);
* :mod:`bench.proxies` -- proxy variants with other upstream clients (submission contract).
"""
