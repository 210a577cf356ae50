"""Where learner code runs: the sandbox's walls, tried from inside, and the mock's closed books."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest

from labkit import serve
from labkit.checks.machine import Budget
from labkit.grading.isolation import Cgroup, Limits, NoSandbox, choose
from labkit.grading.sandbox import clean_env, start_proxy
from labkit.upstream import MockUpstream
from mock_upstream import DEBUG_TOKEN_HEADER, create_app

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os
seen = {"uid": os.getuid(), "tmp": sorted(os.listdir("/tmp"))}
seen["solutions"] = os.path.exists(%r)
try:
    open(os.path.join(os.path.dirname(__import__("labkit").__file__), "x.py"), "w")
    seen["wrote_labkit"] = True
except OSError as exc:
    seen["wrote_labkit"] = type(exc).__name__
open("mine.txt", "w").write("ok")
seen["own_folder"] = open("mine.txt").read()
print(json.dumps(seen))
"""


def _run_inside(tmp_path: Path, *, cgroup: Cgroup | None = None) -> dict[str, object]:
    isolation = choose()
    if isolation.kind != "bubblewrap":
        pytest.skip(f"no sandbox here: {isolation.describe()}")
    folder = tmp_path / "submission"
    folder.mkdir()
    isolation.prepare([folder])
    argv = [sys.executable, "-c", PROBE % str(ROOT / "solutions")]
    command = isolation.wrap(argv, cgroup=cgroup, writable=[folder])
    if cgroup is not None:
        command = [*cgroup.join_prefix(), *command]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


@pytest.mark.sockets
def test_inside_the_sandbox_only_its_own_folder_is_there_and_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH")  # the test suite's own way to reach solutions/
    seen = _run_inside(tmp_path)
    assert seen["solutions"] is False, "the instructor's checkout is visible"
    assert seen["wrote_labkit"] in ("PermissionError", "OSError")
    assert seen["own_folder"] == "ok"
    assert all(not name.startswith("labkit-grade-") for name in seen["tmp"])  # type: ignore[union-attr]
    if os.geteuid() == 0:
        assert seen["uid"] == 65534, "as root, learner code runs as nobody"


def test_a_relative_pythonpath_reaches_a_child_as_the_folders_the_grader_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"lib{os.pathsep}.")
    env = clean_env(tmp_path / "home")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "lib"), str(tmp_path)]


@pytest.mark.sockets
def test_the_sandbox_starts_under_a_relative_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", ".")  # bound as the checkout, not as "." in the sandbox
    assert _run_inside(tmp_path)["own_folder"] == "ok"


@pytest.mark.sockets
def test_a_cgroup_limits_memory_and_is_removed_with_its_processes(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("cgroups are made only as root")
    cgroup = Cgroup.create(Limits(memory_bytes=64 * 1024 * 1024))
    if cgroup is None:
        pytest.skip("no writable cgroup here")
    try:
        hog = [sys.executable, "-c", "x = bytearray(200 * 1024 * 1024)"]
        done = subprocess.run([*cgroup.join_prefix(), *hog], capture_output=True, timeout=60)
        assert done.returncode != 0
        assert cgroup.memory_exceeded()
    finally:
        cgroup.remove()
    assert not any(path.exists() for path in cgroup.dirs.values())


def test_no_sandbox_says_so_and_why() -> None:
    isolation = NoSandbox(Limits(), "bwrap not found: install bubblewrap")
    shown = isolation.describe().removeprefix("inside a container, which is the sandbox: ")
    assert shown.startswith("no sandbox of its own (bwrap not found: install bubblewrap): ")
    if isolation.uid is not None:
        assert f"an unprivileged user of its own (uid {isolation.uid})" in shown
    else:
        assert "grader's own rights" in shown


@pytest.mark.sockets
def test_without_a_sandbox_root_still_runs_learner_code_as_a_user_it_can_reap() -> None:
    """Gradescope's containers refuse bubblewrap: the proxy still cannot write as root, and a
    daemon it leaves in a session of its own dies when the grading ends."""
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("dropping to another user needs root (and a system Python to run as it)")
    isolation = NoSandbox(Limits(), "bwrap is refused here", drop=True)
    assert isolation.uid is not None
    folder = Path(tempfile.mkdtemp(prefix="labkit-reap-"))  # /tmp: reachable by that user
    isolation.prepare([folder])
    daemon = (
        "import os, subprocess; print(os.getuid());"
        "subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=-3, stderr=-3)"
    )
    command = isolation.wrap([python, "-c", daemon], cgroup=None, writable=[folder])
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=folder)
    shutil.rmtree(folder)
    assert done.stdout.strip() == str(isolation.uid), done.stderr
    left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == isolation.uid]
    assert left, "the daemon outlived its parent"
    assert isolation.reap() >= 1
    psutil.wait_procs(left, timeout=5)
    assert not any(p.is_running() for p in left)


def test_labkit_sandbox_none_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABKIT_SANDBOX", "none")
    assert choose().kind == "none"


@pytest.mark.sockets
def test_the_mock_keeps_its_books_to_whoever_has_the_token() -> None:
    with serve(create_app(debug_token="s3cret"), name="closed-books") as mock:
        for path in ("/debug/requests", "/metrics"):
            refused = httpx.get(mock.url + path)
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "debug_token_required"
        assert httpx.post(mock.url + "/debug/reset").status_code == 403
        assert (
            httpx.get(mock.url + "/debug/requests", headers={DEBUG_TOKEN_HEADER: "no"}).status_code
            == 403
        )
        assert MockUpstream(mock.url, token="s3cret").requests() == []
        assert httpx.get(mock.url + "/v1/models").status_code == 200  # the API stays open


def test_a_cgroup_is_made_below_the_graders_own(tmp_path: Path) -> None:
    """So the instructor's container or job limits hold for the proxies too (cgroup v1 here,
    a tree per controller; v2 has one tree)."""
    for controller in ("memory", "pids"):
        (tmp_path / controller / "job" / "grader").mkdir(parents=True)
    proc = "5:memory:/job/grader\n4:pids:/job\n0::/\n"
    cgroup = Cgroup.create(Limits(), root=tmp_path, proc_cgroup=proc)
    assert cgroup is not None
    try:
        assert cgroup.dirs["memory"].parent == tmp_path / "memory" / "job" / "grader"
        assert cgroup.dirs["pids"].parent == tmp_path / "pids" / "job"
        assert (cgroup.dirs["memory"] / "memory.limit_in_bytes").read_text() == str(
            Limits().memory_bytes
        )
    finally:
        cgroup.remove()


@pytest.mark.sockets
def test_the_served_process_is_found_inside_the_sandbox_wrappers(tmp_path: Path) -> None:
    """Its memory is what backpressure reports; the wrappers' command lines also name it."""
    submission = tmp_path / "proxy.py"
    submission.write_text("from starlette.applications import Starlette\napp = Starlette()\n")
    proxy = start_proxy(
        submission,
        upstream_url="http://127.0.0.1:9",
        usage_log=tmp_path / "u",
        cwd=tmp_path,
        budget=Budget(cpus=1.0),
    )
    try:
        assert proxy.server_pid is not None
        command = psutil.Process(proxy.server_pid).cmdline()
        assert command[1:3] == ["-m", "labkit.servers._child"]
    finally:
        proxy.stop()


def test_one_cgroup_class_sets_cpu_memory_and_processes_on_cgroup_v2(tmp_path: Path) -> None:
    """The grader's proxies (memory, pids) and the small-container bench (cpu, memory) use the
    same class; on v2 it is one directory below this process's own, with each limit's file."""
    from labkit.grading.cgroups import CgroupLimits, CgroupUnavailable

    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "cgroup.controllers").write_text("cpu memory pids\n")
    limits = CgroupLimits(cpu=0.5, memory_bytes=768 * 1024 * 1024, processes=7)
    group = Cgroup.make(limits, root=tmp_path, proc_cgroup="0::/job\n")
    folder = group.dirs["unified"]
    assert group.version == 2 and folder.parent == tmp_path / "job"
    assert (folder / "cpu.max").read_text() == "50000 100000"
    assert (folder / "memory.max").read_text() == str(768 * 1024 * 1024)
    assert (folder / "pids.max").read_text() == "7"
    assert (tmp_path / "job" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    (tmp_path / "job" / "cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(CgroupUnavailable, match="cgroup v2 without cpu"):
        Cgroup.make(limits, root=tmp_path, proc_cgroup="0::/job\n")


def test_one_cgroup_class_sets_a_cpu_quota_on_cgroup_v1(tmp_path: Path) -> None:
    from labkit.grading.cgroups import CgroupLimits

    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    group = Cgroup.make(
        CgroupLimits(cpu=0.25, memory_bytes=1 << 20), root=tmp_path, below_own=False
    )
    assert group.version == 1 and set(group.dirs) == {"cpu", "memory"}
    assert group.dirs["cpu"].parent == tmp_path / "cpu"
    assert (group.dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "25000"
    assert (group.dirs["cpu"] / "cpu.cfs_period_us").read_text() == "100000"
    assert (group.dirs["memory"] / "memory.limit_in_bytes").read_text() == str(1 << 20)
