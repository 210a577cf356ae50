"""``labkit grade``, ``grade-url`` and ``grade-class`` end to end: exact output where it is
deterministic, exit codes, each command refusing another mode's options, and a batch of
submissions that fail in every way a submission can, which must not stop the batch."""

from __future__ import annotations

import csv
import json
import re
import zipfile
from pathlib import Path

import pytest

from labkit.checks import CHECK_IDS
from labkit.cli import main
from labkit.grading.roster import find_submissions
from labkit.servers import ServerHandle

SYNTAX_ERROR = "def broken(:\n    pass\n"
BAD_SUBMISSIONS = {
    "syntax_error": (SYNTAX_ERROR, "syntax_error"),
    "import_error": ("import not_a_module_anyone_has\n", "import_error"),
    "no_app": ("application = None\n", "no_app"),
    "startup_fails": (
        "from contextlib import asynccontextmanager\n"
        "from fastapi import FastAPI\n\n\n"
        "@asynccontextmanager\n"
        "async def lifespan(app):\n"
        "    raise RuntimeError('no database')\n"
        "    yield\n\n\n"
        "app = FastAPI(lifespan=lifespan)\n",
        "startup_failed",
    ),
    "import_loop": ("while True:\n    pass\n", "start_timeout"),
    "never_answers": (
        "import asyncio\nfrom fastapi import FastAPI\n\napp = FastAPI()\n\n\n"
        "@app.post('/v1/chat/completions')\n"
        "async def chat():\n"
        "    await asyncio.sleep(3600)\n",
        "no_answer",
    ),
}


def not_run_lines() -> list[str]:
    return [f"  FAIL  {i:<25}  not run: the proxy could not be graded" for i in CHECK_IDS]


def test_a_missing_proxy_file_says_what_to_give_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["grade", "missing.py"]) == 2
    assert capsys.readouterr().err == (
        "error: There is no file missing.py. Give the path of the proxy.py to grade.\n"
    )


def _zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "app = None\n")
    return path


def test_a_zip_is_not_graded_as_python_and_the_error_says_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug: ``labkit grade submission.zip`` read the zip as Python and answered "syntax error:
    source code string cannot contain null bytes". Fix: a zip or a folder is refused before
    anything starts, with the command that grades it (and Gradescope gets the same message)."""
    monkeypatch.chdir(tmp_path)
    _zip(tmp_path / "submission.zip", ["proxy.py", "notebooks/08_adapters.ipynb"])
    results = tmp_path / "results.json"
    assert main(["grade", "submission.zip", "--gradescope", str(results)]) == 2
    message = (
        "Expected a proxy.py file, got submission.zip, a zip (proxy.py inside). Grade it as a "
        "class of one: `labkit grade-class submission.zip --out grades/`, or unzip it and grade "
        "its proxy.py: `unzip submission.zip -d submission && labkit grade submission/proxy.py "
        "--notebooks submission/notebooks`."
    )
    assert capsys.readouterr().err == f"error: {message}\n"
    assert message in json.loads(results.read_text())["output"]
    _zip(tmp_path / "ana.zip", ["ana/proxy.py"])
    assert main(["grade", "ana.zip"]) == 2
    assert capsys.readouterr().err.endswith(
        "`unzip ana.zip -d ana && labkit grade ana/ana/proxy.py`.\n"
    )
    _zip(tmp_path / "photos.zip", ["cat.png"])
    assert main(["grade", "photos.zip"]) == 2
    assert capsys.readouterr().err == (
        "error: Expected a proxy.py file, got photos.zip, a zip that holds no proxy.py (at its "
        "top, or in one folder): ask for the submission.zip that `make submit` writes.\n"
    )


def test_grade_class_given_one_zip_grades_the_proxy_inside_it(tmp_path: Path) -> None:
    """What the zip's error advises: a zip named on grade-class's command line is one learner's
    (it was read as Python before, as ``labkit grade`` read it)."""
    archive = _zip(tmp_path / "submission.zip", ["proxy.py", "notebooks/08_adapters.ipynb"])
    (entry,) = find_submissions([archive])
    assert entry.learner == "submission" and entry.path.read_text() == "app = None\n"
    assert entry.notebooks is not None and entry.parts


def test_a_folder_is_not_graded_and_the_error_names_the_command_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "class" / "ana" / "notebooks").mkdir(parents=True)
    (tmp_path / "class" / "ana" / "proxy.py").write_text("app = None\n")
    assert main(["grade", "class"]) == 2
    assert capsys.readouterr().err == (
        "error: Expected a proxy.py file, got the folder class. A folder of submissions is "
        "graded with `labkit grade-class class --out grades/`; one learner's with `labkit grade "
        "PATH/proxy.py`.\n"
    )
    assert main(["grade", "class/ana"]) == 2
    assert capsys.readouterr().err == (
        "error: Expected a proxy.py file, got the folder class/ana. Grade the proxy.py in it: "
        "`labkit grade class/ana/proxy.py --notebooks class/ana/notebooks`.\n"
    )


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["grade"], "the following arguments are required: PROXY.py"),
        (
            ["grade-url", "http://127.0.0.1:9"],
            "one of the arguments --upstream --engine is required",
        ),
        (
            ["grade-url", "http://127.0.0.1:9", "--upstream", "http://m", "--engine", "http://e"],
            "argument --engine: not allowed with argument --upstream",
        ),
        (["grade-class", "x"], "the following arguments are required: --out"),
    ],
)
def test_each_grading_command_refuses_what_it_lacks_with_its_own_usage(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: labkit {argv[0]} ")
    assert err.endswith(f"labkit {argv[0]}: error: {refusal}\n")


@pytest.mark.parametrize(
    ("argv", "moved"),
    [
        (
            ["--url", "http://127.0.0.1:8080", "--upstream", "http://127.0.0.1:8001"],
            "`labkit grade --url` is now `labkit grade-url`: run `labkit grade-url "
            "http://127.0.0.1:8080 --upstream http://127.0.0.1:8001` (`labkit grade-url --help` "
            "lists its options).",
        ),
        (
            ["--url"],
            "`labkit grade --url` is now `labkit grade-url`: run `labkit grade-url "
            "http://127.0.0.1:8080 --upstream http://127.0.0.1:8001` (`labkit grade-url --help` "
            "lists its options).",
        ),
        (
            ["--roster", "submissions/", "--out", "grades/", "--jobs", "2"],
            "`labkit grade --roster` is now `labkit grade-class`: run `labkit grade-class "
            "submissions/ --out grades/` (`labkit grade-class --help` lists its options).",
        ),
        (
            ["--out", "grades/", "--roster", "ana.py", "my class/"],
            "`labkit grade --roster` is now `labkit grade-class`: run `labkit grade-class "
            "ana.py 'my class/' --out grades/` (`labkit grade-class --help` lists its options).",
        ),
    ],
)
def test_an_old_grade_mode_names_the_command_to_run_instead_and_exits_2(
    argv: list[str], moved: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grade", *argv]) == 2
    assert capsys.readouterr().err == f"error: {moved}\n"


@pytest.mark.parametrize(
    ("command", "foreign"),
    [
        (["grade", "proxy.py"], ["--upstream", "http://m"]),
        (["grade", "proxy.py"], ["--out", "grades"]),
        (["grade", "proxy.py"], ["--shard", "1/2"]),
        (["grade-url", "http://p", "--upstream", "http://m"], ["--gradescope", "r.json"]),
        (["grade-url", "http://p", "--upstream", "http://m"], ["--notebooks", "nb"]),
        (["grade-url", "http://p", "--upstream", "http://m"], ["--out", "grades"]),
        (["grade-class", "x", "--out", "y"], ["--gradescope", "r.json"]),
        (["grade-class", "x", "--out", "y"], ["--profile", "gateway"]),
        (["grade-class", "x", "--out", "y"], ["--engine"]),
        (["grade-class", "x", "--out", "y"], ["--upstream", "http://m"]),
        (["grade-class", "x", "--out", "y"], ["--json"]),
    ],
)
def test_each_grading_command_refuses_another_modes_option(
    command: list[str], foreign: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, *foreign]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: labkit {command[0]} ")
    assert err.endswith(
        f"labkit {command[0]}: error: unrecognized arguments: {' '.join(foreign)}\n"
    )


def test_help_lists_one_command_per_grading_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    for command in ("grade", "grade-url", "grade-class"):
        assert re.search(rf"^    {command}\s", shown, re.M), command
    assert main(["grade", "--help"]) == 0
    assert "--roster" not in capsys.readouterr().out  # the moved options are hidden


def test_a_bad_rubric_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rubric = tmp_path / "rubric.toml"
    rubric.write_text("[weights]\ntrikle = 2\n")
    assert main(["grade", "missing.py", "--rubric", str(rubric)]) == 2
    assert "unknown check 'trikle' in [weights]" in capsys.readouterr().err


@pytest.mark.sockets
def test_a_worker_that_cannot_set_up_grading_raises_grading_error_with_its_reason(
    tmp_path: Path,
) -> None:
    """The worker reports a typed ``setup_error`` outcome; the roster raises it again, with its
    kind and so its exit code (a rubric that cannot be used: the input is wrong, 2)."""
    from labkit.errors import RelayedError, RubricError
    from labkit.grading.roster import Submission, grade_in_worker
    from labkit.grading.rubric import Rubric

    bad = tmp_path / "rubric.toml"
    bad.write_text("[weights]\ntrikle = 2\n")  # the worker loads it: this process does not
    submission = tmp_path / "proxy.py"
    submission.write_text("app = None\n")
    with pytest.raises(RelayedError) as info:
        grade_in_worker(Submission("alice", submission), Rubric(), rubric_path=str(bad))
    message = str(info.value)
    assert "unknown check 'trikle' in [weights]" in message
    assert not message.startswith("error: ")
    assert info.value.cause == RubricError.kind
    assert info.value.exit_code == 2


def test_a_worker_outcome_is_a_report_or_a_setup_error_and_nothing_else() -> None:
    from labkit.grading.worker import WorkerOutcome

    outcome = WorkerOutcome("setup_error", error="no mock", error_kind="start_failed")
    assert WorkerOutcome.parse(outcome.to_json()) == outcome
    assert WorkerOutcome.parse('{"kind": "setup_error", "error": "x"}').error_kind == "labkit_error"
    assert WorkerOutcome.parse(WorkerOutcome("report", {"a": 1}).to_json()).report == {"a": 1}
    unknown_kind = '{"kind": "setup_error", "error": "x", "error_kind": "oops"}'
    for text in ('{"name": "alice"}', '{"kind": "crashed"}', "[]", "Traceback", unknown_kind):
        with pytest.raises(ValueError):
            WorkerOutcome.parse(text)


@pytest.mark.sockets
def test_a_syntax_error_is_reported_plainly_and_scored_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "alice.py"
    path.write_text(SYNTAX_ERROR)
    gradescope = tmp_path / "gs" / "results.json"
    assert main(["grade", str(path), "--gradescope", str(gradescope)]) == 1
    shown = capsys.readouterr().out.splitlines()
    assert shown[1].startswith("  ran in: ")  # bubblewrap: ..., or no sandbox (why): ...
    assert shown[2].startswith("  network: ")  # loopback only, or shared (why)
    assert shown[3].startswith("  machine: ")  # 2 CPUs, or 0.5 CPU: time budgets x2
    assert [shown[0], *shown[4:]] == [
        "Grading alice.py",
        "  problem: alice.py has a syntax error: SyntaxError: invalid syntax (proxy.py, line 1). "
        "Fix it and grade again.",
        *not_run_lines(),
        f"Score: 0/100 (0 of {len(CHECK_IDS)} checks passed)",
    ]
    results = json.loads(gradescope.read_text())
    assert results["score"] == 0
    assert len(results["tests"]) == len(CHECK_IDS)
    assert results["output"].startswith("alice.py has a syntax error")


@pytest.mark.sockets
def test_json_output_reports_checks_by_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "proxy.py"
    path.write_text(SYNTAX_ERROR)
    assert main(["grade", str(path), "--json", "--only", "trickle", "usage"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert list(report["checks"]) == ["trickle", "usage"]
    assert report["problem"]["kind"] == "syntax_error"
    assert report["score"] == 0


@pytest.mark.sockets
def test_black_box_grading_skips_only_what_needs_the_usage_log(
    reference_proxy: ServerHandle, mock: ServerHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["grade-url", reference_proxy.url, "--upstream", mock.url]
    assert main([*argv, "--only", "trickle", "usage", "upstream_status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Grading {reference_proxy.url}"
    assert lines[1].startswith("  network: shared (grading a URL")
    assert lines[2].startswith("  machine: ")
    assert lines[3:] == [
        "  PASS  trickle                    tokens reach the client as the upstream generates them",
        "  SKIP  usage                      skipped: no usage log to read",
        "  PASS  upstream_status            the upstream's error status and Retry-After reach "
        "the client",
        "Score: 100/100 (2 of 2 checks passed)",
    ]


@pytest.mark.slow
@pytest.mark.sockets
def test_a_batch_of_broken_submissions_is_graded_to_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roster = tmp_path / "submissions"
    roster.mkdir()
    for name, (source, _) in BAD_SUBMISSIONS.items():
        (roster / f"{name}.py").write_text(source)
    (roster / "bob").mkdir()
    (roster / "bob" / "proxy.py").write_text(SYNTAX_ERROR)
    out = tmp_path / "grades"

    assert main(["grade-class", str(roster), "--out", str(out), "--jobs", "2"]) == 1

    with (out / "grades.csv").open() as handle:
        rows = {row["learner"]: row for row in csv.DictReader(handle)}
    expected = {name: kind for name, (_, kind) in BAD_SUBMISSIONS.items()}
    problems = {name: row["problem"] for name, row in rows.items()}
    assert problems == {**expected, "bob": "syntax_error"}
    assert all(row["score"] == "0" for row in rows.values())
    for learner in rows:
        feedback = (out / "feedback" / f"{learner}.md").read_text()
        assert feedback.startswith(f"# Feedback for {learner}\n")
        assert "## Your proxy could not be graded fully" in feedback
    err = capsys.readouterr().err
    assert err.startswith("Grading 7 submissions, 2 at a time\n")
    assert err.count("/7] ") == 7


@pytest.mark.sockets
def test_learner_code_does_not_see_the_instructors_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-instructor-secret")
    path = tmp_path / "proxy.py"
    path.write_text(
        "import os\n"
        "if 'OPENAI_API_KEY' in os.environ:\n"
        "    raise RuntimeError('saw the key')\n"
        "assert os.environ['UPSTREAM_URL'].startswith('http://127.0.0.1:')\n"
    )
    assert main(["grade", str(path), "--json", "--only", "trickle"]) == 1
    assert json.loads(capsys.readouterr().out)["problem"]["kind"] == "no_app"
