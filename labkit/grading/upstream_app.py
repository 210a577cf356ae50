"""The mock upstream as a module-level app, so the grader can serve it in a child process.

``serve_subprocess("labkit.grading.upstream_app:app")`` gives each grading run a mock of its
own, on its own CPU time: the checks' clients and a learner's proxy never share an event loop
or a GIL with the mock whose clock they are measured against.
"""

from __future__ import annotations

from mock_upstream import create_app

app = create_app()
