"""The embedded default: one SQLite file in WAL mode, vectors as float32 BLOBs.

This Python's ``sqlite3`` cannot load extensions, so vectors are searched in-process with
numpy: each user's vectors are kept as one contiguous matrix, built on first use and rebuilt
only after a write that touches that user (or after another process commits, which
``PRAGMA data_version`` reveals). Exact search over 10,000 × 384 is well under a millisecond.

A user with many vectors (``ann_min_vectors``, 20,000 by default) is searched through an
approximate index once it is built (``store/ann.py``, docs/scale.md), kept in the
``derived_indexes`` table with the BM25 index of users with 5,000+ memories, both checked
against the working set when read.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from engrain import envvars
from engrain.errors import EngrainError, KeyChangedError, MigrationError, StoreError
from engrain.model import Kind, Memory, MemoryFields, MemoryType, Provenance, Vector, as_utc
from engrain.store import (
    ann_kinds,
    built,
    columns,
    derived_blobs,
    heap,
    image_refresh,
    lexical_file,
    sqlite_load,
    sqlite_open,
    sqlite_stamps,
    sqlite_tokens,
    sqlite_uses,
)
from engrain.store.ann import ANN_MIN_VECTORS, IndexSlot, Stash
from engrain.store.ann_stamp import IndexStamp
from engrain.store.arrays import HeldTable, RowVectors
from engrain.store.base import (
    ALL,
    LAZY_NAMESPACES,
    MEMORY_COLUMNS,
    KeyClaim,
    KeyRecord,
    MemoryFilter,
    Patch,
    State,
    counted,
    lazy_commit,
    pending_migrations,
)
from engrain.store.cache import Stamped, UserCache
from engrain.store.checkpoint import Checkpointer, begin_log
from engrain.store.columns import Stamp, Strings
from engrain.store.reads import Begin, in_turn, lazy, overlapped
from engrain.store.texts import ReadTexts

_COLUMNS = MEMORY_COLUMNS
#: Users whose memories stay cached in process (least recently used are dropped first).
CACHED_USERS = 64
_SQLITE_BUSY_SNAPSHOT = 517  # SQLITE_BUSY | (2 << 8)
_BEGIN_RETRIES = 3
#: Whole memories (the row and its uses): filter with ``m.user_id``, ``m.id``.
_SELECT = f"SELECT {sqlite_uses.SELECT_LIST} FROM {sqlite_uses.JOINED}"
#: The columns a ``memories`` row stores since 006 (the uses are in ``uses``).
_ROW_COLUMNS = sqlite_uses.ROW_COLUMNS
#: Seconds :meth:`SQLiteStore.close` waits for each derived index being saved.
SAVE_WAIT = 60.0
#: A working set whose rows were patched saves its image again at most this often (and
#: when the store closes): at 100,000 memories a save costs ~0.5 s of CPU off the caller.
IMAGE_REFRESH_SECONDS = 60.0
#: The share of a process's time one user's image refreshes may take: the next refresh
#: waits at least the last one's duration divided by this (a 1 s refresh at 100,000
#: memories: every 60 s; a 10 s one at 1,000,000: every 500 s), so a large user's
#: background re-encoding cannot hold the interpreter for a tenth of every minute.
IMAGE_REFRESH_SHARE = 0.02

log = logging.getLogger(__name__)
T = TypeVar("T")


def _m001_initial(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE memories (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            project TEXT,
            content TEXT NOT NULL,
            memory_type TEXT NOT NULL,
            kind TEXT NOT NULL,
            domains TEXT NOT NULL DEFAULT '[]',
            session_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            event_at TEXT,
            key TEXT,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            usefulness REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            pinned INTEGER NOT NULL DEFAULT 0,
            muted INTEGER NOT NULL DEFAULT 0,
            promoted_at TEXT,
            compressed INTEGER NOT NULL DEFAULT 0,
            compression_source INTEGER NOT NULL DEFAULT 0,
            source_session_id TEXT,
            provenance TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL,
            embedding BLOB
        )"""
    )
    db.execute("CREATE INDEX memories_user_updated ON memories (user_id, updated_at)")
    db.execute("CREATE INDEX memories_user_key ON memories (user_id, key)")
    db.execute("CREATE INDEX memories_user_session ON memories (user_id, session_id)")
    db.execute(
        """CREATE TABLE embedding_cache (
            model_id TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (model_id, content_hash)
        )"""
    )


def _m002_user_scoped_ids(db: sqlite3.Connection) -> None:
    # 001 keyed rows by id alone, so one user's upsert of an id replaced another user's
    # memory. Ids are per user, as in the protocol (and MemoryStore); SQLite cannot change
    # a primary key in place, so the table is rebuilt with rows kept in rowid order.
    db.execute(
        """CREATE TABLE memories_002 (
            id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            project TEXT,
            content TEXT NOT NULL,
            memory_type TEXT NOT NULL,
            kind TEXT NOT NULL,
            domains TEXT NOT NULL DEFAULT '[]',
            session_id TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            event_at TEXT,
            key TEXT,
            importance REAL NOT NULL,
            confidence REAL NOT NULL,
            usefulness REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            pinned INTEGER NOT NULL DEFAULT 0,
            muted INTEGER NOT NULL DEFAULT 0,
            promoted_at TEXT,
            compressed INTEGER NOT NULL DEFAULT 0,
            compression_source INTEGER NOT NULL DEFAULT 0,
            source_session_id TEXT,
            provenance TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL,
            embedding BLOB,
            PRIMARY KEY (user_id, id)
        )"""
    )
    columns = ", ".join(_COLUMNS[:26])  # the columns of 001
    db.execute(
        f"INSERT INTO memories_002 ({columns}) SELECT {columns} FROM memories ORDER BY rowid"
    )
    db.execute("DROP TABLE memories")
    db.execute("ALTER TABLE memories_002 RENAME TO memories")
    db.execute("CREATE INDEX memories_user_updated ON memories (user_id, updated_at)")
    db.execute("CREATE INDEX memories_user_key ON memories (user_id, key)")
    db.execute("CREATE INDEX memories_user_session ON memories (user_id, session_id)")


def _m003_corrections_and_state(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE memories ADD COLUMN superseded_by TEXT")
    db.execute(
        """CREATE TABLE state (
            user_id TEXT NOT NULL,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (user_id, namespace, key)
        )"""
    )
    db.execute("CREATE TABLE revisions (user_id TEXT PRIMARY KEY, revision INTEGER NOT NULL)")


def _m004_api_keys(db: sqlite3.Connection) -> None:
    # Store-wide, not per user: one key may act for several users. The digest is unique
    # and indexed: a request's key is found by the hash of the secret it presents.
    db.execute(
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            digest TEXT NOT NULL UNIQUE,
            name TEXT,
            users TEXT NOT NULL DEFAULT '[]',
            projects TEXT NOT NULL DEFAULT '[]',
            admin INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )"""
    )


def _m005_derived_indexes(db: sqlite3.Connection) -> None:
    # Indexes derived from a user's rows, kept between processes (a large user's
    # approximate vector index and BM25 index, store/ann.py and store/lexical_file.py):
    # written in one transaction, so never torn; checked against the rows when read.
    db.execute(
        """CREATE TABLE derived_indexes (
            user_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            data BLOB NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (user_id, kind)
        )"""
    )


#: Named, ordered migrations. Append only; never edit one that has shipped.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_user_scoped_ids", _m002_user_scoped_ids),
    ("003_corrections_and_state", _m003_corrections_and_state),
    ("004_api_keys", _m004_api_keys),
    ("005_derived_indexes", _m005_derived_indexes),
    ("006_uses", sqlite_uses.migrate),
    ("007_content_tokens", sqlite_tokens.migrate),
]


def ann_threshold(environ: Mapping[str, str] | None = None) -> int | None:
    """The vector count from which a user is searched through the approximate index:
    ``ENGRAIN_ANN_MIN_VECTORS`` (a count, or ``off``) or :data:`ANN_MIN_VECTORS`; any other
    value raises :class:`~engrain.errors.ConfigError` (:mod:`engrain.envvars`)."""
    value = envvars.count("ENGRAIN_ANN_MIN_VECTORS", environ)
    if value is envvars.OFF:
        return None
    return value if isinstance(value, int) else ANN_MIN_VECTORS


#: Seconds the checkpointer's thread waits for the store to begin a restarted log
#: (``_begin_log``): a caller holding it longer commits first and begins the log itself.
LOG_BEGIN_WAIT = 0.05


class SQLiteStore:
    """The default store: one SQLite file, WAL journal, named migrations.

    ``ann_min_vectors``: users with at least this many vectors are searched through an
    approximate index (``None``: always exact; ``"auto"``: :func:`ann_threshold`).
    ``ann_background``: build and patch that index on a background thread (searches stay
    exact until it is ready) rather than inside the call that needs it."""

    def __init__(
        self,
        path: Path | str,
        *,
        ann_min_vectors: int | Literal["auto"] | None = "auto",
        ann_background: bool = True,
    ) -> None:
        self.path = Path(path)
        self._ann_min = ann_threshold() if ann_min_vectors == "auto" else ann_min_vectors
        self._ann_background = ann_background
        self._slots: OrderedDict[str, IndexSlot] = OrderedDict()
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
        self._lock = threading.RLock()
        self._durable = False  # the connection's synchronous is NORMAL (see _transaction)
        self._checkpoints = Checkpointer(self.path, on_restart=self._begin_log)
        self._caches: OrderedDict[str, UserCache] = OrderedDict()
        self._data_version = -1
        self._saves: list[threading.Thread] = []
        #: Users whose working set has rows patched since it was loaded (its image is
        #: stale), users with rows inserted, replaced or deleted since (the image cannot be
        #: saved from the working set), and when each image was last refreshed.
        self._stale_images: set[str] = set()
        self._reshaped: set[str] = set()
        self._refreshed: dict[str, float] = {}
        self._refresh_cost: dict[str, float] = {}  # seconds the user's last refresh took
        #: The user's revision each cached working set holds (read with it, or left by
        #: this process's own write), and the ``data_version`` it was last known current
        #: at: ``_current`` keeps a working set while its revision holds.
        self._cache_revisions: dict[str, int] = {}
        self._verified: dict[str, int] = {}
        self._closed = False
        self.migrate()
        if self.read_only:
            log.warning("%s is on a read-only filesystem: opened read-only; context() "
                        "counts no uses and records no context, and writes raise "
                        "StoreError", self.path)  # fmt: skip

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
            for name, step in pending_migrations(done, MIGRATIONS, str(self.path)):
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
                    raise MigrationError(f"migration {name} failed: {_reason(exc)}") from exc
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
            self._synchronous(durable)
            self._begin()
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(
                        f"write to {self.path} failed: {_reason(exc, self.path)}"
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
                raise StoreError(f"cannot start a write on {self.path}: {_reason(exc)}") from exc
            self._durable = durable

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
                        f"cannot start a write on {self.path}: {_reason(exc, self.path)}"
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
                raise StoreError(f"read from {self.path} failed: {_reason(exc)}") from exc

    # -- protocol -----------------------------------------------------------------------

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
        patches: Sequence[Patch] = (),
        claims: Sequence[KeyClaim] = (),
    ) -> None:
        """The claims checked, then upserts, patches of the rows that exist (read and
        rewritten inside the transaction), deletes and state, in one ``BEGIN IMMEDIATE``
        transaction: it holds the file's write lock from its start, so the claims are
        checked against every other process's last commit and no write slips in after."""
        if not upserts and not deletes and not state and not patches:
            return
        upserts = [counted(m) for m in upserts]
        rows = [sqlite_uses.stored(_to_row(m)) for m in upserts]
        documents = [(s, None if s.change else s.encoded()) for s in state]
        staged = {(m.user_id, m.id): m for m in upserts}
        removed = {(m.user_id, m.id) for m in deletes}
        now = _dt(datetime.now(UTC))
        placeholders = ", ".join("?" for _ in _ROW_COLUMNS)
        with self._lock:
            try:
                durable = not lazy_commit(upserts, deletes, state, patches)
                with self._transaction(durable=durable) as db:
                    # the working sets checked at this version hold the revisions this
                    # write leaves (no other process committed since)
                    version = db.execute("PRAGMA data_version").fetchall()[0][0]
                    _check_claims(db, claims)
                    db.executemany(
                        f"INSERT OR REPLACE INTO memories ({', '.join(_ROW_COLUMNS)}) "
                        f"VALUES ({placeholders})",
                        rows,
                    )
                    sqlite_uses.put(db, upserts, _dt)
                    patched = self._patch(db, patches, staged)
                    db.executemany(
                        "DELETE FROM memories WHERE user_id = ? AND id = ?", sorted(removed)
                    )
                    sqlite_uses.delete(db, sorted(removed))
                    changed = sorted({u for u, _ in staged} | {u for u, _ in patched} |
                                     {u for u, _ in removed})  # fmt: skip
                    db.executemany(
                        "INSERT INTO revisions VALUES (?, 1) "
                        "ON CONFLICT (user_id) DO UPDATE SET revision = revision + 1",
                        [(u,) for u in changed],
                    )
                    bumped = self._revisions_of(db, changed)
                    _write_state(db, documents, now)
            except KeyChangedError:
                raise  # nothing was written: the caches still match the file
            except BaseException:
                # the caches may no longer match the file: reload them on next use
                for user in (
                    {u for u, _ in staged} | {p.user_id for p in patches} | {u for u, _ in removed}
                ):
                    self._caches.pop(user, None)
                raise
            self._sync_version()
            self._apply_to_caches({**staged, **patched}, removed)
            for user_id, revision in bumped.items():
                if self._verified.get(user_id) == version:
                    self._cache_revisions[user_id] = revision
            self._note_image_writes({u for u, _ in staged} | {u for u, _ in removed},
                                    {u for u, _ in patched})  # fmt: skip

    def _patch(
        self,
        db: sqlite3.Connection,
        patches: Sequence[Patch],
        staged: dict[tuple[str, str], Memory],
    ) -> dict[tuple[str, str], Memory]:
        """Apply ``patches`` inside the open transaction to the rows as they are now (or as
        this write's upserts left them); the rewritten memories by key. Missing rows are
        skipped: nothing is inserted."""
        patched: dict[tuple[str, str], Memory] = {}
        assignments = ", ".join(f"{c} = ?" for c in _ROW_COLUMNS[2:])
        for patch in patches:
            current = patched.get(patch.where) or staged.get(patch.where)
            if current is None:
                found = db.execute(
                    f"{_SELECT} WHERE m.user_id = ? AND m.id = ?", patch.where
                ).fetchall()
                current = _from_row(found[0]) if found else None
            if current is None:
                continue
            memory = counted(patch.apply(current))
            row = sqlite_uses.stored(_to_row(memory))
            if (memory.access_count, memory.last_accessed_at) != (
                current.access_count, current.last_accessed_at
            ):  # fmt: skip
                sqlite_uses.put(db, [memory], _dt)
            # UPDATE, not INSERT OR REPLACE: the row keeps its rowid, hence its place
            db.execute(
                f"UPDATE memories SET {assignments} WHERE user_id = ? AND id = ?",
                (*row[2:], memory.user_id, memory.id),
            )
            patched[patch.where] = memory
        return patched

    def _apply_to_caches(
        self, written: dict[tuple[str, str], Memory], removed: set[tuple[str, str]]
    ) -> None:
        """Bring the cached working sets in line with a write just committed (under the
        lock, so caches change in commit order)."""
        by_user: dict[str, list[Memory]] = {}
        for (user, memory_id), memory in written.items():
            if (user, memory_id) not in removed:
                by_user.setdefault(user, []).append(memory)
        for user, memories in by_user.items():
            if user in self._caches:
                self._caches[user].upsert(memories)
        gone: dict[str, list[str]] = {}
        for user, memory_id in removed:
            gone.setdefault(user, []).append(memory_id)
        for user, memory_ids in gone.items():
            if user in self._caches:
                self._caches[user].delete(memory_ids)

    def cached(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """These memories from the user's working set (loaded or brought up to the store's
        revision first), in the order given, unknown ids skipped: no SQL per call, for a
        caller that resolves hundreds of ids per search (the Chroma store's hits)."""
        return self._cache(user_id).get(ids)

    def working_set(self, user_id: str) -> Mapping[str, Memory]:
        """The user's working set (brought up to the store's revision and other processes'
        commits first) by id: an immutable mapping, replaced by a new one on every change,
        counted uses included, so comparing identities tells a caller keeping per-memory
        data (the inspector's used order) whether anything changed since it looked."""
        return self._cache(user_id).snapshot.rows

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        if not ids:
            return []
        found: dict[str, Memory] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ", ".join("?" for _ in part)
            for row in self._read(
                f"{_SELECT} WHERE m.user_id = ? AND m.id IN ({marks})", (user_id, *part)
            ):
                memory = _from_row(row)
                found[memory.id] = memory
        return [found[i] for i in ids if i in found]

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        return self._cache(user_id).query(flt, limit, offset)

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        return self._cache(user_id).search(vector, k, flt)

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, from one product over the working set."""
        return self._cache(user_id).search_many(vector, searches)

    def search_found(
        self,
        user_id: str,
        vector: Vector,
        searches: Sequence[tuple[int, MemoryFilter]],
        begin: Begin | None = None,
    ) -> list[list[tuple[MemoryFields, float]]]:
        """:meth:`search_many`, each match as its fields (``store/found.py``: the gate
        builds the memories it shows); ``begin``: how the learnings' index walk is begun
        beside the pool's (``store/reads.py``)."""
        return self._cache(user_id).search_found(vector, searches, begin)

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        return self._cache(user_id).lexical_search(text, k, flt)

    def lexical_found(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[MemoryFields, float]]:
        """:meth:`lexical_search`, each match as its fields (``store/found.py``)."""
        return self._cache(user_id).lexical_found(text, k, flt)

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """An atomic ``access_count + 1`` per occurrence of each id; a deleted id matches no
        row and is not brought back."""
        self.record_uses(user_id, ids, at)

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """:meth:`record_access` and the ``state`` documents (written or, with a ``None``
        value, deleted as :meth:`write` does) in one transaction: a ``context()``'s counted
        uses and its record (``recall/uses.py``), one commit instead of two, and neither
        without the other. A store opened read-only counts nothing (a ``recall()`` on a
        read-only mount answers, as ``context()`` does: ``store/sqlite_open.py``)."""
        if (not ids and not state) or self.read_only:
            return
        counts = Counter(ids)
        documents = [(s, s.encoded()) for s in state]
        now = _dt(datetime.now(UTC))
        with self._lock:
            with self._transaction(
                durable=any(s.namespace not in LAZY_NAMESPACES for s in state)
            ) as db:
                _write_state(db, documents, now)
                sqlite_uses.count(db, user_id, counts, _dt(at))
            self._sync_version()
            if counts and user_id in self._caches:
                self._caches[user_id].touch(ids, at)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        return self._cache(user_id).count(flt)

    def centroid(self, user_id: str) -> Vector | None:
        return self._cache(user_id).centroid()

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        for start in range(0, len(hashes), 500):
            part = list(hashes[start : start + 500])
            marks = ", ".join("?" for _ in part)
            for h, blob in self._read(
                "SELECT content_hash, vector FROM embedding_cache "
                f"WHERE model_id = ? AND content_hash IN ({marks})",
                (model_id, *part),
            ):
                found[h] = np.frombuffer(blob, dtype=np.float32).copy()
        return found

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        if not vectors:
            return
        with self._transaction(durable=False) as db:
            db.executemany(
                "INSERT OR IGNORE INTO embedding_cache VALUES (?, ?, ?)",
                [
                    (model_id, h, np.asarray(v, dtype=np.float32).tobytes())
                    for h, v in vectors.items()
                ],
            )

    def revision(self, user_id: str) -> int:
        rows = self._read("SELECT revision FROM revisions WHERE user_id = ?", (user_id,))
        return int(rows[0][0]) if rows else 0

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        rows = self._read(
            "SELECT value FROM state WHERE user_id = ? AND namespace = ? AND key = ?",
            (user_id, namespace, key),
        )
        return dict(json.loads(rows[0][0])) if rows else None

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """Every state document of the user (in ``namespace``, or in all), sorted by
        namespace and key."""
        rows = self._read(
            "SELECT namespace, key, value FROM state WHERE user_id = ? "
            "AND (? IS NULL OR namespace = ?) ORDER BY namespace, key",
            (user_id, namespace, namespace),
        )
        return [State(user_id, ns, k, json.loads(v)) for ns, k, v in rows]

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM state WHERE user_id = ? AND namespace = ? AND updated_at < ?",
                (user_id, namespace, _dt(before)),
            )
            return int(cursor.rowcount)

    def users(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT user_id FROM memories ORDER BY 1")]

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` (nothing written) if its id is taken."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                _key_row(record),
            )
            return cursor.rowcount == 1

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest``, read from the file (so another
        process's revocation is seen at once), or ``None``."""
        rows = self._read(f"{_SELECT_KEYS} WHERE digest = ?", (digest,))
        return _key_from_row(rows[0]) if rows else None

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first (ties by id)."""
        return [_key_from_row(r) for r in self._read(f"{_SELECT_KEYS} ORDER BY created_at, id")]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked (the first revocation time is kept); ``False`` if unknown."""
        with self._transaction() as db:
            db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (_dt(at), key_id),
            )
            found = db.execute("SELECT 1 FROM api_keys WHERE id = ?", (key_id,)).fetchall()
            return bool(found)

    def wait_for_index(self, user_id: str, timeout: float | None = None) -> bool:
        """Start the user's approximate index if the user is large enough and wait (up to
        ``timeout`` seconds) until searches use it; whether they do (benchmarks and tests:
        a caller never needs to, searches are exact until then)."""
        return self._cache(user_id).wait_for_index(timeout)

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

    def close(self) -> None:
        """Wait for derived indexes being saved (at most :data:`SAVE_WAIT` seconds each),
        then close the file."""
        with self._lock:
            for user_id in self._stale_images & set(self._caches) - self._reshaped:
                self._later(partial(self._refresh_image, user_id), "engrain-columns")
            for user_id in set(self._caches) & set(self._slots) - self._reshaped:
                self._later(partial(self._stamp_indexes, user_id), "engrain-stamps")
            self._closed = True
            saves = list(self._saves)
        for thread in saves:
            thread.join(SAVE_WAIT)
        with self._lock:
            for slot in self._slots.values():
                slot.close()
            self._checkpoints.close()
            self._db.close()

    # -- the per-user working set -------------------------------------------------------

    def _sync_version(self) -> None:
        """Note the file's ``data_version``: it changes when another connection commits (our
        own commits are applied to the caches directly). A working set is checked against
        it when next used (:meth:`_current`). Called under the lock."""
        # fetchall, not fetchone: a statement left unfinished keeps a read snapshot open on
        # the connection, and the next BEGIN IMMEDIATE then fails at once (BUSY_SNAPSHOT)
        # as soon as another process has committed
        self._data_version = self._read("PRAGMA data_version")[0][0]

    def _current(self, user_id: str) -> UserCache | None:
        """The user's cached working set if it holds what the file holds now, else
        ``None`` (dropped: reloaded by the caller). Called under the lock.

        Checked only when another connection has committed since it was last checked: it
        is kept if the user's revision is still the one it was read or last written at
        (every write of the user's rows bumps it but counted uses, whose counts are then
        read again: the user's rows of the narrow ``uses``, ~0.16 s at 100,000 with their
        mapping to rows, instead of a ~0.7 s reload). Every read here is at or after the
        ``data_version`` it is marked checked at, so a commit landing meanwhile is checked
        next time. Users not used are not checked at all."""
        self._sync_version()
        cache = self._caches.get(user_id)
        if cache is None:
            return None
        version = self._data_version
        if self._verified.get(user_id) == version:
            return cache
        revision = self._revisions_of(self._db, [user_id], read=self._read).get(user_id, 0)
        if revision == self._cache_revisions.get(user_id) and cache.recount(
            sqlite_uses.read(self._read, user_id)
        ):
            self._verified[user_id] = version
            return cache
        del self._caches[user_id]
        return None

    @staticmethod
    def _revisions_of(
        db: sqlite3.Connection,
        users: Sequence[str],
        read: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]] | None = None,
    ) -> dict[str, int]:
        """The revision of each of ``users`` that has one (in the open transaction of
        ``db``, or through ``read``)."""
        out: dict[str, int] = {}
        for start in range(0, len(users), _IN_CHUNK):
            part = list(users[start : start + _IN_CHUNK])
            sql = (f"SELECT user_id, revision FROM revisions WHERE user_id IN "
                   f"({', '.join('?' for _ in part)})")  # fmt: skip
            rows = read(sql, part) if read is not None else db.execute(sql, part).fetchall()
            out.update((str(u), int(r)) for u, r in rows)
        return out

    def _cache(self, user_id: str) -> UserCache:
        """The user's working set (loaded on first use), current as of this call. The store
        lock covers only finding or loading it; the cache itself is safe to read unlocked."""
        with self._lock:
            cache = self._current(user_id)
            if cache is None:
                version = self._data_version
                cache = self._load(user_id)
                self._caches[user_id] = cache
                self._verified[user_id] = version
                while len(self._caches) > CACHED_USERS:
                    self._caches.popitem(last=False)
            else:
                self._caches.move_to_end(user_id)
            return cache

    def _load(self, user_id: str) -> UserCache:
        """The user's working set read from the file in one read transaction (a
        consistent snapshot): from the saved image of its columns if it matches the rows,
        else from the rows (``store/sqlite_load.py``), saving the image of a large user on
        another thread. Called under the lock."""
        slot = self._slot(user_id)
        loaded, held_by, lexical_saved = self._read_working_set(user_id, slot)
        if loaded.save is not None:
            save, stash = loaded.save, self._stash(user_id, "columns")
            stash.later(lambda: stash.write(save()))
        self._cache_revisions[user_id] = loaded.revision
        self._stale_images.discard(user_id)
        self._reshaped.discard(user_id)
        self._refreshed[user_id] = time.monotonic()
        cache = UserCache(
            loaded.memories or (), table=loaded.table, ann=slot,
            lexical_stash=self._stash(user_id, "bm25"), row_vectors=self._row_vectors(user_id),
            held_by=held_by, lexical_saved=lexical_saved,
        )  # fmt: skip
        if len(cache) >= columns.PERSIST_MIN_ROWS:
            heap.release()  # the rows' blobs read and dropped: hand their pages back
        return cache

    def _read_working_set(
        self, user_id: str, slot: IndexSlot | None
    ) -> tuple[sqlite_load.Loaded, Stamped | None, Callable[[], lexical_file.Saved | None] | None]:
        """The user's rows read in one read transaction, and the saved indexes adopted if
        their stamps let the rows be read without vectors (``store/ann_stamp.py``); read
        again with the vectors if those indexes are not the copies stamped (another process
        saved them since). The copies stamped, and the saved BM25 index, are loaded on
        another core while the rows are read (the third item gives that BM25 copy); each
        is checked as before (against its stamp; the BM25 copy against the texts loaded):
        what is read outside the transaction is never trusted unchecked. Called under the
        lock."""
        stamps: dict[str, IndexStamp] = {}
        read = partial(self._stash_bytes, user_id)
        named: list[Callable[[], sqlite_stamps.Named]] = []
        lexical: list[Callable[[], lexical_file.Saved | None]] = []

        def held(stamp: Stamp) -> int | None:
            if slot is None or slot.index is not None:
                return None
            stamps.update(sqlite_stamps.read(self._db, user_id, stamp))
            first = stamps.get(sqlite_stamps.FIRST)
            if first is None:
                return None
            bm25 = self._stash(user_id, "bm25").read
            indexes, saved = in_turn(  # one after the other: the lower peak of memory
                self._beside, sqlite_stamps.loader(dict(stamps), slot, read),
                lambda: lexical_file.parsed(bm25()),
            )  # fmt: skip
            named.append(indexes)
            lexical.append(saved)
            return first.dim

        for stamped in (True, False):
            try:
                self._db.execute("BEGIN")
                try:
                    loaded = sqlite_load.read(
                        self._db, user_id, self._stash(user_id, "columns").read, _from_row,
                        partial(self._row_texts, user_id), held if stamped else None,
                    )  # fmt: skip
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"read from {self.path} failed: {_reason(exc)}") from exc
            lexical_saved = lexical[0] if lexical else None
            if not isinstance(loaded.table, HeldTable):
                return loaded, None, lexical_saved
            assert slot is not None and named
            held_by = sqlite_stamps.adopted(loaded.table, stamps, slot, named[0])
            if held_by is not None:
                return loaded, held_by, lexical_saved
        raise AssertionError("a read without stamps reads the vectors")

    def _beside(self, load: Callable[[], T]) -> Callable[[], T]:
        """``load`` begun on another core (``store/reads.py``: run by the caller if no pool
        thread takes it up first), if it reads the file apart from the store's connection;
        else run when its result is asked for (an in-memory store's reads take the lock
        the caller holds)."""
        if str(self.path) != ":memory:":
            return overlapped(load)
        return lazy(load)

    def _stash_bytes(self, user_id: str, kind: str) -> bytes | None:
        """The bytes saved as the user's derived index ``kind`` (``None``: none)."""
        return self._stash(user_id, kind).read()

    def _stamp_indexes(self, user_id: str) -> None:
        """Stamp the user's saved indexes with the revision the file holds, if this
        process's working set is current at it and its record says an index holds every
        row it should, unchanged since saved or loaded (``store/ann_stamp.py``): checked
        again in the transaction that writes the stamps. Runs on a saving thread."""
        with self._lock:
            # not brought up to date (a recount at a million rows takes seconds): a working
            # set behind the file's revision is not stamped, checked below
            cache = self._caches.get(user_id)
            slot = self._slots.get(user_id)
            revision = self._cache_revisions.get(user_id)
            if cache is None or slot is None or revision is None or user_id in self._reshaped:
                return
            snapshot, held = cache.held_indexes()
            if not held:
                return
            names = tuple(r[0] for r in self._read("SELECT name FROM migrations ORDER BY name"))
            stamps = sqlite_stamps.made(snapshot, held, slot, Stamp(revision, names))
            if not stamps:
                return
            with self._transaction(durable=False) as db:
                now = self._revisions_of(db, [user_id]).get(user_id, 0)
                if now != revision or any(index.saved is None for _, index in held):
                    return  # written since, or patched: the stamps would vouch wrongly
                sqlite_stamps.write(db, user_id, stamps, datetime.now(UTC).isoformat())

    def _note_image_writes(self, reshaped: set[str], patched: set[str]) -> None:
        """Record a committed write's effect on the users' saved images (under the lock):
        rows inserted, replaced or deleted (``reshaped``: they get new rowids, so the image
        is saved again only by the next process that reads the rows), or rows patched in
        place (the image is saved from the working set, on another thread, at most every
        :meth:`_refresh_interval` seconds and when the store closes)."""
        self._reshaped |= reshaped
        now = time.monotonic()
        for user_id in patched - self._reshaped:
            cache = self._caches.get(user_id)
            if cache is None or len(cache) < columns.PERSIST_MIN_ROWS:
                continue
            self._stale_images.add(user_id)
            if now - self._refreshed.get(user_id, now) >= self._refresh_interval(user_id):
                self._refreshed[user_id] = now
                self._later(partial(self._refresh_image, user_id), "engrain-columns")

    def _refresh_interval(self, user_id: str) -> float:
        """Seconds between two refreshes of the user's image: :data:`IMAGE_REFRESH_SECONDS`,
        or longer when the last one took more than :data:`IMAGE_REFRESH_SHARE` of that."""
        cost = self._refresh_cost.get(user_id, 0.0)
        return max(IMAGE_REFRESH_SECONDS, cost / IMAGE_REFRESH_SHARE)

    def _refresh_image(self, user_id: str) -> None:
        """Save the user's image from this process's working set if that holds what the
        rows hold: only rows of the loaded image patched since (the rowids are the
        image's), and no other process has committed since the working set was current
        (``PRAGMA data_version``, checked again in the transaction that writes it); the
        image is stamped with the revision read at that point. Otherwise nothing is saved:
        the next process reads the rows, as before. Runs on a saving thread."""
        with self._lock:
            cache = self._current(user_id)  # another process's write drops it
            if cache is None or user_id in self._reshaped or user_id not in self._stale_images:
                return
            arrays = cache.snapshot.arrays
            seen = self._data_version
            stamp = Stamp(self.revision(user_id),
                          tuple(r[0] for r in self._read("SELECT name FROM migrations "
                                                         "ORDER BY name")))  # fmt: skip
        if arrays is None:
            return
        started = time.monotonic()
        table = image_refresh.patched_columns(arrays.rows, arrays.ids, _to_row)
        if table is None:
            return
        data = columns.dump(table, stamp)
        with self._lock:
            self._refresh_cost[user_id] = time.monotonic() - started
        with self._transaction(durable=False) as db:
            now = db.execute("PRAGMA data_version").fetchall()[0][0]
            current = self._caches.get(user_id)
            rows = None if current is None or current.snapshot.arrays is None \
                else current.snapshot.arrays.rows  # fmt: skip
            if now != seen or current is not cache or rows is None \
                    or not image_refresh.same_rows(arrays.rows, rows):  # fmt: skip
                return  # written since: this image would be stale or wrong
            derived_blobs.write(db, user_id, "columns", data, datetime.now(UTC).isoformat())
            self._stale_images.discard(user_id)

    def _slot(self, user_id: str) -> IndexSlot | None:
        """The user's approximate index in this process (kept when the working set is
        dropped after another process's commit: it is checked against the new one)."""
        if self._ann_min is None:
            return None
        slot = self._slots.get(user_id)
        if slot is None:
            part = IndexSlot(
                self._stash(user_id, ann_kinds.STASH_KIND), self._ann_min, self._ann_background
            )  # the learnings' (store/ann_kinds.py)
            slot = IndexSlot(self._stash(user_id, "usearch"), self._ann_min, self._ann_background,
                             part)  # fmt: skip
            self._slots[user_id] = slot
            while len(self._slots) > CACHED_USERS:
                self._slots.popitem(last=False)[1].close()
        else:
            self._slots.move_to_end(user_id)
        return slot

    def _row_vectors(self, user_id: str) -> RowVectors:
        """Reads a loaded working set's vectors from the user's rows by rowid (an indexed
        user keeps none in memory: ``store/cache.py``). A row counts only if it still holds
        the memory id the working set has for it, with a vector of the size asked: a rowid
        freed by a delete and taken by another row is never read as this memory's."""

        def read(
            rowids: npt.NDArray[np.int64], ids: Sequence[str], dim: int, *, texts: bool = False
        ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32], list[str | None] | None]:
            listed = rowids.tolist()
            vectors = np.zeros((len(listed), dim), dtype=np.float32)
            same = np.zeros(len(listed), dtype=bool)
            content: list[str | None] | None = [None] * len(listed) if texts else None
            where: dict[int, list[int]] = {}  # a rowid's positions in ``rowids``
            for position, rowid in enumerate(listed):
                found_at = where.get(rowid)
                if found_at is None:
                    where[rowid] = [position]
                else:
                    found_at.append(position)
            unique = list(where)
            columns = "rowid, id, embedding, content" if texts else "rowid, id, embedding"
            size = 4 * dim
            for start in range(0, len(unique), _IN_CHUNK):
                part = unique[start : start + _IN_CHUNK]
                at: list[int] = []
                blobs: list[bytes] = []
                for row in self._read(
                    f"SELECT {columns} FROM memories WHERE +user_id = ? AND rowid IN "
                    f"({', '.join('?' for _ in part)})",
                    (user_id, *part),
                ):
                    blob = row[2]
                    if blob is None or len(blob) != size:
                        continue
                    for i in where[row[0]]:
                        at.append(i)
                        blobs.append(blob)
                        if ids[i] == row[1]:
                            same[i] = True
                        if content is not None:
                            content[i] = row[3]
                if at:
                    vectors[at] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(
                        len(at), dim
                    )
            return same, vectors, content

        return read

    def _row_texts(self, user_id: str, rowids: npt.NDArray[np.int64], ids: Strings) -> ReadTexts:
        """Reads the texts of a loaded table's rows (positions in the table, whose rows
        are ``rowids`` and memory ids ``ids``) from the user's rows: by rowid, and a row
        whose rowid no longer holds that memory by its id (``None`` if it is gone)."""

        def read(rows: Sequence[int]) -> list[str | None]:
            at = np.asarray(rows, dtype=np.int64)
            want = list(zip(rowids[at].tolist(), built.strings_at(ids, at), strict=True))
            found: dict[int, tuple[str, str]] = {}
            for start in range(0, len(want), _IN_CHUNK):
                part = [rowid for rowid, _ in want[start : start + _IN_CHUNK]]
                for rowid, memory_id, content in self._read(
                    "SELECT rowid, id, content FROM memories WHERE +user_id = ? AND rowid IN "
                    f"({', '.join('?' for _ in part)})",
                    (user_id, *part),
                ):
                    found[rowid] = (memory_id, content)
            out = [hit[1] if (hit := found.get(rowid)) and hit[0] == memory_id else None
                   for rowid, memory_id in want]  # fmt: skip
            lost = [memory_id for (_, memory_id), text in zip(want, out, strict=True)
                    if text is None]  # fmt: skip
            if lost:  # replaced by another process since the load (a new rowid)
                moved = {m.id: m.content for m in self.get(user_id, lost)}
                out = [moved.get(memory_id) if text is None else text
                       for (_, memory_id), text in zip(want, out, strict=True)]  # fmt: skip
            return out

        return read

    def _stash(self, user_id: str, kind: str) -> Stash:
        """Where the user's derived index ``kind`` is kept: a row of ``derived_indexes``, or
        several for one of more than ``derived_blobs.PART_BYTES`` (SQLite refuses a value of
        more than 1,000,000,000 bytes)."""

        def read() -> bytes | None:
            try:
                if str(self.path) != ":memory:":  # without the store's lock (the copy: ~50 MB)
                    return derived_blobs.read_apart(
                        self.path, user_id, kind, read_only=self.read_only
                    )
                with self._lock:
                    return derived_blobs.read(self._db, user_id, kind)
            except sqlite3.Error as exc:
                raise StoreError(f"read from {self.path} failed: {_reason(exc)}") from exc

        def write(data: bytes) -> None:
            with self._transaction(durable=False) as db:
                derived_blobs.write(db, user_id, kind, data, datetime.now(UTC).isoformat())

        # the thread is named after the index ("engrain-bm25"): tests wait for it by name
        return Stash(read, write, lambda job: self._later(job, f"engrain-{kind}"))

    def _later(self, job: Callable[[], None], name: str) -> None:
        """Run ``job`` (saving a derived index) on its own thread; :meth:`close` waits for
        it, so a store closed right after a load still leaves the index for the next
        process. A job whose write fails (the store closed meanwhile) saves nothing: the
        next process builds it again."""

        def run() -> None:
            with suppress(EngrainError):
                job()
            heap.release()  # the saved copy's bytes (tens of MB for a large user)

        thread = threading.Thread(target=run, name=name, daemon=False)
        with self._lock:
            if self._closed:
                return
            self._saves = [t for t in self._saves if t.is_alive()] + [thread]
        thread.start()


def _reason(exc: sqlite3.Error, path: Path | None = None) -> str:
    """The driver's message, with what to do about the common one a user can fix. A write
    on a filesystem remounted read-only under the store fails as a bare "disk I/O error":
    given the store's ``path``, that cause is named."""
    if path is not None and sqlite_open.on_read_only_mount(path):
        return f"{exc} (the store's filesystem is mounted read-only)"
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY or "readonly" in str(exc):
        return f"{exc} (the file or its directory is read-only for this user)"
    return str(exc)


def _check_claims(db: sqlite3.Connection, claims: Sequence[KeyClaim]) -> None:
    """Check each claim against the rows under its key as the open write transaction sees
    them (index ``memories_user_key``); :class:`KeyChangedError` rolls the write back."""
    for claim in claims:
        rows = db.execute(f"{_SELECT} WHERE m.user_id = ? AND m.key = ?",
                          (claim.user_id, claim.filter.key)).fetchall()  # fmt: skip
        claim.check(m.id for m in map(_from_row, rows) if claim.filter.matches(m))


def _dt(value: datetime | None) -> str | None:
    return None if value is None else as_utc(value).isoformat()


def _parse(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


_SELECT_KEYS = (
    "SELECT id, digest, name, users, projects, admin, created_at, revoked_at FROM api_keys"
)


def _key_row(k: KeyRecord) -> tuple[Any, ...]:
    return (
        k.id, k.digest, k.name, json.dumps(list(k.users)), json.dumps(list(k.projects)),
        int(k.admin), _dt(k.created_at), _dt(k.revoked_at),
    )  # fmt: skip


def _key_from_row(r: tuple[Any, ...]) -> KeyRecord:
    created = _parse(r[6])
    assert created is not None
    return KeyRecord(
        id=r[0], digest=r[1], name=r[2], users=tuple(json.loads(r[3])),
        projects=tuple(json.loads(r[4])), admin=bool(r[5]), created_at=created,
        revoked_at=_parse(r[7]),
    )  # fmt: skip


def _to_row(m: Memory) -> tuple[Any, ...]:
    return (
        m.id, m.user_id, m.project, m.content, m.memory_type.value, m.kind.value,
        json.dumps(list(m.domains)), m.session_id, _dt(m.created_at), _dt(m.updated_at),
        _dt(m.event_at), m.key, m.importance, m.confidence, m.usefulness, m.access_count,
        _dt(m.last_accessed_at), int(m.pinned), int(m.muted), _dt(m.promoted_at),
        int(m.compressed), int(m.compression_source), m.source_session_id,
        json.dumps(m.provenance.to_dict()), m.content_hash,
        None if m.embedding is None else np.asarray(m.embedding, dtype=np.float32).tobytes(),
        m.superseded_by, m.content_tokens,
    )  # fmt: skip


def _from_row(r: tuple[Any, ...]) -> Memory:
    created, updated = _parse(r[8]), _parse(r[9])
    assert created is not None and updated is not None
    return Memory(
        id=r[0], user_id=r[1], project=r[2], content=r[3],
        memory_type=MemoryType(r[4]), kind=Kind(r[5]), domains=tuple(json.loads(r[6])),
        session_id=r[7], created_at=created, updated_at=updated, event_at=_parse(r[10]),
        key=r[11], importance=r[12], confidence=r[13], usefulness=r[14], access_count=r[15],
        last_accessed_at=_parse(r[16]), pinned=bool(r[17]), muted=bool(r[18]),
        promoted_at=_parse(r[19]), compressed=bool(r[20]), compression_source=bool(r[21]),
        source_session_id=r[22], provenance=Provenance.from_dict(json.loads(r[23])),
        content_hash=r[24],
        embedding=None if r[25] is None else np.frombuffer(r[25], dtype=np.float32).copy(),
        superseded_by=r[26], content_tokens=r[27],
    )  # fmt: skip


#: Ids per ``IN (…)`` list: well under SQLite's default limit of 32,766 variables.
_IN_CHUNK = 500


def _resolved(db: sqlite3.Connection, change: State) -> tuple[State, str | None]:
    """``change`` resolved against its document as the open transaction reads it."""
    found = db.execute(
        "SELECT value FROM state WHERE user_id = ? AND namespace = ? AND key = ?",
        (change.user_id, change.namespace, change.key),
    ).fetchall()
    doc = change.resolved(json.loads(found[0][0]) if found else None)
    return doc, doc.encoded()


def _write_state(
    db: sqlite3.Connection, documents: Sequence[tuple[State, str | None]], now: str | None
) -> None:
    """Write each state document (its encoded value), or delete it where that is ``None``,
    stamped ``now``, inside the open transaction; a ``change`` is resolved first against
    the document as the transaction reads it (it holds the write lock: no other process
    writes in between)."""
    documents = [_resolved(db, s) if s.change else (s, v) for s, v in documents]
    db.executemany(
        "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)",
        [(s.user_id, s.namespace, s.key, v, now) for s, v in documents if v is not None],
    )
    db.executemany(
        "DELETE FROM state WHERE user_id = ? AND namespace = ? AND key = ?",
        [(s.user_id, s.namespace, s.key) for s, v in documents if v is None],
    )
