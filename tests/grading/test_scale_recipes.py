"""The recipes in docs/ for grading a class on a cluster, and the grader's Containerfile: they
parse, their shard numbers add up, and every labkit command in them is one labkit accepts."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

from labkit.cli import build_parser
from labkit.grading.class_results import parse_shard

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _accepted(command: str, **shell: str) -> list[str]:
    """``command`` with its shell expressions replaced by ``shell``'s values, parsed by labkit's
    own argument parser (which exits on an unknown flag)."""
    for expression, value in shell.items():
        command = command.replace(expression, value)
    argv = shlex.split(command)
    assert argv[0] == "labkit", command
    build_parser().parse_args(argv[1:])
    return argv


def _shard_of(argv: list[str]) -> str:
    return argv[argv.index("--shard") + 1]


def test_the_kubernetes_job_runs_one_shard_per_index() -> None:
    job = yaml.safe_load((DOCS / "cluster" / "grade-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"]
    (container,) = spec["template"]["spec"]["containers"]
    command = container["args"][0]
    shards = set()
    for index in range(spec["completions"]):
        value = str(index + 1)
        argv = _accepted(command, **{"$((JOB_COMPLETION_INDEX + 1))": value})
        shard = parse_shard(_shard_of(argv))
        assert shard.count == spec["completions"]
        shards.add(shard.index)
    assert shards == set(range(1, spec["completions"] + 1))


def test_the_actions_matrix_grades_every_shard_then_merges_them() -> None:
    workflow = yaml.safe_load((DOCS / "cluster" / "grade-matrix.yml").read_text())
    jobs = workflow["jobs"]
    shards = jobs["shard"]["strategy"]["matrix"]["shard"]
    (grade,) = [s["run"] for s in jobs["shard"]["steps"] if "labkit grade" in s.get("run", "")]
    for k in shards:
        argv = _accepted(grade, **{"${{ matrix.shard }}": str(k)})
        assert parse_shard(_shard_of(argv)).count == len(shards)
    (merge,) = [s["run"] for s in jobs["merge"]["steps"] if "labkit merge" in s.get("run", "")]
    argv = _accepted(merge.removesuffix(" || true"))
    assert argv[2 : 2 + len(shards)] == [f"grades-{k}" for k in shards]
    assert jobs["merge"]["needs"] == "shard"


def test_the_slurm_line_and_the_guides_commands_are_ones_labkit_accepts() -> None:
    guide = (DOCS / "grading-at-scale.md").read_text()
    (array,) = re.findall(r"--array=1-(\d+)", guide)
    (line,) = re.findall(r"'(labkit grade-class [^']+)'", guide)
    for k in range(1, int(array) + 1):
        argv = _accepted(line, **{"${SLURM_ARRAY_TASK_ID}": str(k)})
        assert parse_shard(_shard_of(argv)).count == int(array)
    for command in re.findall(
        r"^(labkit (?:grade(?:-url|-class)?|merge|autograder) [^#\n]+)", guide, re.M
    ):
        _accepted(command.strip())


def test_the_containerfile_copies_what_the_install_needs_and_a_python_it_allows() -> None:
    text = (ROOT / "Containerfile").read_text()
    (base,) = re.findall(r"^FROM python:(\d+)\.(\d+)", text, re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert tuple(map(int, base)) >= (3, 11)
    copied = [p for line in re.findall(r"^COPY (.+)$", text, re.M) for p in line.split()[:-1]]
    assert set(copied) == {"pyproject.toml", "README.md", "labkit", "mock_upstream"}
    assert all((ROOT / p).exists() for p in copied)
    assert pyproject["project"]["readme"] in copied
    assert "solutions" not in copied and "notebooks" not in copied
    for package in ("bubblewrap", "util-linux"):
        assert re.search(rf"apt-get install [^\n]*\\\n\s+[^\n]*{package}", text), package
