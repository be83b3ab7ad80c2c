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


def started(thread: threading.Thread) -> bool:
    """Start ``thread``; ``False`` (logged) if the process cannot start a thread now."""
    try:
        thread.start()
    except RuntimeError as exc:
        if not cannot_start(exc):
            raise
        log.warning("thread %s not started (%s): its work waits for the next occasion",
                    thread.name, exc)  # fmt: skip
        return False
    return True
