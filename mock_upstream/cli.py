"""``mock-upstream``: run the mock LLM server.

    mock-upstream --port 8001 --ttft-ms 200 --tps 25 --tokens 48
    mock-upstream --scenario 'stall_after=10;stall_s=5'
    mock-upstream --slots 4      # an engine with 4 slots: a fifth request waits for one

Flags set the scenario defaults; each request can still override them with the
``X-Mock-Scenario`` header or the body's ``mock`` field.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mock_upstream.scenario import (
    DEFAULT_TOKENS,
    DEFAULT_TPS,
    DEFAULT_TTFT_MS,
    HEADER,
    Scenario,
    ScenarioError,
    convert,
    parse_header,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mock-upstream",
        description="A deterministic, paced, fault-injectable mock LLM server "
        "(OpenAI Chat Completions and Responses, Anthropic Messages).",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (%(default)s)")
    parser.add_argument("--ttft-ms", type=int, help=f"time to first token (ms, {DEFAULT_TTFT_MS})")
    parser.add_argument("--tps", type=float, help=f"tokens per second ({DEFAULT_TPS:g})")
    parser.add_argument("--tokens", type=int, help=f"completion length ({DEFAULT_TOKENS})")
    parser.add_argument("--seed", type=int, help="text seed (the request's seed, else 0)")
    parser.add_argument(
        "--slots",
        type=int,
        help="requests generated at once; more wait, first come first served (unlimited)",
    )
    parser.add_argument(
        "--scenario",
        default="",
        metavar="K=V;K=V",
        help=f"any other scenario defaults, in the {HEADER} header syntax",
    )
    return parser


def defaults_from(args: argparse.Namespace) -> Scenario:
    """The scenario defaults the flags ask for (raises :class:`ScenarioError`)."""
    overrides = parse_header(args.scenario, source="--scenario")
    flags = {
        "ttft_ms": args.ttft_ms,
        "tps": args.tps,
        "tokens": args.tokens,
        "seed": args.seed,
        "slots": args.slots,
    }
    for key, value in flags.items():
        if value is not None:
            overrides.update(convert({key: value}, source="--" + key.replace("_", "-")))
    return Scenario().merged(overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        defaults = defaults_from(args)
    except ScenarioError as exc:
        parser.error(str(exc))

    import uvicorn

    from mock_upstream.app import create_app

    print(f"mock-upstream listening on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(
        create_app(defaults),
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
