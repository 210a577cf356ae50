"""Learner code is untrusted: what a hostile submission tries while it is graded, and that it
is stopped, reported, and costs its classmates nothing.

Each hostile submission is the correct reference proxy with a payload that runs at import, in
every proxy process the grader starts for it: planting a file in the grader's own package,
finding a classmate's submission, reading the mock upstream's books, reaching a port the test
opened on the machine's own 127.0.0.1, leaving a daemon behind in a session of its own. It
writes what it managed into its own folder, the one place it can write, where the test reads
it while the grading runs (``folder_reports``). Another one holds 600 MiB. Graded in one roster
with an honest classmate, as an instructor grades a class.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from folder_reports import REPORTER, folder_reports

import labkit.checks
from labkit.grading.isolation import MIB, choose
from labkit.grading.roster import Submission, grade_many
from labkit.grading.rubric import Rubric

pytestmark = pytest.mark.sockets

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")
PLANTED = Path(labkit.checks.__file__).parent / "planted_by_submission.py"
DAEMON = ["sleep", "917"]
ONLY = ["trickle", "usage"]

PAYLOAD = """
import os as _os, socket as _socket, subprocess as _subprocess, sys as _sys
import urllib.error as _uerror, urllib.request as _urequest

# Python's own installation, which the sandbox shows read-only on purpose (60,000 files here):
# walking it at import took seconds a proxy, and on a cold disk the first proxy of this
# (correct) submission did not start within 8 s. No classmate's file can be in it.
_PYTHON = {_sys.prefix, _sys.base_prefix}


def _hostile():
    seen = {"uid": _os.getuid()}
    try:
        with open(PLANTED, "w") as planted:
            planted.write("GRADE = 100\\n")
        seen["planted"] = True
    except OSError as exc:
        seen["planted"] = type(exc).__name__
    found = []
    for top in ("/tmp", "/root", "/home", CLASSMATES):
        for folder, dirs, files in _os.walk(top):
            dirs[:] = [d for d in dirs if _os.path.join(folder, d) not in _PYTHON]
            for name in files:
                path = _os.path.join(folder, name)
                if name == "proxy.py" and not path.startswith(_os.getcwd()):
                    try:
                        if "CLASSMATE-MARKER" in open(path, errors="replace").read():
                            found.append(path)
                    except OSError:
                        pass
    seen["found"] = found
    try:
        _urequest.urlopen(_os.environ["UPSTREAM_URL"] + "/debug/requests", timeout=2)
        seen["debug"] = 200
    except _uerror.HTTPError as exc:
        seen["debug"] = exc.code
    except Exception as exc:
        seen["debug"] = type(exc).__name__
    try:
        with _socket.create_connection(("127.0.0.1", PORT), timeout=2) as host:
            if host.getsockname() == host.getpeername():
                seen["host_port"] = "itself"  # TCP's self-connect, below
            else:
                host.sendall(b'{"reached": true}')
                seen["host_port"] = "reached"
    except OSError as exc:
        seen["host_port"] = type(exc).__name__
    _subprocess.Popen(DAEMON, start_new_session=True, stdout=_subprocess.DEVNULL,
                      stderr=_subprocess.DEVNULL)
    _report(seen)


_hostile()
"""


def with_payload(payload: str) -> str:
    head, future, rest = REFERENCE.partition("from __future__ import annotations\n")
    return head + future + payload + rest


def _daemons() -> list[str]:
    shown = subprocess.run(["pgrep", "-af", " ".join(DAEMON)], capture_output=True, text=True)
    return [line for line in shown.stdout.splitlines() if "pgrep" not in line]


@pytest.mark.slow
def test_hostile_acts_are_stopped_and_the_honest_classmate_is_unaffected(
    tmp_path: Path,
    loopback_reports: tuple[int, list[dict[str, object]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolation = choose()
    if isolation.kind != "bubblewrap":
        pytest.skip(f"no sandbox on this machine: {isolation.describe()}")
    port, reached = loopback_reports
    roster = tmp_path / "submissions"
    (roster / "classmate").mkdir(parents=True)
    (roster / "classmate" / "proxy.py").write_text(REFERENCE + "\n# CLASSMATE-MARKER\n")
    payload = (
        PAYLOAD.replace("PLANTED", repr(str(PLANTED)))
        .replace("CLASSMATES", repr(str(roster)))
        .replace("DAEMON", repr(DAEMON))
        .replace("PORT", str(port))
    )
    (roster / "hostile.py").write_text(with_payload(REPORTER + payload))
    # Root caps memory with a cgroup (384 MiB); anyone else only as address space (2 GiB): the
    # hog holds more than whichever cap is in force.
    cgroup = os.geteuid() == 0
    hog_mib = 600 if cgroup else isolation.limits.address_space_bytes // MIB + 600
    (roster / "hog.py").write_text(with_payload(f"\n_held = bytearray({hog_mib} * 1024 * 1024)\n"))
    submissions = [
        Submission("classmate", roster / "classmate" / "proxy.py"),
        Submission("hostile", roster / "hostile.py"),
        Submission("hog", roster / "hog.py"),
    ]
    before = _daemons()

    with folder_reports(tmp_path / "homes", monkeypatch) as reports:
        reports_by_name = {r.name: r for r in grade_many(submissions, Rubric(), only=ONLY)}

    assert reports_by_name["classmate"].score == reports_by_name["classmate"].max_score
    hostile = reports_by_name["hostile"]
    # correct code: full marks (seen at 0 now and then; the report says why when it happens)
    assert hostile.score == hostile.max_score, str(hostile.to_json())[:3000]
    hog = reports_by_name["hog"]
    assert hog.score == 0 and hog.problem is not None
    if cgroup:  # the kernel stopped it: said as the limit, never as what it tried to hold
        assert hog.problem.kind == "memory_limit", hog.problem
        assert "600" not in hog.problem.message and "MiB of memory" in hog.problem.message
    else:  # its allocation failed as it loaded: a MemoryError, named
        assert "MemoryError" in hog.problem.message, hog.problem

    assert reports, "the hostile payload never reported: did it run?"
    for seen in reports:
        assert seen["uid"] != 0, "learner code ran as root"
        assert seen["planted"] in ("PermissionError", "OSError"), seen
        assert seen["found"] == [], f"a classmate's submission was readable: {seen['found']}"
        assert seen["debug"] == 403, f"the mock's books answered the submission: {seen}"
        # With nothing listening on PORT in the grading's namespace, a connection is refused,
        # except when the kernel picks PORT itself as the socket's own port and the socket
        # connects to itself (TCP's self-connect: test_network_namespace.py). That reaches
        # nothing outside the grading.
        assert seen["host_port"] in ("ConnectionRefusedError", "itself"), seen
    assert reached == [], "learner code reached a port on the machine's own loopback"
    assert not PLANTED.exists()
    assert _daemons() == before, "a daemon the submission started outlived its grading"
    assert "bubblewrap" in reports_by_name["hostile"].isolation
    assert {r.network for r in reports_by_name.values()} == {"loopback only"}
