"""Reads of one call that may overlap each other and the caller's own work.

A store that serves reads from several threads at once, each on its own connection, says so
with a true ``concurrent_reads`` attribute (the PostgreSQL store: the database works in
other processes while this one embeds the query). :class:`Reads` then starts each read at
once in a shared thread pool. On other stores a read runs when its result is first asked
for, in the calling thread, exactly as a plain call would; unless the caller asks for
``overlap`` (an embedded store's ``context()``, ``Settings.overlap_reads``): then each read
is handed to the same pool at once, to run on another core while the calling thread embeds
the query, and taken back to run in the calling thread if no pool thread has begun it by
the time its result is asked for (a busy pool never makes a call wait in its queue), or
at once if the pool cannot start a thread (``threads.Pool``: out of memory, a call reads
in its own thread rather than fail).
What a read returns does not depend on the thread it runs in: each takes the store's
current snapshot as it begins, as it would in the calling thread a few milliseconds later.

A store's search may also hand work that needs the query vector to the same pool, beside
its own (``walks``, ``Settings.overlap_walks``: the typed learnings' index walk and the
read of its candidates' rows while the calling thread walks and reads the pool's):
:meth:`Reads.beside` gives it the function to begin it with, or None to keep every step in
the calling thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from engrain.threads import Pool, cannot_start

T = TypeVar("T")

#: Begins a piece of work and returns the function giving its result (:func:`overlapped`,
#: :func:`lazy`): asked for once, raising the work's error if it failed.
Begin = Callable[[Callable[[], Any]], Callable[[], Any]]

#: Threads shared by every engine in the process; a call starts at most four reads at once.
READ_THREADS = 8


class SharedThreads:
    """A thread pool shared by every store in the process, started on first use (a process
    that never needs it starts no thread). A forked child starts its own: it inherits the
    pool object but none of its threads, and a task handed to it would never run."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads = threads
        self._name = name
        self._pool: Pool | None = None
        self._pid = 0
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it at the fork

    def __call__(self) -> Pool:
        """The pool, started by the first caller of this process."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = Pool(self._threads, self._name)  # threads started bounded
                self._pid = os.getpid()
            return self._pool


_executor = SharedThreads(READ_THREADS, "engrain-read")


def concurrent(store: object) -> bool:
    """Whether ``store`` serves reads from several threads at once."""
    return bool(getattr(store, "concurrent_reads", False))


class Reads:
    """Starts reads of ``store``; each ``start`` returns a function giving the result (or
    raising the read's error). Ask for every result once; each is computed once."""

    def __init__(self, store: object, *, overlap: bool = False, walks: bool = False) -> None:
        self.parallel = concurrent(store)
        self.overlap = overlap and not self.parallel
        self.walks = walks and not self.parallel

    def start(self, read: Callable[[], T]) -> Callable[[], T]:
        """Begin ``read`` (in the background when the store allows it, or with ``overlap``)."""
        if self.parallel:
            future = _begun(read)
            return lazy(read) if future is None else future.result
        if self.overlap:
            return overlapped(read)
        return lazy(read)

    @property
    def beside(self) -> Begin | None:
        """How a search of this call begins its work beside its own (``walks``:
        :func:`overlapped`), or None: in the calling thread, in turn."""
        return overlapped if self.walks else None


def lazy(read: Callable[[], T]) -> Callable[[], T]:
    """``read`` run in the caller when its result is first asked for (once)."""
    done: list[T] = []

    def result() -> T:
        if not done:
            done.append(read())
        return done[0]

    return result


def overlapped(read: Callable[[], T]) -> Callable[[], T]:
    """``read`` handed to the shared pool; its result, or ``read`` run by the caller if no
    pool thread took it up before it was asked for (cancelled first: it never runs twice).
    A read that failed raises its error in the caller, when the result is asked for."""
    future = _begun(read)
    if future is None:
        return lazy(read)
    done: list[T] = []

    def result() -> T:
        if not done:
            done.append(read() if future.cancel() else future.result())
        return done[0]

    return result


def _begun(read: Callable[[], T]) -> Future[T] | None:
    """``read`` handed to the shared pool; ``None`` if the pool has no thread and none can
    start (out of memory or threads): the caller then reads, as on a store that does not
    overlap reads."""
    try:
        return _executor().submit(read)
    except RuntimeError as exc:
        if not cannot_start(exc):
            raise
        return None
