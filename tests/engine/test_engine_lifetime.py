"""An engine does not outlive the kernel that started it, even one killed with SIGKILL."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from labkit.engine import EngineHandle

pytestmark = [pytest.mark.sockets, pytest.mark.heavy]  # it starts the real engine

KILLED_KERNEL = """
import os
from concurrent.futures import ThreadPoolExecutor
from labkit.engine import start_engine
if {from_a_pool}:  # as notebook 10 loads it while its other cells run
    with ThreadPoolExecutor(1) as pool:
        engine = pool.submit(start_engine).result()
else:
    engine = start_engine()
print(engine.pid, flush=True)
os.kill(os.getpid(), 9)  # as nbval stops a kernel: no exit handler runs
"""


@pytest.mark.parametrize("from_a_pool", [False, True], ids=["main-thread", "pool-thread"])
def test_an_engine_ends_when_the_process_that_started_it_is_killed(
    engine: EngineHandle, from_a_pool: bool
) -> None:
    # `engine` makes sure one is built (or skips); the child below starts its own
    code = KILLED_KERNEL.format(from_a_pool=from_a_pool)
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    pid = int(child.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        psutil.Process(pid).kill()
        raise AssertionError(f"the engine (pid {pid}) outlived its killed parent by 10 s")
