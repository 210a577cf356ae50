"""What ``labkit grade-url`` says about real gateways, each in front of the mock upstream.

    python -m bench.gateways                          every gateway, graded once
    python -m bench.gateways caddy varnish-pipe       only these (see bench.gateway_configs)
    python -m bench.gateways --runs 2 --doc docs/gateways.md
                                                      twice each, table rewritten in the doc

Each gateway (``bench.gateway_configs``) is started as a foreground process of its own, with its
configuration, pid file and logs in a temporary folder, listening on 127.0.0.1 and forwarding
to a fresh ``mock-upstream``; then ``labkit grade-url GATEWAY --upstream MOCK --json`` grades
it as a black box (``usage`` is skipped: there is no usage log to read). The Debian packages
that are missing are installed first with apt-get when this runs as root (``--no-install``: not),
with a ``policy-rc.d`` that keeps their services from starting; a gateway that still cannot run
is reported as skipped with the line that installs it, never faked.

The command prints a markdown table (one row per gateway, one column per check; a cell reads
``pass / FAIL`` when two runs disagreed) and the evidence of every check that did not pass;
``--doc`` writes the same between the two marker comments of that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.configs import NGINX_PATH, Server, listening_socket, spawn, start_mock
from bench.gateway_configs import BY_NAME, GATEWAYS, LITELLM_VENV, Gateway
from mock_upstream.scenario import DEFAULT_TOKENS, DEFAULT_TPS, DEFAULT_TTFT_MS

GRADE_TIMEOUT_S = 300.0
POLICY_RC = Path("/usr/sbin/policy-rc.d")  # exit 101: "don't start services" to Debian's postinst
BEGIN = "<!-- begin: python -m bench.gateways -->"
END = "<!-- end: python -m bench.gateways -->"
MARKS = {"passed": "pass", "failed": "**FAIL**", "skipped": "skip", "inconclusive": "inconclusive"}
# How each program says its version (first line of its output)
VERSION_ARGV = {
    "nginx": ["-v"],
    "caddy": ["version"],
    "haproxy": ["-v"],
    "apache2": ["-v"],
    "lighttpd": ["-v"],
    "varnishd": ["-V"],
}


def find_program(program: str) -> str | None:
    """The program's path (the sbin folders searched too), or None."""
    return shutil.which(program, path=NGINX_PATH + ":" + os.environ.get("PATH", ""))


def install(packages: Sequence[str]) -> str | None:
    """Install Debian ``packages`` with apt-get, their services not started; None when done,
    else why not."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not root with apt-get here"
    created = not POLICY_RC.exists()
    if created:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        ):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-5:])
                return f"`{' '.join(argv)}` exited with code {done.returncode}:\n{tail}"
    finally:
        if created:
            POLICY_RC.unlink()
    return None


def start_gateway(gateway: Gateway, upstream: Server) -> Server:
    """``gateway`` as a process of its own in front of ``upstream``, once it answers."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{gateway.name}-"))
    workdir.chmod(0o755)  # Apache's and Varnish's children may run as another user
    sock = listening_socket(gateway.name)
    port: int = sock.getsockname()[1]
    launch = gateway.render(workdir, port, upstream.port)
    for name, text in launch.files.items():
        (workdir / name).write_text(text)
    env = dict(launch.env)
    if launch.socket_env is not None:
        env[launch.socket_env] = f"{sock.fileno()};"
    else:
        sock.close()  # the program binds the port itself: another could take it first (rare)
    argv = [find_program(launch.argv[0]) or launch.argv[0], *launch.argv[1:]]
    return spawn(
        gateway.name,
        argv,
        port,
        env=env,
        ready_path=launch.ready_path,
        timeout=launch.start_timeout,
        workdir=workdir,
        sock=sock if launch.socket_env is not None else None,
    )


def grade(gateway: Gateway) -> dict[str, Any]:
    """Start the mock and the gateway, grade the gateway by URL, stop both. A gateway that
    does not start, or a grading that prints no report, gives ``{"problem": why}``."""
    mock = start_mock(DEFAULT_TTFT_MS, DEFAULT_TPS, DEFAULT_TOKENS)
    try:
        try:
            server = start_gateway(gateway, mock)
        except RuntimeError as exc:
            return {"problem": f"did not start: {exc}"}
        try:
            argv = [sys.executable, "-m", "labkit.cli", "grade-url", server.url]
            argv += ["--upstream", mock.url, "--json"]
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=GRADE_TIMEOUT_S, check=False
            )
            try:
                report: dict[str, Any] = json.loads(done.stdout)
            except json.JSONDecodeError:
                tail = "\n".join(done.stderr.splitlines()[-5:])
                return {"problem": f"grading exited {done.returncode} without a report: {tail}"}
            return report
        finally:
            server.stop()
    finally:
        mock.stop()


def outcome(result: dict[str, Any]) -> str:
    """passed, failed, skipped or inconclusive (a skipped result whose evidence says why)."""
    if result["status"] == "skipped" and result.get("evidence", {}).get("inconclusive"):
        return "inconclusive"
    return str(result["status"])


@dataclass
class Row:
    """One gateway's gradings (one report per run), or why it was not graded."""

    gateway: Gateway
    reports: list[dict[str, Any]]
    skipped: str = ""

    def cell(self, check: str) -> str:
        marks = [MARKS[outcome(r["checks"][check])] for r in self.graded if check in r["checks"]]
        return " / ".join(dict.fromkeys(marks)) or "–"

    @property
    def graded(self) -> list[dict[str, Any]]:
        return [r for r in self.reports if "checks" in r]

    def numbers(self, check: str, key: str) -> str:
        values = [r["checks"][check]["evidence"].get(key) for r in self.graded]
        return ", ".join(str(v) for v in values if v is not None) or "–"


def version(gateway: Gateway) -> str:
    """The first line the program prints about its version."""
    if not gateway.package:
        argv = [str(LITELLM_VENV / "bin" / "python"), "-c"]
        argv += ["import importlib.metadata as m; print('litellm', m.version('litellm'))"]
    else:
        argv = [find_program(gateway.program) or gateway.program, *VERSION_ARGV[gateway.program]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        return f"{gateway.program}: {exc}"
    lines = (done.stdout + done.stderr).strip().splitlines()
    if not lines:
        return f"{gateway.program}: no version printed"
    # caddy prints the bare number
    return lines[0] if any(c.isalpha() for c in lines[0]) else f"{gateway.program} {lines[0]}"


def render_table(rows: Sequence[Row], runs: int, when: str, versions: Sequence[str]) -> str:
    """The markdown table, the versions and the evidence of every check that did not pass."""
    checks: list[str] = []
    for row in rows:
        for report in row.graded:
            checks += [c for c in report["checks"] if c not in checks and c != "usage"]
    head = ["gateway: configuration", *(f"`{c}`" for c in checks)]
    head += ["`cancel`: upstream stopped after hang-up (ms)", "graded in (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        label = f"`{row.gateway.name}`: {row.gateway.label}"
        if row.skipped:
            lines.append(f"| {label} | skipped: {row.skipped} |" + " |" * (len(head) - 2))
            continue
        cells = [row.cell(c) for c in checks]
        cells.append(row.numbers("cancel", "upstream_stop_after_hangup_ms"))
        cells.append(", ".join(f"{r['elapsed_s']:.0f}" for r in row.graded) or "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = [
        f"Graded {runs} time(s) each by `python -m bench.gateways` on {when}, "
        f"on a machine with {os.cpu_count()} CPUs shared with other work.",
        "",
        *lines,
        "",
        "Versions: " + "; ".join(f"`{v}`" for v in versions) + ".",
        "",
        "What did not pass, run by run (verdict, then the measured evidence):",
        "",
    ]
    for row in rows:
        for n, report in enumerate(row.reports, 1):
            if "checks" not in report:
                text.append(f"- `{row.gateway.name}` run {n}: {report['problem']}")
                continue
            for check, result in report["checks"].items():
                if check == "usage" or outcome(result) == "passed":
                    continue
                evidence = ", ".join(f"{k}={v}" for k, v in result["evidence"].items())
                text.append(
                    f"- `{row.gateway.name}` run {n} `{check}`: {result['verdict']} ({evidence})"
                )
    return "\n".join(text) + "\n"


def write_doc(path: Path, table: str) -> None:
    """Replace what lies between the two marker comments of ``path`` with ``table``."""
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(
            f"expected the lines {BEGIN} and {END} in {path}; got neither or one. "
            "Add both where the table goes, then run again."
        )
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{BEGIN}\n{table}{END}{after}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gateways",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", help=f"gateways to grade: {', '.join(BY_NAME)}")
    parser.add_argument("--runs", type=int, default=1, help="gradings of each gateway (default 1)")
    parser.add_argument("--doc", type=Path, help="markdown file whose marked table to rewrite")
    parser.add_argument("--json", type=Path, help="also write every report (JSON) to this file")
    parser.add_argument(
        "--no-install", action="store_true", help="do not apt-get the missing Debian packages"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        parser.error(f"expected gateways from {', '.join(BY_NAME)}; got {', '.join(unknown)}")
    chosen = [BY_NAME[n] for n in args.names] or list(GATEWAYS)
    missing = sorted({g.package for g in chosen if g.package and not find_program(g.program)})
    if missing and not args.no_install:
        print(f"installing {' '.join(missing)} with apt-get (their services are not started)")
        problem = install(missing)
        if problem is not None:
            print(f"could not install them: {problem}", file=sys.stderr)
    rows = []
    for gateway in chosen:
        found = find_program(gateway.program)
        rows.append(Row(gateway, [], "" if found else f"not installed (`{gateway.install_line}`)"))
    for run in range(1, args.runs + 1):
        for row in rows:
            if row.skipped:
                continue
            print(f"run {run}: grading {row.gateway.name}", file=sys.stderr, flush=True)
            row.reports.append(grade(row.gateway))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = sorted({version(r.gateway) for r in rows if not r.skipped})
    table = render_table(rows, args.runs, when, versions)
    print(table)
    if args.doc is not None:
        write_doc(args.doc, table)
    if args.json is not None:
        reports = {row.gateway.name: row.reports for row in rows if not row.skipped}
        args.json.write_text(json.dumps(reports, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
