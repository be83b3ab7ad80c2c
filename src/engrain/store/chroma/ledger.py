"""Which users' Chroma records match the sidecar, and the lock that keeps them matching.

The sidecar (a SQLite file) is the source of truth; Chroma is an index of it. For each
collection and user the ledger keeps the sidecar revision Chroma was last brought up to. A
user whose revision differs is *dirty*: Chroma may miss or hold records the sidecar does
not, and the store repairs that user from the sidecar before searching.

A write marks its users dirty (committed) before it touches Chroma and marks them clean
only after Chroma holds its changes, so a write that dies halfway — a crash, a server that
goes away — leaves its users dirty, never wrongly clean. The ledger lives in the sidecar
file itself (its own tables, its own named migrations), so it travels with the rows.

Across processes, an advisory ``flock`` on a file beside the sidecar orders Chroma
changes: writers and repairs hold it exclusively from marking dirty to marking clean,
searches hold it shared, so no search reads Chroma while another process is halfway
through changing it.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from engrain.errors import MigrationError, StoreError
from engrain.store.base import pending_migrations


def _m001_synced(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE chroma_synced (
            collection TEXT NOT NULL,
            user_id TEXT NOT NULL,
            revision INTEGER NOT NULL,
            PRIMARY KEY (collection, user_id)
        )"""
    )


#: Named, ordered migrations of the ledger's tables. Append only.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("chroma_001_synced", _m001_synced),
]

#: Stands for "dirty" whatever the sidecar's revision is (revisions start at 1).
DIRTY = -1


class Ledger:
    """The sync ledger of one collection, in the sidecar file, and the cross-process lock."""

    def __init__(self, sidecar: Path, collection: str) -> None:
        self.sidecar = sidecar
        self.collection = collection
        try:
            self._db = sqlite3.connect(
                str(sidecar), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._lock_fd = os.open(f"{sidecar}.chroma-lock", os.O_RDWR | os.O_CREAT, 0o600)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the Chroma ledger in {sidecar}: {exc}") from exc
        self._migrate()

    def _migrate(self) -> None:
        try:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS chroma_migrations "
                "(name TEXT PRIMARY KEY, applied_at TEXT)"
            )
            done = {r[0] for r in self._db.execute("SELECT name FROM chroma_migrations")}
        except sqlite3.Error as exc:
            raise MigrationError(f"cannot read the Chroma ledger of {self.sidecar}: {exc}") from exc
        for name, step in pending_migrations(done, MIGRATIONS, str(self.sidecar)):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                step(self._db)
                self._db.execute(
                    "INSERT INTO chroma_migrations VALUES (?, datetime('now'))", (name,)
                )
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise MigrationError(f"migration {name} failed: {exc}") from exc

    def synced(self, user_id: str) -> int:
        """The sidecar revision Chroma holds for the user (0: never written, as the
        sidecar's own revision of a new user)."""
        try:
            rows = self._db.execute(
                "SELECT revision FROM chroma_synced WHERE collection = ? AND user_id = ?",
                (self.collection, user_id),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the Chroma ledger in {self.sidecar}: {exc}") from exc
        return int(rows[0][0]) if rows else 0

    def mark(self, revisions: Iterable[tuple[str, int]]) -> None:
        """Record, in one transaction, that Chroma holds each user at that revision
        (:data:`DIRTY`: at none)."""
        rows = [(self.collection, user, revision) for user, revision in revisions]
        if not rows:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO chroma_synced VALUES (?, ?, ?) "
                "ON CONFLICT (collection, user_id) DO UPDATE SET revision = excluded.revision",
                rows,
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise StoreError(f"cannot write the Chroma ledger in {self.sidecar}: {exc}") from exc

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the cross-process lock alone (writes and repairs)."""
        with self._flock(fcntl.LOCK_EX):
            yield

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the cross-process lock with other readers (searches)."""
        with self._flock(fcntl.LOCK_SH):
            yield

    @contextmanager
    def _flock(self, mode: int) -> Iterator[None]:
        try:
            fcntl.flock(self._lock_fd, mode)
        except OSError as exc:
            raise StoreError(f"cannot lock {self.sidecar}.chroma-lock: {exc}") from exc
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the ledger's connection and lock file."""
        with suppress(sqlite3.Error):
            self._db.close()
        with suppress(OSError):
            os.close(self._lock_fd)
