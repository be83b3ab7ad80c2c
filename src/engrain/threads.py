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

import atexit
import functools
import logging
import os
import queue
import threading
import time
import weakref
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
#: Seconds after a thread did not say it runs within :data:`BOOT_WAIT` during which no
#: thread is started (:func:`booted` answers ``False`` at once): the process has just shown
#: it cannot start one (memory), and every start would wait :data:`BOOT_WAIT` again — an
#: index slot or a pool asked again at each call made every call wait that long
#: (``memory_limit.py`` seed 26, session 27: a round's calls 30 s each until it was ended).
BOOT_PAUSE = 60.0
#: Seconds the interpreter's exit waits for an open :class:`Pool`'s work.
EXIT_WAIT = 30.0
#: Until when (``time.monotonic()``) no thread is started (:data:`BOOT_PAUSE`).
_quiet_until = 0.0


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
    :data:`BOOT_WAIT`, ``False`` if it could not start (both logged), or if one did not say
    it runs less than :data:`BOOT_PAUSE` seconds ago (not tried)."""
    global _quiet_until
    if time.monotonic() < _quiet_until:
        return False  # (logged when the pause began)
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
        _quiet_until = time.monotonic() + BOOT_PAUSE
        log.warning("thread %s did not start within %.0f s (out of memory as it started?): "
                    "not waited for; no thread started for %.0f s", thread.name, BOOT_WAIT,
                    BOOT_PAUSE)  # fmt: skip
        return None
    return True


class Pool(Executor):
    """At most ``threads`` daemon threads named ``name``, each started by :func:`booted`
    when work comes and no thread of the pool is idle (a process that never needs one starts
    none): the engine's pools that start threads on a call's path (the background worker
    after a commit, the shared read pool during a ``context()``). ``concurrent.futures``'
    ``ThreadPoolExecutor`` starts its threads with ``Thread.start()``, which waits without a
    bound for a thread that may never say it runs (:data:`BOOT_WAIT`): a call out of memory
    hung in its ``submit`` (``bench/attacks/memory_limit.py``, seed 26, 1 round in 9).

    The threads are daemons; as ``ThreadPoolExecutor``'s are joined at the interpreter's
    exit, a pool left open finishes the work already given to it then (at most
    :data:`EXIT_WAIT` seconds), so no job is cut short and no thread outlives the
    interpreter in a native call.

    :meth:`submit` raises ``RuntimeError("can't start new thread")`` (``cannot_start``) with
    nothing queued when the pool has no thread and none starts (or says it runs within
    :data:`BOOT_WAIT`; one that says so later ends at once); with threads, the work waits
    for one of them."""

    def __init__(self, threads: int, name: str) -> None:
        self._max = threads
        self._name = name
        # what the threads share with the pool: they hold this, not the pool, so a pool
        # nobody holds is collected and its threads end (as ``ThreadPoolExecutor``'s)
        self._shared = _Shared()
        weakref.finalize(self, self._shared.stop)
        _OPEN.add(self)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a thread of the pool (started if none is idle and
        there is room)."""
        shared = self._shared
        with shared.lock:
            if shared.shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if shared.idle:
                shared.idle -= 1
            elif len(shared.threads) < self._max:
                thread = threading.Thread(target=_serve, args=(shared,), daemon=True,
                                          name=f"{self._name}_{len(shared.threads)}")  # fmt: skip
                shared.threads.append(thread)  # before it runs: ``_serve`` looks for it here
                try:
                    running = booted(thread)
                except BaseException:  # ``MemoryError`` from ``start()``: never the pool's
                    shared.threads.remove(thread)  # (if it runs after all, it ends at once)
                    raise
                if running is not True:
                    # not running (or not yet: then it ends as it finds itself left out)
                    shared.threads.remove(thread)
                    if not shared.threads:
                        raise RuntimeError("can't start new thread")
            future: Future[T] = Future()
            shared.work.put(_Work(future, functools.partial(fn, *args, **kwargs)))
            return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Start nothing more; with ``cancel_futures`` cancel the work no thread began; the
        threads end once the work before them is done (waited for with ``wait``)."""
        _OPEN.discard(self)
        threads = self._shared.stop(cancel_futures)
        if wait:
            for thread in threads:
                if thread.is_alive():
                    thread.join()


#: The pools not shut down, finished at the interpreter's exit (:func:`_finish_pools`); a
#: forked child's are its own (the parent's have no thread there, and their locks may have
#: been held at the fork).
_OPEN: weakref.WeakSet[Pool] = weakref.WeakSet()
os.register_at_fork(after_in_child=_OPEN.clear)


@atexit.register
def _finish_pools() -> None:
    """The interpreter exits with pools open: the work given to them is finished first (as
    ``ThreadPoolExecutor``'s threads are joined), at most :data:`EXIT_WAIT` seconds in all."""
    deadline = time.monotonic() + EXIT_WAIT
    threads = [t for pool in list(_OPEN) for t in pool._shared.stop()]
    for thread in threads:
        if thread.is_alive():
            thread.join(max(0.0, deadline - time.monotonic()))


class _Shared:
    """A :class:`Pool`'s queue and threads, shared with the threads (under ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = 0  # threads done with their work and not claimed by a submit since
        self.shut = False

    def stop(self, cancel_futures: bool = False) -> list[threading.Thread]:
        """No more work; each thread ends after the work before it (with ``cancel_futures``
        the work no thread began is cancelled); the threads, to wait for."""
        with self.lock:
            threads, first = list(self.threads), not self.shut
            self.shut = True
        if not first:
            return threads
        if cancel_futures:
            while True:
                try:
                    work = self.work.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    work.future.cancel()
        for _ in threads:
            self.work.put(None)
        return threads


def _serve(shared: _Shared) -> None:
    """A pool thread: the work queued, in order, until its end."""
    with shared.lock:
        if threading.current_thread() not in shared.threads:
            return  # it said it runs too late: its submit went on without it
    while (work := shared.work.get()) is not None:
        work.run()
        del work  # its result is the future's: not kept alive by this frame
        with shared.lock:
            shared.idle += 1


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
