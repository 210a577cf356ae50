"""``labkit grade``: grade learners' proxies with the property checks (``labkit.checks``).

- ``agrade_file(path, rubric)``: one ``proxy.py``, each lane of checks against its own proxy
  process, with two mock upstreams of its own, in a temporary directory (``grader``);
- ``agrade_url(url, upstream, rubric)``: a running proxy as a black box (``grader``);
- ``grade_in_worker`` / ``grade_many``: the same in worker processes with a stripped
  environment and a hard time limit, many at a time (``roster``);
- ``Rubric``: weights and limits from TOML (``rubric``); ``SubmissionReport`` and its
  renderers: table, JSON, Gradescope ``results.json``, feedback, CSV (``report``).
"""

from labkit.grading.grader import agrade_file, agrade_url
from labkit.grading.report import Problem, SubmissionReport
from labkit.grading.roster import Submission, find_submissions, grade_in_worker, grade_many
from labkit.grading.rubric import Rubric, RubricError

__all__ = [
    "Problem",
    "Rubric",
    "RubricError",
    "Submission",
    "SubmissionReport",
    "agrade_file",
    "agrade_url",
    "find_submissions",
    "grade_in_worker",
    "grade_many",
]
