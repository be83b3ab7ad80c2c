"""A ``context()``'s counted uses committed after the call returns, on a thread of the
PostgreSQL store (``ENGRAIN_DEFER_USES``, the setting SQLite's ``store/sqlite_deferred.py``
reads: on unless it says ``off``; docs/postgres.md, "Session 29 … (h4)").

In the call, :meth:`PostgresStore.record_uses` commits the context's record (the state
document ``feedback()`` reads) and hands the counts to :class:`DeferredCounts`; its thread
commits every call's waiting counts in one transaction, one pipeline (one round trip):
:data:`~engrain.store.postgres.writes.ACCESS_COUNT` once per call, in the order the calls
handed them over, the users sorted (each call's statement locks as before: memories, then
the user's access clock, then the access rows; sorting the users keeps two processes'
batches from taking two clocks in opposite orders).

**Nothing of this process reads the database without them.** Every statement of the store
takes its connection through ``Pooled._connection``, which first calls :meth:`settle`: if
counts were handed over and are not yet committed, the thread commits them itself (or waits
for the commit under way), so every statement of the process runs after the counts of every
call that returned before it began, as when they were committed in the call. The check is
one attribute read when nothing waits. What changes is *when another process* sees them,
and what a process death loses — as on SQLite:

- another process's call sees them once the thread commits (at once: the thread wakes when
  they are handed over);
- a process killed before then loses the counts of the calls that returned meanwhile (their
  records are committed: ``feedback()`` answers for them); never a memory, a key or a
  document. The counts were already committed with ``synchronous_commit = off``, so a
  crash of the *server* could lose the last fraction of a second of them before (row 40);
- a commit of waiting counts that fails (the server gone, a statement refused) loses those
  counts and logs a warning; the thread that happened to settle them is never failed by it:
  its own statement then runs, or fails, on its own.

A call that raises hands nothing over: the counts are handed over after its record commits.
``PostgresStore.close()`` commits what waits before the pool closes, and the interpreter's
exit does so for a store never closed (waiting at most :data:`EXIT_WAIT` seconds).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Mapping

from engrain import envvars
from engrain.errors import EngrainError
from engrain.store.sqlite_deferred import EXIT_WAIT, VARIABLE, Uses
from engrain.threads import started

__all__ = ["EXIT_WAIT", "VARIABLE", "DeferredCounts", "Uses", "deferred_uses"]

log = logging.getLogger(__name__)


def deferred_uses(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a ``context()``'s counted uses are committed after it returns
    (``ENGRAIN_DEFER_USES``: ``on``, the default, or ``off``: in the call, in one
    transaction with its record); any other value raises
    :class:`~engrain.errors.ConfigError`."""
    return envvars.choice(VARIABLE, environ) == "on"


class DeferredCounts:
    """The counts handed over by calls that returned, and the thread that commits them.

    ``commit`` writes a batch (oldest first) in one transaction and raises
    :class:`~engrain.errors.EngrainError` (or ``MemoryError``) when it cannot; it is called
    by one thread at a time, under ``_committing``, and its own statements' :meth:`settle`
    return at once. ``_guard`` guards only the list and the count of pending calls, never a
    statement, so :meth:`add` never waits for a commit under way."""

    def __init__(self, commit: Callable[[list[Uses]], None]) -> None:
        self._commit = commit
        self._guard = threading.Lock()
        self._committing = threading.Lock()
        self._waiting: list[Uses] = []
        #: Calls handed over whose counts are not yet committed (or dropped): read without
        #: ``_guard`` by :meth:`settle`'s fast path (an int's read is atomic).
        self._pending = 0
        self._owner: int | None = None  # the thread committing, its own statements let by
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="engrain-pg-uses", daemon=True)

    def start(self) -> bool:
        """Start the thread; whether it started (``threads.started``: out of memory or at
        the process's thread limit it cannot, and the store then writes the counts in each
        call instead of failing its open)."""
        if not started(self._thread):
            return False
        atexit.register(self._at_exit)
        return True

    def add(self, uses: Uses) -> None:
        """Hand over one call's counts and wake the thread."""
        with self._guard:
            self._waiting.append(uses)
            self._pending += 1
        self._wake.set()

    def pending(self) -> int:
        """How many calls' counts are handed over and not yet committed (tests)."""
        return self._pending

    def settle(self, timeout: float = -1) -> bool:
        """Return once every count handed over before this call is committed (or dropped,
        logged): committed here, or by the commit under way. ``False`` only if ``timeout``
        seconds passed first. Never raises for the counts' own failure."""
        if self._pending == 0 or self._owner == threading.get_ident():
            return True
        if not self._committing.acquire(timeout=timeout):
            return False
        try:
            self._owner = threading.get_ident()
            with self._guard:
                taken, self._waiting = self._waiting, []
            if taken:
                self._write(taken)
        finally:
            self._owner = None
            self._committing.release()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Commit what waits and stop the thread."""
        self.settle(-1 if timeout is None else timeout)
        self._closing = True
        atexit.unregister(self._at_exit)
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _write(self, taken: list[Uses]) -> None:
        try:
            self._commit(taken)
        except MemoryError:
            log.warning("the counted uses of %d context() calls may not be written: out of "
                        "memory", len(taken))  # fmt: skip
        except EngrainError as exc:  # the store's failure; never the caller's
            log.warning("the counted uses of %d context() calls were not written: %s",
                        len(taken), exc)  # fmt: skip
        finally:
            with self._guard:
                self._pending -= len(taken)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            self.settle()

    def _at_exit(self) -> None:
        # the store was never closed: commit what waits, not waiting forever
        if not self._closing:
            self.settle(EXIT_WAIT)
