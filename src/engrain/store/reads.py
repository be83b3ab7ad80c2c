"""Reads of one call that may overlap each other and the caller's own work.

A store that serves reads from several threads at once, each on its own connection, says so
with a true ``concurrent_reads`` attribute (the PostgreSQL store: the database works in
other processes while this one embeds the query). :class:`Reads` then starts each read at
once in a shared thread pool; on other stores (SQLite, memory) a read runs when its result is
first asked for, in the calling thread, exactly as a plain call would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: Threads shared by every engine in the process; a call starts at most three reads.
READ_THREADS = 8

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="engrain-read")
        return _pool


def concurrent(store: object) -> bool:
    """Whether ``store`` serves reads from several threads at once."""
    return bool(getattr(store, "concurrent_reads", False))


class Reads:
    """Starts reads of ``store``; each ``start`` returns a function giving the result (or
    raising the read's error). Ask for every result once; each is computed once."""

    def __init__(self, store: object) -> None:
        self.parallel = concurrent(store)

    def start(self, read: Callable[[], T]) -> Callable[[], T]:
        """Begin ``read`` (in the background when the store allows it)."""
        if self.parallel:
            return _executor().submit(read).result
        done: list[T] = []

        def result() -> T:
            if not done:
                done.append(read())
            return done[0]

        return result
