"""A quick soak in `make test`: 300 mixed streams, 50 at a time, then nothing may have leaked.

The full soak (a few thousand streams) is ``python -m bench soak`` (``soak.py`` beside this);
this runs the same code.
Regression: Bug: the reference cancelled its upstream reader after ``[DONE]`` while it read the
body's last bytes, which left every finished stream's connection checked out of httpx's pool;
after 100 streams each new request waited 10 s for a connection and got a 502. Fix: after a
normal end the reader finishes by itself (bounded by ``READER_GRACE_S``).
"""

from __future__ import annotations

import pytest
import soak

pytestmark = [pytest.mark.slow, pytest.mark.sockets]


def test_quick_soak_leaks_nothing() -> None:
    report = soak.run_soak(streams=300, concurrency=50, max_seconds=60.0, warmup=60)
    summary = report.to_json()
    assert report.streams == 300, summary
    assert report.ok, "\n".join(report.problems) + f"\n{summary}"
