"""``tests.aio.run_async``: ``asyncio.run`` also where this thread already runs a loop (as
Playwright's sync API leaves it after a browser test)."""

from __future__ import annotations

import asyncio
import threading

from .aio import run_async


async def _where() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


def test_without_a_running_loop_it_runs_here() -> None:
    assert run_async(_where()) == threading.current_thread().name


def test_inside_a_running_loop_it_runs_in_a_thread_of_its_own() -> None:
    async def outer() -> str:
        return run_async(_where())  # a synchronous call made while this loop runs

    name = asyncio.run(outer())
    assert name.startswith("test-asyncio") and name != threading.current_thread().name
