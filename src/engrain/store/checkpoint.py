"""WAL checkpoints off the request path for the SQLite store.

SQLite checkpoints its write-ahead log on the connection whose commit pushes the log past
1,000 pages, inside that commit: the caller whose ``context()`` counted its uses pays for
copying every page written since the last checkpoint (a 20 ms p95 spike at 10,000
memories, measured for issue 12). The store turns that off on its own connection
(``PRAGMA wal_autocheckpoint=0``) and signals a :class:`Checkpointer` after each commit
instead; the checkpointer's thread, on a connection of its own, runs a ``PASSIVE``
checkpoint at most every :data:`INTERVAL` seconds while commits keep coming.

Why this is safe: a checkpoint copies committed pages from the log into the database file
and never changes what any reader sees; ``PASSIVE`` waits for no reader or writer and skips
frames a reader still needs (the next pass takes them). It is not a commit, so other
connections' ``PRAGMA data_version`` does not move and no working set is reloaded. If the
thread cannot checkpoint (the file is busy or gone), the log only grows until the next pass
succeeds or the last connection closes, which checkpoints as SQLite always does.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from urllib.parse import quote

#: Seconds between two checkpoints while commits keep coming: the log holds at most this
#: long's writes (a context's use counts rewrite ~85 pages; SQLite's default checkpoints
#: every 1,000 pages, about a dozen contexts).
INTERVAL = 0.5


class Checkpointer:
    """Checkpoints the write-ahead log of the SQLite file at ``path`` from one daemon
    thread, started on the first :meth:`committed` call and stopped by :meth:`close`."""

    def __init__(self, path: Path, interval: float = INTERVAL) -> None:
        self._path = path
        self._interval = interval
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self.passes = 0  # checkpoints run, for tests and diagnostics

    def committed(self) -> None:
        """Note a commit: the thread checkpoints soon (at once if it has been idle)."""
        if self._thread is None:
            with self._guard:
                if self._thread is None and not self._stopping.is_set():
                    self._thread = threading.Thread(
                        target=self._run,
                        name=f"engrain-checkpoint:{self._path.name}",
                        daemon=True,
                    )
                    self._thread.start()
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after one last checkpoint, waiting at most ``timeout`` seconds."""
        with self._guard:
            self._stopping.set()
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            # mode=rw: a file removed meanwhile is not created again, empty
            db = sqlite3.connect(f"file:{quote(str(self._path))}?mode=rw", uri=True,
                                 isolation_level=None, timeout=1.0)  # fmt: skip
        except sqlite3.Error:
            return  # the store's own close still checkpoints
        try:
            while not self._stopping.is_set():
                self._wake.wait()
                self._wake.clear()
                self._checkpoint(db)
                # commits in the meantime set the event again: one pass per interval at most
                self._stopping.wait(self._interval)
            self._checkpoint(db)
        finally:
            db.close()

    def _checkpoint(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.passes += 1
        except sqlite3.Error:
            pass  # busy or gone: the next commit wakes the thread again
