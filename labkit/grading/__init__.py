"""``labkit grade``: grade learners' proxies with the property checks (``labkit.checks``).

- ``grader``: ``agrade_file(path, rubric)`` grades one ``proxy.py``, each lane of checks against
  its own proxy process, with two mock upstreams of its own, in a temporary directory;
  ``agrade_url(url, upstream, rubric)`` grades a running proxy as a black box;
- ``roster``: ``grade_in_worker`` / ``grade_many``, the same in worker processes with a stripped
  environment and a hard time limit, many at a time;
- ``rubric``: ``Rubric``, weights and limits from TOML; ``report``: ``SubmissionReport`` and its
  renderers (table, JSON, Gradescope ``results.json``, feedback, CSV);
- ``notebook_grader`` and ``notebook_runner``: the parts written in the notebooks; ``zygote``
  and ``confine``: a class's runners forked from one pre-imported process, each confining
  itself as ``bwrap`` would;

Import from the modules. The package imports nothing itself: the notebook runner, a sandboxed
process per learner, is a module here, and importing the grader with it would cost each learner
half a second of CPU.
"""
