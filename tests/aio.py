"""``asyncio.run`` for the tests, also after a browser test in the same process.

Playwright's sync API keeps its event loop running in the thread that started it until the
shared browser stops (``tests/ui/helpers_pages.stop_shared``), and ``asyncio.run`` refuses to
start a loop there. The suite runs ``tests/ui`` last, but a selection or another order need
not: there the coroutine runs in a thread of its own, with its own loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end as ``asyncio.run`` does and return its result; in a
    thread of its own when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="test-asyncio") as pool:
        return pool.submit(asyncio.run, coroutine).result()
