"""WAL checkpoints off the request path for the SQLite store.

SQLite checkpoints its write-ahead log on the connection whose commit pushes the log past
1,000 pages, inside that commit: the caller whose ``context()`` counted its uses pays for
copying every page written since the last checkpoint (a 20 ms p95 spike at 10,000
memories, measured for issue 12). The store turns that off on its own connection
(``PRAGMA wal_autocheckpoint=0``) and signals a :class:`Checkpointer` after each commit
instead; the checkpointer's thread, on a connection of its own, runs a ``PASSIVE``
checkpoint at most every :data:`INTERVAL` seconds while commits keep coming.

Each pass then restarts the log from its first frame (``RESTART``), so the next commits
overwrite the file's blocks instead of extending it: an ``fdatasync`` that extends a file
also waits for the filesystem's journal (ext4, load ~20: 3.9 ms p50 against 0.4 ms for one
that overwrites, docs/ingest.md, session 20), and a durable commit (``synchronous=FULL``)
syncs the log on its caller's thread. SQLite restarts the log by itself only at a write that
begins after a complete pass with no commit since; under a steady ingest a commit lands
during every ``PASSIVE`` pass (which waits for nobody), so the log never restarted and grew
to tens of MB, extended by almost every commit. The ``RESTART`` pass copies what came
during the ``PASSIVE`` one (usually a few pages) while it holds the write lock, then resets
the log if no reader still uses it. Its connection's busy timeout is 0: it never waits, for
a writer (SQLite then runs it as ``PASSIVE``) or a reader (the log is not reset); a writer
that comes while it holds the lock waits for those few pages. A refused restart is tried
again :data:`RESTART_TRIES` times, :data:`RESTART_PAUSE` apart: during an ingest a writer
holds the lock most of the time, and one try per pass reset the log on 6–10 of ~12 passes
(the log still grew on 72–99 of 217 acknowledged writes), ten tries on 19 of 19 (20 of 217).
``journal_size_limit`` stays SQLite's default (never truncate): a log truncated after a
restart is extended again by the next commits, the cost this avoids.

Why this is safe: a checkpoint copies committed pages from the log into the database file
and never changes what any reader sees; ``PASSIVE`` waits for no reader or writer and skips
frames a reader still needs (the next pass takes them). It is not a commit, so other
connections' ``PRAGMA data_version`` does not move and no working set is reloaded. If the
thread cannot checkpoint (the file is busy or gone), the log only grows until the next pass
succeeds or the last connection closes, which checkpoints as SQLite always does. The
restart weakens no commit: the pass syncs the pages into the database file before the log
is reset (the connection keeps SQLite's default ``synchronous=FULL``), SQLite resets only a
log whose every frame is in the file and that no reader uses, and a commit that overwrites
the log's first frames is synced as before (``FULL``: before its call returns).

**The log begun on this thread** (``on_restart``). The first commit that writes to a
restarted log writes the log's header and ``fdatasync``s it before its frames, at
``synchronous=NORMAL`` as at ``FULL`` (SQLite's WAL header sync: an out-of-order write after
a restart could otherwise corrupt the file after a power loss), so every restart put one
disk sync on whichever caller committed next: a ``context()`` whose counted uses are
otherwise a lazy commit (3-13 ms p50-p90 under this machine's load, docs/scale.md,
sessions 23 and 24). After each restart the thread calls ``on_restart``, with which the
store commits :func:`begin_log` on its own connection, so the header and its sync are
written here and a caller's commit only appends. It wakes no pass (an idle store's log
keeps that one frame until the next commit). It is a commit, so other connections'
``data_version`` moves once a pass, right after the commits that set the pass off moved it;
their working sets are kept (the users' revisions hold).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from engrain.threads import started

#: Seconds between two checkpoints while commits keep coming: the log holds at most this
#: long's writes (a context's use counts rewrite ~85 pages; SQLite's default checkpoints
#: every 1,000 pages, about a dozen contexts).
INTERVAL = 0.5
#: Tries of the ``RESTART`` pass while a writer or a reader refuses it, and the seconds
#: between two: at most 4% of :data:`INTERVAL`, so a busy log is reset within one pass.
RESTART_TRIES = 10
RESTART_PAUSE = 0.002


def begin_log(db: sqlite3.Connection) -> None:
    """Commit one write that changes nothing a reader sees, on ``db`` (which no other thread
    uses meanwhile), so a log the checkpointer has restarted is begun by it (see above):
    ``user_version`` (which engrain does not use) set to the value it has, which SQLite
    still writes as page 1, one frame. The busy timeout is 0 meanwhile: a writer of another
    process holds the lock, it begins the log, and nobody waits here. Raises
    ``sqlite3.Error`` (busy, or the file gone) with nothing written."""
    timeout = db.execute("PRAGMA busy_timeout").fetchall()[0][0]
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchall()[0][0])
            db.execute(f"PRAGMA user_version = {version}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(timeout)}")


def connect(path: Path) -> sqlite3.Connection:
    """The checkpointer's own connection to the file at ``path``: ``mode=rw``, so a file
    removed meanwhile is not created again, empty; busy timeout 0, so the ``RESTART`` pass
    waits for no writer or reader (above)."""
    return sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True,
                           isolation_level=None, timeout=0.0)  # fmt: skip


class Checkpointer:
    """Checkpoints the write-ahead log of the SQLite file at ``path`` from one daemon
    thread, started on the first :meth:`committed` call and stopped by :meth:`close`."""

    def __init__(
        self,
        path: Path,
        interval: float = INTERVAL,
        on_restart: Callable[[], bool] | None = None,
    ) -> None:
        self._path = path
        self._interval = interval
        self._on_restart = on_restart  # called on this thread after each restart (above)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self.passes = 0  # checkpoints run, for tests and diagnostics
        self.restarts = 0  # passes after which the next commit starts the log again
        self.begun = 0  # restarted logs ``on_restart`` began (it answered True)

    def committed(self) -> None:
        """Note a commit: the thread checkpoints soon (at once if it has been idle)."""
        if self._thread is None:
            with self._guard:
                if self._thread is None and not self._stopping.is_set():
                    thread = threading.Thread(
                        target=self._run,
                        name=f"engrain-checkpoint:{self._path.name}",
                        daemon=True,
                    )
                    # after a commit: a thread that cannot start is tried at the next one
                    if started(thread):
                        self._thread = thread
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after one last checkpoint, waiting at most ``timeout`` seconds."""
        with self._guard:
            self._stopping.set()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread.is_alive():  # (one that never said it runs: not)
            thread.join(timeout)

    def _run(self) -> None:
        try:
            db = connect(self._path)
        except sqlite3.Error:
            return  # the store's own close still checkpoints
        try:
            while not self._stopping.is_set():
                self._wake.wait()
                self._wake.clear()
                if self._checkpoint(db) and self._begin_log():
                    self.begun += 1
                # commits in the meantime set the event again: one pass per interval at most
                self._stopping.wait(self._interval)
            self._checkpoint(db)
        finally:
            db.close()

    def _begin_log(self) -> bool:
        """``on_restart``, if given; whether it began the log. Whatever it raises is
        dropped: the next commit begins the log, as without it, and the thread goes on
        checkpointing."""
        if self._on_restart is None:
            return False
        try:
            return self._on_restart()
        except Exception:  # a daemon thread: checkpoints must go on
            return False

    def _checkpoint(self, db: sqlite3.Connection) -> bool:
        """One pass; whether it restarted the log."""
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.passes += 1
            for attempt in range(RESTART_TRIES):
                if attempt:
                    time.sleep(RESTART_PAUSE)
                # (busy, frames in the log, frames checkpointed): 0 when it was reset
                if db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0] == 0:
                    self.restarts += 1
                    return True
        except (sqlite3.Error, MemoryError):
            # busy or gone, or out of memory (the thread must not die of it: no checkpoint
            # would run again in this process): the next commit wakes the thread again
            pass
        return False
