"""GitHub Classroom: the autograding workflow the learner bundle carries, with a grader the
learner's repository cannot change.

An instructor pushes the learner bundle to a template repository; GitHub Classroom copies it
for each learner, and every push runs ``.github/workflows/classroom.yml``. The learner owns
that repository, grader files included, so the workflow never grades with what it finds there
unchecked. ``labkit student`` writes into the workflow the SHA-256 digest of every grader file
of the bundle (``GRADER_DIRS``, ``GRADER_FILES``: labkit, mock_upstream, pyproject.toml, the
grader's lock inside labkit, and the instructor's rubric). The workflow then

1. copies exactly those files out of the repository and checks the copies against the digests:
   on any difference it stops with one line naming the changed files, and every graded step
   scores 0;
2. installs the grader's lock (``labkit/bundle_files/grader-requirements.txt``: the versions
   the Gradescope autograder and the grading image install) and the checked copy, with
   ``--no-deps``, into a virtual environment outside the repository;
3. runs one graded step per check (``labkit grade proxy.py --only ID --rubric RUBRIC``, exit 0
   when the check passes or could not be decided on the runner), each worth the check's points
   in whole points (``Rubric.allot``: they add up to the rubric's ``max_score``);
4. runs one graded step per in-notebook part (``nb08.adapter``), whose points share the
   rubric's ``notebook_share``: the first grades every part once, from the learner's
   ``notebooks/`` and ``proxy.py``, with the course planned into the checked grader
   (``labkit/bundle_files/course.json``), into a file outside the checkout that the other steps
   read (``python -m labkit.grading.classroom PART``); a missing ``notebooks/`` scores each 0
   with what to hand in;
5. reports the results to Classroom.

The steps use GitHub's ``autograding-command-grader`` (``max-score`` is read with ``parseInt``,
hence whole points) and ``autograding-grading-reporter`` (its ``runners`` input must match
``RUNNER_PATTERN``, so each step id is the check id without ``_``).

The workflow file itself cannot carry its own digest: Classroom's protected paths (see
docs/instructors.md) are what shows an instructor that a learner changed it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from labkit.checks import CHECKS
from labkit.errors import BundleError, GradingError, run_command
from labkit.grading.report import summary_of
from labkit.grading.rubric import Rubric, is_part_id

__all__ = [
    "GRADER_DIRS",
    "GRADER_FILES",
    "GRADER_HOME",
    "RUBRIC_FILE",
    "RUNNER_PATTERN",
    "WORKFLOW_FILE",
    "digests",
    "grade_command",
    "grade_parts",
    "grader_files",
    "main",
    "part_step",
    "runner_id",
    "step_points",
    "workflow",
]

WORKFLOW_FILE = ".github/workflows/classroom.yml"
RUBRIC_FILE = ".github/classroom/rubric.toml"
GRADER_DIRS = ("labkit", "mock_upstream")
GRADER_FILES = ("pyproject.toml", RUBRIC_FILE)
GRADER_LOCK = "labkit/bundle_files/grader-requirements.txt"
GRADER_HOME = "$RUNNER_TEMP/labkit-grader"  # outside the learner's checkout
RUNNER_PATTERN = re.compile(r"^([a-zA-Z0-9]+,)*[a-zA-Z0-9]+$")  # the reporter's own check
STEP_TIMEOUT_MIN = 5  # one check takes 5-25 s on a GitHub runner's 2 to 4 CPUs
PARTS_TIMEOUT_MIN = 15  # the first part's step grades every notebook's parts (about a minute)
PARTS_RESULTS = "notebook-parts.json"  # in GRADER_HOME: the parts' verdicts, shared by steps
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
SKIPPED = ("__pycache__",)


def grader_files(root: Path) -> list[str]:
    """The grader's files in the bundle at ``root``, as sorted POSIX paths relative to it."""
    found = [
        path.relative_to(root).as_posix()
        for folder in GRADER_DIRS
        for path in (root / folder).rglob("*")
        if path.is_file()
        and not any(part in SKIPPED for part in path.parts)
        and path.suffix != ".pyc"
    ]
    missing = [name for name in (*GRADER_FILES, GRADER_LOCK) if not (root / name).is_file()]
    if missing:
        raise BundleError(
            f"The bundle at {root} has no {', '.join(missing)}: write the workflow after the "
            "rest of the bundle."
        )
    return sorted({*found, *GRADER_FILES})


def digests(root: Path) -> str:
    """``sha256sum``'s format (digest, two spaces, path), one line per grader file."""
    lines = []
    for name in grader_files(root):
        digest = hashlib.sha256((root / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}")
    return "\n".join(lines) + "\n"


def runner_id(check_id: str) -> str:
    """The check's (or part's) step id for the reporter: letters and digits only."""
    return check_id.replace("_", "").replace(".", "")


def grade_command(check_id: str) -> str:
    if is_part_id(check_id):
        return (
            f'"{GRADER_HOME}/venv/bin/python" -m labkit.grading.classroom {check_id} '
            f'--results "{GRADER_HOME}/{PARTS_RESULTS}"'
        )
    return (
        f'"{GRADER_HOME}/venv/bin/labkit" grade proxy.py --only {check_id} '
        f'--rubric "{GRADER_HOME}/src/{RUBRIC_FILE}"'
    )


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def _script(lines: list[str]) -> list[str]:
    return ["        run: |", *(f"          {line}" if line else "" for line in lines)]


def _check_step(manifest: str) -> list[str]:
    body = [
        f'G="{GRADER_HOME}"',
        'rm -rf "$G" && mkdir -p "$G/src"',
        "cat > \"$G/grader.sha256\" <<'DIGESTS'",
        *manifest.splitlines(),
        "DIGESTS",
        "# copy exactly the listed files (no links), then check the copies, not the checkout",
        'cut -c67- "$G/grader.sha256" | while IFS= read -r f; do',
        '  if [ -f "$f" ] && [ ! -L "$f" ]; then',
        '    mkdir -p "$G/src/$(dirname "$f")" && cp "$f" "$G/src/$f"',
        "  fi",
        "done",
        'if ! (cd "$G/src" && sha256sum --check --quiet --strict "$G/grader.sha256") \\',
        '    > "$G/changed.txt" 2>/dev/null; then',
        "  changed=\"$(sed -e 's/: FAILED.*$//' \"$G/changed.txt\" | paste -sd ' ' -)\"",
        '  echo "::error title=Not graded::score 0: the grader files differ from the'
        " instructor's: $changed. Restore them (git checkout <the first commit> -- FILE) and"
        ' push again."',
        '  rm -rf "$G/src"',
        "  exit 1",
        "fi",
        'echo "The grader files are the instructor\'s ($(wc -l < "$G/grader.sha256") files)."',
    ]
    return ["      - name: Check that the grader files are the instructor's", *_script(body)]


def _install_step() -> list[str]:
    body = [
        f'G="{GRADER_HOME}"',
        'python -m venv "$G/venv"',
        f'"$G/venv/bin/python" -m pip install --quiet -r "$G/src/{GRADER_LOCK}"',
        '"$G/venv/bin/python" -m pip install --quiet --no-deps "$G/src"',
    ]
    return ["      - name: Install the checked grader from its lock", *_script(body)]


def step_points(rubric: Rubric, parts: Sequence[str] = ()) -> dict[str, float]:
    """Each graded step's whole points, by check id and in-notebook part id (``parts``; those
    worth 0 have no step); they add up to ``rubric.max_score``, the parts sharing its
    ``notebook_share``. Raises ``BundleError`` for a ``max_score`` that is not whole."""
    checks = [c.id for c in CHECKS if rubric.weight(c.id) > 0]
    counted = [i for i in parts if rubric.weight(i) > 0]
    try:
        points = rubric.allot(checks, unit=1)
    except ValueError:
        raise BundleError(
            f"GitHub Classroom counts whole points (its command grader reads max-score as an "
            f"integer), and the rubric's max_score is {rubric.max_score:g}. Set max_score to a "
            "whole number in the rubric, then make the bundle again."
        ) from None
    if counted and checks:  # each group rounded within its own share, so the share holds
        share = round(rubric.max_score * rubric.notebook_share)
        points = {
            **replace(rubric, max_score=rubric.max_score - share).allot(checks, unit=1),
            **replace(rubric, max_score=share).allot(counted, unit=1),
        }
    return {i: p for i, p in points.items() if p > 0}


def workflow(rubric: Rubric, manifest: str, parts: Sequence[str] = ()) -> str:
    """The workflow's YAML for the grader files in ``manifest`` (``digests``), with a step per
    in-notebook part of ``parts`` after the checks'; a check or part whose rubric weight is 0
    gets no step."""
    points = step_points(rubric, parts)
    steps = [(c.id, c.summary) for c in CHECKS if c.id in points]
    steps += [(i, summary_of(i)) for i in parts if i in points]
    runners = ",".join(runner_id(i) for i, _ in steps)
    if not RUNNER_PATTERN.match(runners):
        raise BundleError(
            f"Expected step ids of ASCII letters and digits (GitHub's reporter checks them "
            f"against {RUNNER_PATTERN.pattern}), got {runners!r}: name each in-notebook part "
            "with ASCII letters, digits and underscores."
        )
    lines = [
        "# GitHub Classroom autograding for the Streaming Proxy Lab: one graded step per check,",
        "# run by a grader checked against the digests `labkit student` wrote below. Tests added",
        "# in Classroom's web UI replace this file: add none (see docs/instructors.md).",
        "name: Autograding Tests",
        '"on":',
        "  - push",
        "  - workflow_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    timeout-minutes: 30",
        "    steps:",
        "      - uses: actions/checkout@v4",
        "      - uses: actions/setup-python@v5",
        "        with:",
        '          python-version: "3.11"',
        *_check_step(manifest),
        *_install_step(),
    ]
    for step_id, summary in steps:
        # the first part's step grades every part, once: it may take the notebooks' time
        timeout = PARTS_TIMEOUT_MIN if is_part_id(step_id) else STEP_TIMEOUT_MIN
        lines += [
            f"      - name: {_quoted(f'{step_id}: {summary}')}",
            f"        id: {runner_id(step_id)}",
            "        if: always()",
            f"        uses: {COMMAND_GRADER}",
            "        with:",
            f"          test-name: {step_id}",
            f"          command: {_quoted(grade_command(step_id))}",
            f"          timeout: {timeout}",
            f"          max-score: {points[step_id]:g}",
        ]
    lines += [
        "      - name: Autograding Reporter",
        "        if: always()",
        f"        uses: {REPORTER}",
        "        env:",
        *(
            f"          {runner_id(i).upper()}_RESULTS: "
            f'"${{{{steps.{runner_id(i)}.outputs.result}}}}"'
            for i, _ in steps
        ),
        "        with:",
        f"          runners: {runners}",
    ]
    return "\n".join(lines) + "\n"


# --- the notebook parts' steps: graded once, then answered one part per step -------------------


def grade_parts(proxy: Path, notebooks: Path, results: Path) -> dict[str, dict[str, Any]]:
    """Grade every in-notebook part of the packaged course (``notebook_grader.course_dir()``)
    from the learner's ``notebooks`` folder (missing: each part 0, saying what to hand in) and
    their ``proxy``, and write the verdicts to ``results`` as JSON, by part id."""
    from labkit.grading.notebook_grader import course_dir, grade_notebook_parts  # IPython
    from labkit.grading.notebook_parts import course_notebooks

    course = course_notebooks(course_dir())
    rows = grade_notebook_parts(notebooks if notebooks.is_dir() else None, course, proxy=proxy)
    found = {
        r.id: {"passed": r.passed, "verdict": r.verdict, "hint": r.hint, "saw": f"{r.evidence}"}
        for r in rows
    }
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    return found


def _read_results(results: Path) -> dict[str, dict[str, Any]]:
    """The verdicts the first part's step wrote. Raises ``GradingError`` when they are not."""
    why = "not a table by part id"
    try:
        found = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        found, why = None, str(exc)
    if isinstance(found, dict):
        return found
    raise GradingError(
        f"Expected the parts' verdicts in {results} as JSON, by part id (the first part's step "
        f"writes them); that file is not ({why}). Delete it and run the steps again: the first "
        "step grades the parts and writes it anew."
    )


def part_step(part: str, results: Path, proxy: Path, notebooks: Path) -> int:
    """One part's graded step: its verdict (the parts graded first if no step has yet), and 0
    when it passed, 1 when not."""
    if results.is_file():
        found = _read_results(results)
    else:
        found = grade_parts(proxy, notebooks, results)
    row = found.get(part)
    if row is None:
        print(f"FAIL {part}: the grader has no such part: ask your instructor to check the rubric.")
        return 1
    print(f"{'PASS' if row['passed'] else 'FAIL'} {part}: {row['verdict']}")
    if not row["passed"]:
        print(f"    saw: {row['saw']}\n    what to change: {row['hint']}")
    return 0 if row["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labkit.grading.classroom",
        description="one in-notebook part's graded step of the Classroom workflow",
    )
    parser.add_argument("part", help="the part's id, e.g. nb08.adapter")
    parser.add_argument("--results", required=True, help="the parts' verdicts, shared by steps")
    parser.add_argument("--proxy", default="proxy.py")
    parser.add_argument("--notebooks", default="notebooks")
    args = parser.parse_args(argv)
    return run_command(
        lambda: part_step(args.part, Path(args.results), Path(args.proxy), Path(args.notebooks))
    )


if __name__ == "__main__":
    sys.exit(main())
