"""A ``context()``'s counted uses written after the call returns, on a thread of the store
(``ENGRAIN_DEFER_USES``: on by default since session 26, ``off`` writes them in the call's
one transaction; docs/scale.md, sessions 25 h5 and 26 h3, docs/decisions.md).

A ``context()`` ends with one write transaction: its record (what ``feedback()`` reads)
and one use of each memory it shows, ~100–300 rows of the narrow ``uses`` table, each on
its own page at 100,000 memories: 2.0 / 2.8–3.0 ms of the calling thread's CPU in a deep
call (7–8 %). Deferred, the record still commits in the call (a small transaction), and
the counts are handed to :class:`DeferredUses`: a writer thread commits them at once, in
one transaction with any other call's waiting counts.

**Nothing of this process reads the file without them.** The store's lock
(:class:`StoreLock`) commits the waiting counts whenever a thread takes it first (not
when it takes it again inside its own hold): every statement of this process (a read, a
write, a working set found or loaded, the checkpointer's begin) runs after the counts of
every call that returned before it, so a call sees every use counted before it began, as
when the counts were committed in the call. The working set is touched only once they
commit. What changes is *when another process* sees them, and what a process death
loses:

- another process's call sees them once the writer commits (at once, unless the store
  is held by a long write of this process: then after it);
- a process killed before the writer commits loses the counts of the calls that returned
  meanwhile (their records are committed: ``feedback()`` answers for them); never a
  memory, a key or a document;
- a commit of waiting counts that fails (the file gone, another process holding its write
  lock past the busy timeout) loses those counts and logs a warning; the thread that
  happened to take the lock is never failed by it.

A call that raises hands nothing over: the counts are handed over after its record
commits, and the record's transaction is the call's last write but promotions, as before.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

log = logging.getLogger(__name__)

#: Seconds the interpreter's exit waits for the store to commit what waits.
EXIT_WAIT = 10.0
#: The environment variable that turns deferred counts on (``on``, unset) or off (``off``).
VARIABLE = "ENGRAIN_DEFER_USES"


@dataclass(frozen=True, slots=True)
class Uses:
    """One call's counted uses: ``counts`` uses of each id of ``user_id``'s, at ``at``."""

    user_id: str
    counts: Counter[str]
    at: datetime


class StoreLock:
    """The store's re-entrant lock, which runs ``first`` (if set) each time a thread takes
    it without already holding it, inside the hold: the waiting counts committed before
    the thread's own statements (module docstring). ``first`` must not raise."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # changed only by the thread holding the lock
        self.first: Callable[[], None] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock as :meth:`threading.RLock.acquire` does; whether it was taken."""
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        if self._depth == 1 and self.first is not None:
            try:
                self.first()
            except BaseException:  # the caller never held it: do not leave it held
                self.release()
                raise
        return True

    def release(self) -> None:
        """Release one hold of the lock."""
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class DeferredUses:
    """The counts handed over by calls that returned, and the thread that commits them.

    :meth:`add` and :meth:`take` are called under the store's lock (so the counts are
    taken in the order they were added, and a commit of them is ordered with every other
    statement of the store); the thread only wakes on :meth:`add` and takes the store's
    ``lock``, whose first-taker hook commits what waits. So does the interpreter's exit,
    for a store never closed."""

    def __init__(self, lock: StoreLock) -> None:
        self._waiting: list[Uses] = []
        self._wake = threading.Event()
        self._closing = False
        self._lock = lock
        self._thread = threading.Thread(target=self._run, name="engrain-uses", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def add(self, uses: Uses) -> None:
        """Hand over one call's counts (under the store's lock) and wake the thread."""
        self._waiting.append(uses)
        self._wake.set()

    def waiting(self) -> bool:
        """Whether counts wait (read under the store's lock)."""
        return bool(self._waiting)

    def take(self) -> list[Uses]:
        """The waiting counts, oldest first, no longer waiting (under the store's lock)."""
        taken, self._waiting = self._waiting, []
        return taken

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread (after the store committed what waited, under its lock)."""
        self._closing = True
        atexit.unregister(self._at_exit)
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            with self._lock:  # the lock's first-taker hook commits what waits
                pass

    def _at_exit(self) -> None:
        # a daemon thread may still hold the store at exit: wait for it, not forever
        if not self._closing and self._lock.acquire(timeout=EXIT_WAIT):
            self._lock.release()
