"""The reference solutions.

* ``proxy.py`` -- the proxy the lab's notebooks build, over httpx; notebook 06 holds it cell for
  cell. It is what the grader's own tests grade as "correct".
* ``portable.py`` -- the same proxy with the upstream client as a parameter.
* ``aiohttp_proxy.py`` -- ``portable`` over aiohttp: the same behaviour (every check, the fault
  matrix), and the one that meets the benchmark goals for holding many streams (README,
  "Benchmarks"; notebook 10 explains the choice).

They exist for grading, benchmarks and deployment. The notebooks teach the first piece by
piece; nothing in labkit calls them for the learner.
"""
