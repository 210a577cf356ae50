"""``resume_replica`` over real sockets, both ways the grader runs it. Its judge is tested in
process in tests/checks/test_judges_resume_replica.py.

- **By URL** (``labkit grade-url A --replica B``): two replicas of the reference on one Redis
  pass; two of ``log_in_process`` (the reference with its replay log always in its process)
  fail, B refusing the resume, with the gateway's advice; without ``--replica`` the check is
  skipped, saying it needs one.
- **A file** (``labkit grade --only resume_replica``, in the grader's worker: its own network,
  the sandbox): the grader starts a Redis and two copies of the submission, which reach the
  Redis from inside the sandbox as they reach the mock. The reference passes, with the one usage
  line the two replicas' shared log holds; ``log_in_process`` fails. Without redis-server on
  the machine the check is skipped, saying that the grader's machine lacks it.
- **The grader's Redis** refuses the commands that would reach past its data (``CONFIG``,
  ``MODULE``...), since learner code talks to it and it runs with the grader's rights.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from grading_support import REFERENCE, expected_failures, write_variant

from labkit.checks.gateway_advice import GATEWAY_ADVICE
from labkit.checks.resume_replica import NO_REPLICA, NOT_SHARED, PASSED
from labkit.cli import main
from labkit.errors import RedisNotFoundError
from labkit.grading import grader
from labkit.grading.replicas import DISABLED, NO_REDIS, start_shared_redis
from labkit.grading.roster import Submission, grade_many
from labkit.grading.rubric import Rubric
from labkit.servers import RedisServer, ServerHandle, find_redis_server, serve_subprocess

ONLY = ["--only", "resume_replica"]


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    try:
        find_redis_server()
    except RedisNotFoundError as exc:
        pytest.skip(f"redis-server is not available: {exc}")
    with start_shared_redis() as server:
        yield server


def replicas(
    source: Path, upstream: str, redis_url: str, folder: Path, stack: ExitStack
) -> tuple[ServerHandle, ServerHandle]:
    """Two copies of ``source`` on one Redis, appending to one usage log."""
    env = {"UPSTREAM_URL": upstream, "REDIS_URL": redis_url, "USAGE_LOG": str(folder / "usage")}
    a, b = (
        stack.enter_context(serve_subprocess(str(source), name=f"{source.stem}-{n}", env=env))
        for n in "ab"
    )
    return a, b


def grade_url(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["grade-url", *argv, *ONLY, "--json"])
    result: dict[str, object] = json.loads(capsys.readouterr().out)["checks"]["resume_replica"]
    return code, result


@pytest.mark.sockets
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_by_url_two_references_pass_two_logs_in_process_fail_and_one_alone_is_skipped(
    mock: ServerHandle,
    shared_redis: RedisServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    broken = write_variant("log_in_process", tmp_path)
    assert expected_failures("log_in_process") == {"resume_replica"}
    with ExitStack() as stack:
        a, b = replicas(REFERENCE, mock.url, shared_redis.url, tmp_path, stack)
        x, y = replicas(broken, mock.url, shared_redis.url, tmp_path, stack)

        code, passed = grade_url(capsys, a.url, "--upstream", mock.url, "--replica", b.url)
        assert (code, passed["status"], passed["verdict"]) == (0, "passed", PASSED), passed
        evidence = passed["evidence"]
        assert isinstance(evidence, dict)
        assert evidence["resume_statuses"] == "200" and evidence["stop_says"] == "cancelled"
        assert evidence["usage_log"] == "not read"  # a running proxy's log is not ours

        code, failed = grade_url(capsys, x.url, "--upstream", mock.url, "--replica", y.url)
        assert (code, failed["status"], failed["verdict"]) == (1, "failed", NOT_SHARED), failed
        assert failed["hint"] == GATEWAY_ADVICE["resume_replica"]

        code, alone = grade_url(capsys, a.url, "--upstream", mock.url)
        assert (code, alone["status"], alone["verdict"]) == (0, "skipped", NO_REPLICA)
        assert "--replica" in str(alone["verdict"]) + str(alone["hint"])


@pytest.mark.sockets
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_graded_as_a_file_the_sandboxed_replicas_share_the_grader_s_redis(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    submissions = [
        Submission("reference", REFERENCE),
        Submission("log_in_process", write_variant("log_in_process", tmp_path)),
    ]
    reference, broken = grade_many(submissions, Rubric(), jobs=2, only=["resume_replica"])
    assert reference.problem is None and broken.problem is None
    [passed], [failed] = reference.results, broken.results
    assert (passed.status, passed.verdict) == ("passed", PASSED), dict(passed.evidence)
    # the two replicas append to one usage log: the stopped answer's one line, on A
    assert (passed.evidence["usage_lines"], passed.evidence["usage_outcomes"]) == (1, "cancelled")
    assert (failed.status, failed.verdict) == ("failed", NOT_SHARED), dict(failed.evidence)
    assert failed.evidence["resume_statuses"] == "404"
    assert failed.evidence["stop_status"] == 404
    assert failed.hint.startswith("15_resumable_streams: with REDIS_URL set")


@pytest.mark.sockets
def test_without_redis_server_the_check_is_skipped_as_the_grader_s_machine_s_lack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> str:
        raise RedisNotFoundError()

    monkeypatch.setattr(grader, "find_redis_server", missing)
    report = asyncio.run(grader.agrade_file(REFERENCE, only=["resume_replica"]))
    assert report.problem is None
    [result] = report.results
    assert (result.status, result.inconclusive, result.verdict) == ("skipped", False, NO_REDIS)
    assert str(result) == (
        "SKIP resume_replica: not run: the grader's machine has no redis-server, which the "
        "replicas share"
    )
    assert result.hint.startswith("the grader's machine needs redis-server (this says nothing")
    assert "apt-get install redis-server" in result.hint
    assert report.counted_count == 0  # left out of the score


@pytest.mark.sockets
def test_the_grader_s_redis_refuses_what_reaches_past_its_data(shared_redis: RedisServer) -> None:
    client = redis.Redis.from_url(shared_redis.url)
    try:
        assert client.xadd("answer", {"event": "1"})  # what a replay log does works
        for command in DISABLED:
            with pytest.raises(redis.ResponseError, match="unknown command"):
                client.execute_command(command, "HELP")
    finally:
        client.close()
