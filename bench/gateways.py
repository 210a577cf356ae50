"""What ``labkit grade --url`` says about real gateways, each in front of the mock upstream.

    python -m bench.gateways                      every gateway that can run here
    python -m bench.gateways nginx-unbuffered     only these (see GATEWAYS)

Each gateway is started in its own process (nginx from the system, LiteLLM's proxy from
``bench/.venv-litellm``, which ``make bench`` installs), forwarding to a fresh
``mock-upstream``; then ``labkit grade --url GATEWAY --upstream MOCK --json`` grades it as a
black box (``usage`` is skipped: there is no usage log to read). The table says which checks
each one fails; the evidence of every failure is printed below it. A gateway whose tool is
missing is reported as skipped, never faked.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.configs import Config, Litellm, Nginx, Server, start_litellm, start_mock, start_nginx
from mock_upstream.scenario import DEFAULT_TOKENS, DEFAULT_TPS, DEFAULT_TTFT_MS

GRADE_TIMEOUT_S = 300.0

LITELLM_CONF = """\
model_list:
  - model_name: lab-model
    litellm_params:
      model: openai/lab-model
      api_base: {upstream}/v1
      api_key: sk-mock
general_settings:
  dangerously_permit_weak_or_unset_master_key: true
"""


@dataclass(frozen=True)
class Gateway:
    name: str
    label: str
    start: Callable[[Server], Server]
    unavailable: Callable[[], str | None]


def _nginx_missing() -> str | None:
    return Nginx().unavailable(Config("nginx", "nginx", "nginx"))


def _nginx(name: str, directives: str) -> Callable[[Server], Server]:
    def start(upstream: Server) -> Server:
        return start_nginx(name, upstream, directives)

    return start


def _litellm_missing() -> str | None:
    return Litellm().unavailable(Config("litellm", "litellm", "litellm"))


def _litellm(upstream: Server) -> Server:
    return start_litellm("litellm", LITELLM_CONF.format(upstream=upstream.url))


GATEWAYS: tuple[Gateway, ...] = (
    Gateway(
        "nginx-unbuffered",
        "nginx, proxy_buffering off (HTTP/1.0 to the upstream, the default)",
        _nginx("nginx-unbuffered", "proxy_buffering off;"),
        _nginx_missing,
    ),
    Gateway(
        "nginx-http11",
        "nginx, proxy_http_version 1.1, buffering on (the default)",
        _nginx("nginx-http11", 'proxy_http_version 1.1;\nproxy_set_header Connection "";'),
        _nginx_missing,
    ),
    Gateway("litellm", "LiteLLM proxy 1.108, one worker", _litellm, _litellm_missing),
)
BY_NAME = {g.name: g for g in GATEWAYS}


def grade(gateway: Gateway) -> dict[str, Any]:
    """Start the mock and the gateway, grade the gateway by URL, stop both."""
    mock = start_mock(DEFAULT_TTFT_MS, DEFAULT_TPS, DEFAULT_TOKENS)
    try:
        server = gateway.start(mock)
        try:
            argv = [sys.executable, "-m", "labkit.cli", "grade", "--url", server.url]
            argv += ["--upstream", mock.url, "--json"]
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=GRADE_TIMEOUT_S, check=False
            )
            report: dict[str, Any] = json.loads(done.stdout)
            return report
        finally:
            server.stop()
    finally:
        mock.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateways", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"gateways to grade: {', '.join(BY_NAME)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        parser.error(f"expected gateways from {', '.join(BY_NAME)}; got {', '.join(unknown)}")
    chosen = [BY_NAME[n] for n in args.names] or list(GATEWAYS)
    rows, details = [], []
    for gateway in chosen:
        reason = gateway.unavailable()
        if reason is not None:
            rows.append(f"| {gateway.label} | skipped: {reason} | |")
            continue
        report = grade(gateway)
        results = list(report["checks"].values())
        counted = [r for r in results if r["status"] != "skipped"]
        failed = [r for r in counted if r["status"] == "failed"]
        passed = len(counted) - len(failed)
        names = ", ".join(f"`{r['id']}`" for r in failed) or "none"
        rows.append(f"| {gateway.label} | {passed} of {len(counted)} | {names} |")
        for r in failed:
            details.append(f"{gateway.name} {r['id']}: {r['verdict']} {r['evidence']}")
    print("| gateway | checks passed | fails |")
    print("|---|---|---|")
    print("\n".join(rows))
    if details:
        print("\n" + "\n".join(details))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
