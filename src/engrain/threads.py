"""Starting the engine's own threads when the process may not be able to (session 26).

A thread's start maps its stack; out of memory (``RLIMIT_AS``, a container's limit) or at
the process's thread limit, Python raises ``RuntimeError("can't start new thread")``. The
engine starts threads for work *around* a call (a checkpoint after a commit, an index's
build or save, a background compression): such a failure must not fail the call (after a
commit it would report a stored write as failed) nor leave the starter waiting for a
thread that never ran. :func:`started` starts one and says whether it did; the caller goes
on without it (the work is done at the next occasion). A thread a call itself needs (the
planner's) fails the call instead: ``lifecycle.out_of_memory`` makes that an
``OutOfMemoryError`` with nothing written.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def cannot_start(exc: BaseException) -> bool:
    """Whether ``exc`` is the error of a thread that could not be started."""
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


#: Seconds :func:`started` waits for a new thread to say it runs. ``Thread.start()`` waits
#: for that without a bound, and a thread whose start-up runs out of memory before it says
#: so never does ("Exception ignored in thread started by: … MemoryError"): its starter
#: waited forever (python/cpython#140746, open; ``bench/attacks/memory_limit.py`` hung in
#: an index build's start).
BOOT_WAIT = 30.0


class _BoundedStart(threading.Event):
    """The event ``Thread.start()`` waits on (its ``_started``), waited for at most
    :data:`BOOT_WAIT` seconds when ``start()`` asks for no bound."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(BOOT_WAIT if timeout is None else timeout)


def started(thread: threading.Thread) -> bool:
    """Start ``thread``; ``False`` (logged) if the process cannot start a thread now. A
    thread that does not say it runs within :data:`BOOT_WAIT` is logged and counted as
    started (it may yet run: its work is not begun twice), never waited for longer."""
    return booted(thread) is not False


def booted(thread: threading.Thread) -> bool | None:
    """Start ``thread``: ``True`` once it says it runs, ``None`` if it did not within
    :data:`BOOT_WAIT`, ``False`` if it could not start (both logged)."""
    bounded = _BoundedStart()
    # the interpreter's own event, replaced before start() (which only sets and waits on
    # it; ``is_alive`` and ``join`` read it): the one change to threading's private state
    thread._started = bounded  # type: ignore[attr-defined]
    try:
        thread.start()
    except RuntimeError as exc:
        if not cannot_start(exc):
            raise
        log.warning("thread %s not started (%s): its work waits for the next occasion",
                    thread.name, exc)  # fmt: skip
        return False
    if not bounded.is_set():
        log.warning("thread %s did not start within %.0f s (out of memory as it started?): "
                    "not waited for", thread.name, BOOT_WAIT)  # fmt: skip
        return None
    return True


class Pool(Executor):
    """At most ``threads`` daemon threads named ``name``, each started by :func:`started`
    when work comes and no thread of the pool is idle (a process that never needs one starts
    none): the engine's pools that start threads on a call's path (the background worker
    after a commit, the shared read pool during a ``context()``). ``concurrent.futures``'
    ``ThreadPoolExecutor`` starts its threads with ``Thread.start()``, which waits without a
    bound for a thread that may never say it runs (:data:`BOOT_WAIT`): a call out of memory
    hung in its ``submit`` (``bench/attacks/memory_limit.py``, seed 26, 1 round in 9).

    :meth:`submit` raises ``RuntimeError("can't start new thread")`` (``cannot_start``) with
    nothing queued when the pool has no thread and none starts (or says it runs within
    :data:`BOOT_WAIT`; one that says so later ends at once); with threads, the work waits
    for one of them. The threads are daemons: work still queued when the interpreter
    exits is dropped (the owner waits for what it must: ``background.Worker``'s exit)."""

    def __init__(self, threads: int, name: str) -> None:
        self._max = threads
        self._name = name
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads done with their work and not claimed by a submit since
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a thread of the pool (started if none is idle and
        there is room)."""
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)  # before it runs: ``_run`` looks for it here
                if booted(thread) is not True:
                    # not running (or not yet: then it ends as it finds itself left out)
                    self._threads.remove(thread)
                    if not self._threads:
                        raise RuntimeError("can't start new thread")
            future: Future[T] = Future()
            self._work.put(_Work(future, functools.partial(fn, *args, **kwargs)))
            return future

    def _run(self) -> None:
        with self._lock:
            if threading.current_thread() not in self._threads:
                return  # it said it runs too late: its submit went on without it
        while (work := self._work.get()) is not None:
            work.run()
            del work  # its result is the future's: not kept alive by this frame
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Start nothing more; with ``cancel_futures`` cancel the work no thread began; the
        threads end once the work before them is done (waited for with ``wait``)."""
        with self._lock:
            self._shut = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    work = self._work.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    work.future.cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                if thread.is_alive():
                    thread.join()


@dataclass(frozen=True)
class _Work:
    """A submitted call and the future it answers."""

    future: Future[Any]
    call: Callable[[], Any]

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # cancelled before a thread took it
        try:
            result = self.call()
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)
