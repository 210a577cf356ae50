"""Grade one file in this process and print the report as JSON: ``labkit grade``'s worker.

``python -m labkit.grading.worker FILE [--name NAME] [--rubric TOML] [--only ID ...]``

The CLI starts it with a stripped environment (``sandbox.clean_env``), so the learner's proxy,
which inherits this environment, never sees the instructor's secrets; and with a hard time
limit, so nothing a submission does can stall the caller. Exit status 0 with the report on
stdout, or 2 with the reason on stderr when grading itself could not be set up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from labkit.errors import LabkitError
from labkit.grading.grader import agrade_file
from labkit.grading.rubric import Rubric


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading.worker")
    parser.add_argument("file")
    parser.add_argument("--name")
    parser.add_argument("--rubric")
    parser.add_argument("--only", nargs="+")
    args = parser.parse_args(argv)
    try:
        rubric = Rubric.load(args.rubric)
        report = asyncio.run(agrade_file(args.file, rubric, name=args.name, only=args.only))
    except (LabkitError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(report.to_json(), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
