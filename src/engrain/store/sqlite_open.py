"""Opening the SQLite file: read-write as usual, read-only when its filesystem is.

A store on a read-only mount (a container's ``ro`` volume, a snapshot, a replica's copy)
cannot be opened the usual way: SQLite opens the file for writing and, in WAL mode, needs
the ``-shm`` file beside it, which it cannot create there (``unable to open database
file``). Reading it is still possible, so ``engrain list``, ``export`` and ``recall`` on such
a store should work. When the directory's filesystem is mounted read-only
(``statvfs``'s ``ST_RDONLY``: a fact of the mount, unlike file modes, which root ignores),
the file is opened read-only:

- with ``mode=ro`` when a ``-wal`` file is there (a writer elsewhere left one, or a
  process died: committed rows may be in it alone; SQLite reads the log through its
  ``-shm`` without writing, and refuses the file, a ``StoreError``, when there is no
  ``-shm`` and none can be made: never an answer without those rows);
- else with ``immutable=1`` (a file closed cleanly: nothing can change it through a
  read-only mount, so SQLite takes no locks and reads the file as it is).

Nothing else changes: a write on such a store is a :class:`~engrain.errors.StoreError`
saying the store is read-only before anything is tried (``SQLiteStore.read_only``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

#: Seconds a statement waits for another connection's lock (SQLite's busy timeout).
BUSY_TIMEOUT = 30.0


def on_read_only_mount(path: Path) -> bool:
    """Whether the filesystem holding ``path``'s directory is mounted read-only."""
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect(path: Path) -> tuple[sqlite3.Connection, bool]:
    """A connection to the file at ``path`` and whether it is read-only. Raises
    ``sqlite3.Error`` or ``OSError`` as the driver does."""
    if not (path.exists() and on_read_only_mount(path)):
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT
        )
        return db, False
    db = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False,
                         isolation_level=None, timeout=BUSY_TIMEOUT)  # fmt: skip
    db.execute("SELECT count(*) FROM sqlite_master").fetchall()  # fails now, not later
    return db, True


def read_only_uri(path: Path) -> str:
    """The URI that opens ``path``, on a read-only mount, for reading (see above)."""
    logged = Path(f"{path}-wal").exists()
    return f"file:{quote(str(path))}?{'mode=ro' if logged else 'immutable=1'}"
