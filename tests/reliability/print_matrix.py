"""Print the fault × client matrix as Markdown, for the README.

``python tests/reliability/print_matrix.py``.

Runs every cell through the reference proxy over real sockets (about 20 s) and exits 1 if an
applicable cell failed.
"""

from __future__ import annotations

import sys
import time

from reliability_support import format_matrix, run_matrix


def main() -> int:
    started = time.monotonic()
    results = run_matrix()
    print(format_matrix(results))
    print(f"\n(matrix ran in {time.monotonic() - started:.1f} s)")
    return 0 if all(c.passed for c in results.values() if c.applicable) else 1


if __name__ == "__main__":
    sys.exit(main())
