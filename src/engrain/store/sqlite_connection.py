"""The SQLite store's connection: one per store, opened in WAL mode with its pragmas, under
one re-entrant lock; the migrations applied on it, its write transactions and its reads.

Every statement of a :class:`~engrain.store.sqlite.SQLiteStore` runs here under
``_lock``: :meth:`SQLiteConnection._transaction` is the only way a write begins (``BEGIN
IMMEDIATE``, so the file's write lock is held from the start: docs/concurrency.md), and
:meth:`SQLiteConnection._read` reads every row of a statement before it returns (an
unfinished statement would keep a read snapshot open on the connection). The layers above
(``sqlite_versions.py``, ``sqlite_saves.py``, ``sqlite_working.py``, the store) only ever
take this lock, never another, so they cannot deadlock between them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from engrain.errors import MigrationError, StoreError
from engrain.store import file_limit, sqlite_open, sqlite_schema
from engrain.store.base import pending_migrations
from engrain.store.checkpoint import Checkpointer, begin_log
from engrain.store.sqlite_deferred import StoreLock

_SQLITE_BUSY_SNAPSHOT = 517  # SQLITE_BUSY | (2 << 8)
_BEGIN_RETRIES = 3

#: Seconds the checkpointer's thread waits for the store to begin a restarted log
#: (``_begin_log``): a caller holding it longer commits first and begins the log itself.
LOG_BEGIN_WAIT = 0.05


class SQLiteConnection:
    """The store's file: its connection (``_db``), whether the filesystem let it open
    only read-only, the lock every statement runs under, and its checkpointer."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self._db, self.read_only = sqlite_open.connect(self.path)
            if not self.read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            # checkpoints run on the checkpointer's thread, not inside a caller's commit
            self._db.execute("PRAGMA wal_autocheckpoint=0")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open SQLite store at {self.path}: {exc}") from exc
        self._lock = StoreLock()  # commits deferred counts first (store/sqlite_deferred.py)
        self._durable = False  # the connection's synchronous is NORMAL (see _transaction)
        self._closed = False  # set by close(); the checkpointer's hook then begins nothing
        self._shut = False  # the connection closed (close()'s last step, under the lock)
        self._checkpoints = Checkpointer(self.path, on_restart=self._begin_log)

    # -- schema -------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, each in its own transaction; their names."""
        applied: list[str] = []
        with self._lock:
            try:
                if not self.read_only:
                    self._db.execute("CREATE TABLE IF NOT EXISTS migrations "
                                     "(name TEXT PRIMARY KEY, applied_at TEXT)")  # fmt: skip
                done = {r[0] for r in self._db.execute("SELECT name FROM migrations")}
            except sqlite3.Error as exc:
                raise MigrationError(f"cannot read migrations of {self.path}: {exc}") from exc
            for name, step in pending_migrations(done, sqlite_schema.MIGRATIONS, str(self.path)):
                if self.read_only:
                    raise MigrationError(
                        f"{self.path} is on a read-only filesystem and needs migration "
                        f"{name}: open it writable once"
                    )
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                    # another process opening the new file at once may have applied it
                    # since ``done`` was read: the write lock orders us after it
                    if self._db.execute("SELECT 1 FROM migrations WHERE name = ?",
                                        (name,)).fetchall():  # fmt: skip
                        self._db.execute("ROLLBACK")
                        continue
                    step(self._db)
                    self._db.execute("INSERT INTO migrations VALUES (?, datetime('now'))", (name,))
                    self._db.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise MigrationError(
                        f"migration {name} failed: {reason(exc, self.path)}"
                    ) from exc
                applied.append(name)
        return applied

    @contextmanager
    def _transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction under the store's lock: the write lock is
        taken first (waiting up to the busy timeout), so no read inside it is ever upgraded
        to a write (which SQLite refuses at once, SQLITE_BUSY_SNAPSHOT). Any sqlite3 error is
        a :class:`StoreError`.

        ``durable``: the commit syncs the log to the disk before it returns
        (``synchronous=FULL``), so what the caller is told was written survives a crash of
        the machine or its filesystem, not only of the process; otherwise (use counts,
        context records, promotions, caches and derived indexes: ``base.lazy_commit``) the
        log is synced at the next checkpoint or durable commit, as SQLite's ``NORMAL``."""
        with self._lock:
            if self.read_only:
                raise StoreError(f"{self.path} is on a read-only filesystem: nothing was written")
            if self._shut:  # a job that outlived close() (an index saved late): say so
                raise StoreError(f"{self.path} is closed: nothing was written")
            self._synchronous(durable)
            self._begin()
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(
                        f"write to {self.path} failed: {reason(exc, self.path)}"
                    ) from exc
                raise
            self._checkpoints.committed()

    def _synchronous(self, durable: bool) -> None:
        """Set the connection's ``synchronous`` for the next transaction (outside one,
        under the lock; a pragma only when it changes)."""
        if durable != self._durable:
            try:
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"cannot start a write on {self.path}: {reason(exc, self.path)}"
                ) from exc
            self._durable = durable

    def _begin_log(self) -> bool:
        """Begin the log the checkpointer has just restarted, on its thread, so no caller's
        commit waits for the log header's sync (``store/checkpoint.py``); whether it was.
        Not if a caller holds the store for :data:`LOG_BEGIN_WAIT` (its commit begins the
        log, as before), the store is closing, another process writes (busy: nothing
        written, nothing waited for), or the last commit here was durable: writes that
        sync anyway (an ingest's) gain nothing from it and would wait for the store while
        it syncs (LoCoMo replayed: writes' wall 3.1 → 3.8 s, docs/scale.md, session 24)."""
        if not self._lock.acquire(timeout=LOG_BEGIN_WAIT):
            return False
        try:
            if self._closed or self.read_only or self._durable:
                return False
            self._synchronous(False)
            begin_log(self._db)
            return True
        except (sqlite3.Error, StoreError):
            return False
        finally:
            self._lock.release()

    def _begin(self) -> None:
        # A stale read snapshot of this connection makes BEGIN IMMEDIATE fail at once with
        # SQLITE_BUSY_SNAPSHOT; every statement here is read to its end, so that should not
        # happen, but a retry costs nothing and the busy timeout covers the ordinary wait.
        for attempt in range(_BEGIN_RETRIES):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                busy = getattr(exc, "sqlite_errorcode", None) == _SQLITE_BUSY_SNAPSHOT
                if not busy or attempt == _BEGIN_RETRIES - 1:
                    raise StoreError(
                        f"cannot start a write on {self.path}: {reason(exc, self.path)}"
                    ) from exc
                self._rollback()

    def _rollback(self) -> None:
        # SQLite may have rolled back already (after an I/O error, say): nothing to undo
        with suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"read from {self.path} failed: {reason(exc)}") from exc


def reason(exc: sqlite3.Error, path: Path | None = None) -> str:
    """The driver's message, with what to do about the common one a user can fix. A write
    on a filesystem remounted read-only under the store fails as a bare "disk I/O error":
    given the store's ``path``, that cause is named, and so is a file of the store grown to
    the process's file-size limit (``file_limit.py``: the same bare message, for ``EFBIG``)."""
    if path is not None and sqlite_open.on_read_only_mount(path):
        return f"{exc} (the store's filesystem is mounted read-only)"
    if path is not None and _io_error(exc) and (limit := file_limit.limit_reached(path)):
        return f"{exc} ({limit})"
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY or "readonly" in str(exc):
        return f"{exc} (the file or its directory is read-only for this user)"
    return str(exc)


def _io_error(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is one of SQLite's I/O errors (``SQLITE_IOERR`` and its extended
    codes: "disk I/O error")."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "disk I/O error" in str(exc)
    return bool(code & 0xFF == sqlite3.SQLITE_IOERR)
