"""A forked child that confines itself (``labkit.grading.confine``) gets what ``bwrap`` gives a
command: its own folder and the system only, an unprivileged user without capabilities, its own
PID namespace and a loopback-only network, the limits set. Each property is read from inside the
confined child and written to its one writable folder."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from another_user import AnotherUser

from labkit.grading.confine import Sandbox, confinement_works, run_confined
from labkit.grading.isolation import NOBODY, readonly_paths

pytestmark = [
    pytest.mark.sockets,  # forks, and confines the child with namespaces and mounts
    pytest.mark.skipif(
        os.geteuid() != 0 or not sys.platform.startswith("linux"),
        reason="a forked child confines itself only as root, on Linux",
    ),
]


def _status(field: str) -> str:
    line = next(
        x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field)
    )
    return line.split(":", 1)[1].strip()


def _facts(secret: Path) -> dict[str, Any]:
    """What the confined child sees of itself and the machine."""
    try:
        secret.read_text()
        secret_seen: object = True
    except OSError as exc:
        secret_seen = type(exc).__name__
    try:
        Path("/usr/planted-by-confined-child").write_text("x")
        planted: object = True
    except OSError as exc:
        planted = type(exc).__name__
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "pid": os.getpid(),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "interfaces": [name for _, name in socket.if_nameindex()],
        "secret": secret_seen,
        "planted": planted,
        "beside": sorted(os.listdir(secret.parent)),
        "cap_eff": _status("CapEff"),
        "no_new_privs": _status("NoNewPrivs"),
        "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
        "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "tmp": sorted(os.listdir("/tmp")),
    }


def _confined(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """Fork, confine the child in a sandbox whose one writable folder is ``tmp_path/box``, and
    return the facts it wrote there."""
    box = tmp_path / "box"
    box.mkdir()
    os.chown(box, NOBODY, NOBODY)
    new_root = tmp_path / "root"
    new_root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("not for learners")
    sandbox = Sandbox(
        readonly=tuple(readonly_paths([box])),
        writable=(str(box),),
        uid=NOBODY,
        file_bytes=1024 * 1024,
        cpu_s=123,
        new_root=str(new_root),
        env={"HOME": str(box), "ONLY": "this"},
        cwd=str(box),
        **overrides,
    )

    def work() -> int:
        (box / "facts.json").write_text(json.dumps(_facts(secret)))
        return 7

    pid = os.fork()
    if pid == 0:
        os._exit(run_confined(sandbox, work))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7, "the confined work did not end as it returned"
    facts: dict[str, Any] = json.loads((box / "facts.json").read_text())
    return facts


def test_a_confined_child_runs_as_nobody_without_capabilities_or_a_way_to_gain_them(
    tmp_path: Path,
) -> None:
    facts = _confined(tmp_path)
    assert (facts["uid"], facts["gid"], facts["groups"]) == (NOBODY, NOBODY, [])
    assert int(facts["cap_eff"], 16) == 0
    assert facts["no_new_privs"] == "1"


def test_a_confined_child_sees_its_own_folder_and_the_system_only(tmp_path: Path) -> None:
    facts = _confined(tmp_path)
    assert facts["secret"] == "FileNotFoundError", "a file beside its folder was readable"
    assert facts["beside"] == ["box"], "the folders beside its own were visible"
    assert facts["planted"] in ("OSError", "PermissionError"), "the system was writable"
    box = tmp_path / "box"
    bound = [Path(p) for p in [*readonly_paths([box]), str(box)]]  # a checkout in /tmp: Python
    on_the_way = sorted({p.relative_to("/tmp").parts[0] for p in bound if p.is_relative_to("/tmp")})
    assert facts["tmp"] == on_the_way, "/tmp holds more than the ways to what was bound"
    assert facts["cwd"] == str(tmp_path / "box")
    assert facts["env"] == {"HOME": str(tmp_path / "box"), "ONLY": "this"}


def test_a_confined_child_is_process_1_of_its_own_namespace_with_loopback_only(
    tmp_path: Path,
) -> None:
    facts = _confined(tmp_path)
    assert facts["pid"] == 1
    assert facts["pids"] == [1], "processes outside its namespace were visible"
    assert facts["interfaces"] == ["lo"]
    with socket.socket() as probe:  # and its loopback is up: it can serve and connect there
        assert probe is not None


def test_a_confined_child_has_the_limits_it_was_given(tmp_path: Path) -> None:
    facts = _confined(tmp_path)
    assert (facts["fsize"], facts["cpu"]) == (1024 * 1024, 123)


def test_a_confined_childs_processes_die_with_it(tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    os.chown(box, NOBODY, NOBODY)
    (tmp_path / "root").mkdir()
    sandbox = Sandbox(
        readonly=tuple(readonly_paths([box])),
        writable=(str(box),),
        uid=NOBODY,
        new_root=str(tmp_path / "root"),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(box),
    )

    def work() -> int:
        subprocess.Popen(["sleep", "925"], start_new_session=True)
        return 0

    pid = os.fork()
    if pid == 0:
        os._exit(run_confined(sandbox, work))
    os.waitpid(pid, 0)
    left = subprocess.run(["pgrep", "-f", "sleep 925"], capture_output=True, text=True)
    assert left.stdout == "", "a process the confined child started outlived it"


def test_confinement_works_here_as_root(tmp_path: Path) -> None:
    assert confinement_works(str(tmp_path)) == ""


def test_confinement_says_why_not_to_a_user_without_root(
    tmp_path: Path, another_user: AnotherUser
) -> None:
    """Bug: run with this venv's Python, which that user may not be able to start (a clone in
    a folder only root may enter), the child died before it said anything. Fix: a Python that
    user can start, with labkit (the ``another_user`` fixture)."""
    tmp_path.chmod(0o777)
    shown = subprocess.run(
        another_user.command(
            "-c",
            "import os, sys; from labkit.grading.confine import confinement_works; "
            "print(os.getuid(), confinement_works(sys.argv[1]))",
            str(tmp_path),
        ),
        capture_output=True,
        text=True,
        env=another_user.env(),
        check=True,
    )
    assert shown.stdout.startswith(f"{NOBODY} ") and "needs root" in shown.stdout
