"""Run a coroutine to its end from blocking code, even inside a Jupyter kernel's running loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop in a helper thread."""
    result: list[T] = []
    error: list[BaseException] = []
    loop = asyncio.new_event_loop()
    task_ready = threading.Event()
    task_box: list[asyncio.Task[T]] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            task = loop.create_task(coro)
            task_box.append(task)
            task_ready.set()
            result.append(loop.run_until_complete(task))
        except BaseException as exc:
            error.append(exc)
        finally:
            task_ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    thread = threading.Thread(target=run, name="labkit:capture", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        task_ready.wait()
        if task_box and not loop.is_closed():
            loop.call_soon_threadsafe(task_box[0].cancel)
        thread.join()
        raise
    if error:
        raise error[0]
    return result[0]
