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

import logging
import threading

log = logging.getLogger(__name__)


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
    return True
