"""The mock upstream as a module-level app, so the grader can serve it in a child process.

``serve_subprocess("mock_upstream.served:app")`` gives each grading run a mock of its
own, on its own CPU time: the checks' clients and a learner's proxy never share an event loop
or a GIL with the mock whose clock they are measured against. Its records, reset and metrics
routes need the token in ``$MOCK_DEBUG_TOKEN``, which the grader makes per grading and gives only
to its own checks: a submission cannot take the usage counts from the mock's books.

It lives in ``mock_upstream`` so that its child imports the mock and nothing of ``labkit``
(``labkit.grading``'s package imports the grader: 1.35 s of CPU against 0.82 s for the mock).
"""

from __future__ import annotations

import os

from mock_upstream.app import DEBUG_TOKEN_ENV, create_app

app = create_app(debug_token=os.environ.get(DEBUG_TOKEN_ENV) or None)
