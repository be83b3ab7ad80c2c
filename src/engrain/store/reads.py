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

#: Threads shared by every engine in the process; a call starts at most four reads at once.
READ_THREADS = 8


class SharedThreads:
    """A thread pool shared by every store in the process, started on first use (a process
    that never needs it starts no thread)."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads = threads
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ThreadPoolExecutor:
        """The pool, started by the first caller."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
            return self._pool


_executor = SharedThreads(READ_THREADS, "engrain-read")


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
