"""A grading's own network: learner code reaches the grader's mocks and nothing else.

The submission is the reference proxy with a probe at import: it connects to a port this test
listens on, on the machine's own 127.0.0.1 (not one of the grader's mocks), and says so. Graded
by ``labkit grade`` in its own network namespace, the listener sees nothing and the proxy still
scores full marks; with the namespace turned off (``LABKIT_NETWORK=shared``, as on a machine
that refuses one) the same probe reaches the listener, and the report says the network was
shared and why.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from another_user import AnotherUser

from labkit.cli import main
from labkit.grading.grader import agrade_file, agrade_url
from labkit.grading.network import NETWORK_ENV, Network, enter_own_namespace

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "solutions" / "proxy.py").read_text(encoding="utf-8")

PROBE = """
import json as _json, socket as _socket
try:
    with _socket.create_connection(("127.0.0.1", PORT), timeout=2) as _out:
        _out.sendall(_json.dumps({"reached": "the machine's 127.0.0.1"}).encode())
except OSError:
    pass  # refused: the grading's own loopback has nothing on that port
"""

# labkit.grading.network in a process of its own, loaded by path (it needs only labkit.errors),
# so that it can also run as another user with the system's Python
LOAD_NETWORK = """
import importlib.util, json, os, socket, sys
sys.path.insert(0, ROOT)
spec = importlib.util.spec_from_file_location("network", ROOT + "/labkit/grading/network.py")
network = sys.modules["network"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(network)
"""

IN_A_CHILD = (
    LOAD_NETWORK
    + """BEFORE
got = network.enter_own_namespace()
try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as out:
        # a socket connected to itself (TCP's self-connect, test_hostile_submissions.py) has
        # reached nothing
        reached = out.getsockname() != out.getpeername()
        if reached:
            out.sendall(b'{"reached": true}')
except OSError:
    reached = False
own = socket.create_server(("127.0.0.1", 0))
socket.create_connection(own.getsockname(), timeout=2).close()
print(json.dumps({"network": got.describe(), "interfaces": network.interfaces(),
                  "reached": reached, "uid": os.getuid()}))
"""
)


def with_probe(port: int) -> str:
    head, future, rest = REFERENCE.partition("from __future__ import annotations\n")
    return head + future + PROBE.replace("PORT", str(port)) + rest


def table_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def namespace_here() -> None:
    """Skip, saying why, where this machine refuses a grading its own network namespace."""
    shown = _in_a_child(9)["network"]  # port 9 (discard): nothing listens there
    if shown != "loopback only":
        pytest.skip(f"no network namespace for a grading here: network: {shown}")


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.usefixtures("namespace_here")
@pytest.mark.sockets
def test_learner_code_cannot_reach_the_machines_loopback_and_the_reference_scores_full_marks(
    tmp_path: Path,
    loopback_reports: tuple[int, list[dict[str, object]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(NETWORK_ENV, raising=False)
    port, reached = loopback_reports
    path = tmp_path / "proxy.py"
    path.write_text(with_probe(port))

    code = main(["grade", str(path)])

    shown = table_lines(capsys)
    assert shown[2] == "  network: loopback only", shown[:4]
    assert reached == [], "learner code reached a port on the machine's own loopback"
    assert shown[-1].startswith("Score: 100/100 ("), "\n".join(shown)
    assert code == 0


@pytest.mark.slow
@pytest.mark.sockets
def test_without_a_namespace_grading_goes_on_shared_and_the_report_says_why(
    tmp_path: Path,
    loopback_reports: tuple[int, list[dict[str, object]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NETWORK_ENV, "shared")
    port, reached = loopback_reports
    path = tmp_path / "proxy.py"
    path.write_text(with_probe(port))

    code = main(["grade", str(path), "--only", "trickle"])

    shown = table_lines(capsys)
    assert shown[2] == f"  network: shared (turned off with {NETWORK_ENV}=shared)", shown[:4]
    # the probe ran and the listener hears it when the network is shared: the test above can fail
    assert reached and all(r == {"reached": "the machine's 127.0.0.1"} for r in reached)
    assert shown[-1].startswith("Score: 100/100 ("), "\n".join(shown)
    assert code == 0


def _in_a_child(
    port: int, *, as_user: AnotherUser | None = None, before: str = ""
) -> dict[str, object]:
    """The child's report, run by this Python, or as ``as_user`` with its Python and labkit."""
    labkit_root = str(ROOT) if as_user is None else as_user.path
    script = IN_A_CHILD.replace("ROOT", repr(labkit_root)).replace("PORT", str(port))
    script = script.replace("BEFORE", before)
    env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script] if as_user is None else as_user.command("-c", script),
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


@pytest.mark.usefixtures("namespace_here")
@pytest.mark.sockets
def test_the_namespace_has_only_a_working_loopback_of_its_own(
    loopback_reports: tuple[int, list[dict[str, object]]],
) -> None:
    port, reached = loopback_reports
    seen = _in_a_child(port)
    assert seen["network"] == "loopback only"
    assert seen["interfaces"] == ["lo"]
    assert seen["reached"] is False and reached == []


@pytest.mark.sockets
def test_a_user_other_than_root_gets_one_through_a_user_namespace(
    loopback_reports: tuple[int, list[dict[str, object]]], another_user: AnotherUser
) -> None:
    """Bug: the child loaded labkit from the checkout, which that user cannot read in a clone
    in a folder only root may enter. Fix: the ``another_user`` fixture's labkit (a readable
    copy where it must be) and Python."""
    port, reached = loopback_reports
    seen = _in_a_child(port, as_user=another_user)
    assert seen["uid"] == 65534, "the user namespace maps the user to itself"
    if str(seen["network"]).startswith("shared ("):  # a kernel that forbids user namespaces
        assert "user namespace" in str(seen["network"]), seen
        pytest.skip(f"no user namespaces here: {seen['network']}")
    assert seen["network"] == "loopback only" and seen["interfaces"] == ["lo"]
    assert seen["reached"] is False and reached == []


# a namespace whose loopback cannot be brought up, as in a user namespace left without
# capabilities (what AppArmor's restriction of unprivileged user namespaces does; not tried here)
LOOPBACK_REFUSED = """
def _refused():
    raise PermissionError(1, "Operation not permitted")
network.bring_up_loopback = _refused
"""


@pytest.mark.usefixtures("namespace_here")
@pytest.mark.sockets
def test_a_namespace_that_fails_halfway_leaves_the_grader_on_the_machines_network(
    loopback_reports: tuple[int, list[dict[str, object]]],
) -> None:
    port, reached = loopback_reports
    seen = _in_a_child(port, before=LOOPBACK_REFUSED)
    assert seen["network"] == (
        "shared (the new namespace's loopback could not be brought up ([Errno 1] Operation not "
        "permitted): run the grader as root, or where unprivileged user namespaces are "
        "allowed, to give each grading a network of its own)"
    )
    assert seen["interfaces"] != ["lo"], "the grader was left in a namespace of its own"
    assert seen["reached"] is True and reached  # still on the machine's loopback, and says so


def test_a_bad_labkit_network_value_says_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Grading goes on, on the machine's network, and the report says why in labkit.settings'
    words for a bad value."""
    monkeypatch.setenv(NETWORK_ENV, "none")
    assert enter_own_namespace() == Network(
        False,
        f"{NETWORK_ENV}='none', but it must be one of 'own', 'shared'. Fix it, or unset "
        f"{NETWORK_ENV} for the default: own.",
    )


@pytest.mark.sockets
def test_grading_a_url_or_in_process_says_the_network_was_shared(tmp_path: Path) -> None:
    closed = "http://127.0.0.1:9"  # discard: nothing answers, so grading stops at once
    by_url = asyncio.run(agrade_url(closed, closed, only=["trickle"]))
    assert by_url.network == "shared (grading a URL: the proxy runs where it was started, not here)"
    in_process = asyncio.run(agrade_file(tmp_path / "missing.py", only=["trickle"]))
    assert in_process.network == (
        "shared (graded in the caller's own process; `labkit grade` gives each grading a "
        "network namespace of its own)"
    )


# In a grading's namespace, try a port nothing listens on until a socket connects anyway.
SELF_CONNECT = (
    LOAD_NETWORK
    + """assert network.enter_own_namespace().isolated
port = 45000  # inside the ephemeral range, where the kernel picks a socket's own port
seen = None
for attempt in range(1, 200_001):
    out = socket.socket()
    try:
        out.connect(("127.0.0.1", port))
        seen = {"attempt": attempt, "own": out.getsockname(), "peer": out.getpeername()}
        break
    except ConnectionRefusedError:
        pass
    finally:
        out.close()
print(json.dumps(seen))
"""
)


@pytest.mark.usefixtures("namespace_here")
@pytest.mark.sockets
def test_a_port_nothing_listens_on_is_refused_except_when_a_socket_connects_to_itself() -> None:
    """Why the hostile submission's probe of the machine's port may come back connected: with
    nothing listening on a port in the ephemeral range, once the kernel gives a connecting
    socket that very port as its own, the socket connects to itself (TCP's simultaneous open).
    About once in 28,000 tries here; it reaches nothing outside the namespace."""
    script = SELF_CONNECT.replace("ROOT", repr(str(ROOT)))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd="/", timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen is not None, "200,000 tries and never a self-connect: the allowance can go"
    assert seen["own"] == seen["peer"] == ["127.0.0.1", 45000], seen
