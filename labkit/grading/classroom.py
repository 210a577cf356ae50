"""GitHub Classroom: the autograding workflow the learner bundle carries.

An instructor pushes the learner bundle to a template repository; GitHub Classroom copies it
for each learner, and every push runs ``.github/workflows/classroom.yml``: one graded step per
check (``labkit grade proxy.py --only ID``, which exits 0 when the check passes or could not be
decided on the runner, 1 when it fails), each worth its rubric weight times ten points, then
the reporter step that sends the results to Classroom. The steps use GitHub's own
``autograding-command-grader`` and ``autograding-grading-reporter`` actions.
"""

from __future__ import annotations

import json

from labkit.checks import CHECKS
from labkit.grading.rubric import Rubric

__all__ = ["POINTS_PER_WEIGHT", "STEP_TIMEOUT_MIN", "grade_command", "workflow"]

POINTS_PER_WEIGHT = 10
STEP_TIMEOUT_MIN = 5  # one check takes 5-25 s on a GitHub runner's 2 to 4 CPUs
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"


def grade_command(check_id: str) -> str:
    return f"labkit grade proxy.py --only {check_id}"


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def workflow(rubric: Rubric | None = None) -> str:
    """The workflow's YAML; a check whose rubric weight is 0 gets no step."""
    rubric = rubric or Rubric()
    checks = [c for c in CHECKS if rubric.weight(c.id) > 0]
    lines = [
        "# GitHub Classroom autograding for the Streaming Proxy Lab: one graded step per check.",
        "# Written by `labkit student`; the instructor's rubric sets each step's points.",
        "name: Autograding",
        '"on":',
        "  - push",
        "  - workflow_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  autograding:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    timeout-minutes: 30",
        "    steps:",
        "      - uses: actions/checkout@v4",
        "      - uses: actions/setup-python@v5",
        "        with:",
        '          python-version: "3.11"',
        "      - name: Install the lab",
        "        run: python -m pip install --quiet .",
    ]
    for check in checks:
        lines += [
            f"      - name: {_quoted(f'{check.id}: {check.summary}')}",
            f"        id: {check.id}",
            f"        uses: {COMMAND_GRADER}",
            "        with:",
            f"          test-name: {check.id}",
            f"          command: {_quoted(grade_command(check.id))}",
            f"          timeout: {STEP_TIMEOUT_MIN}",
            f"          max-score: {round(POINTS_PER_WEIGHT * rubric.weight(check.id))}",
        ]
    lines += [
        "      - name: Autograding Reporter",
        f"        uses: {REPORTER}",
        "        env:",
        *(
            f'          {c.id.upper()}_RESULTS: "${{{{steps.{c.id}.outputs.result}}}}"'
            for c in checks
        ),
        "        with:",
        f"          runners: {','.join(c.id for c in checks)}",
    ]
    return "\n".join(lines) + "\n"
