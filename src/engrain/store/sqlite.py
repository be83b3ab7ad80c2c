"""The embedded default: one SQLite file in WAL mode, vectors as float32 BLOBs.

This Python's ``sqlite3`` cannot load extensions, so vectors are searched in-process with
numpy: each user's vectors are kept as one contiguous matrix, built on first use and rebuilt
only after a write that touches that user (or after another process commits, which
``PRAGMA data_version`` reveals). Exact search over 10,000 × 384 is well under a millisecond.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.errors import MigrationError, StoreError
from engrain.lexical import LexicalIndex
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, as_utc
from engrain.store.base import ALL, MemoryFilter

_COLUMNS = (
    "id", "user_id", "project", "content", "memory_type", "kind", "domains", "session_id",
    "created_at", "updated_at", "event_at", "key", "importance", "confidence", "usefulness",
    "access_count", "last_accessed_at", "pinned", "muted", "promoted_at", "compressed",
    "compression_source", "source_session_id", "provenance", "content_hash", "embedding",
)  # fmt: skip
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM memories"


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
    columns = ", ".join(_COLUMNS)
    db.execute(
        f"INSERT INTO memories_002 ({columns}) SELECT {columns} FROM memories ORDER BY rowid"
    )
    db.execute("DROP TABLE memories")
    db.execute("ALTER TABLE memories_002 RENAME TO memories")
    db.execute("CREATE INDEX memories_user_updated ON memories (user_id, updated_at)")
    db.execute("CREATE INDEX memories_user_key ON memories (user_id, key)")
    db.execute("CREATE INDEX memories_user_session ON memories (user_id, session_id)")


#: Named, ordered migrations. Append only; never edit one that has shipped.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_user_scoped_ids", _m002_user_scoped_ids),
]


@dataclass
class _UserIndex:
    """One user's vectors and the columns the search filter needs, as numpy arrays."""

    ids: list[str]
    matrix: npt.NDArray[np.float32]
    memory_type: npt.NDArray[np.str_]
    kind: npt.NDArray[np.str_]
    project: list[str | None]
    compressed: npt.NDArray[np.bool_]
    muted: npt.NDArray[np.bool_]
    importance: npt.NDArray[np.float64]
    contents: list[str]
    lexical: LexicalIndex | None = None


class SQLiteStore:
    """The default store: one SQLite file, WAL journal, named migrations."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open SQLite store at {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._indexes: dict[str, _UserIndex] = {}
        self._data_version = -1
        self.migrate()

    # -- schema -------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, each in its own transaction; their names."""
        applied: list[str] = []
        with self._lock:
            try:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT)"
                )
                done = {r[0] for r in self._db.execute("SELECT name FROM migrations")}
            except sqlite3.Error as exc:
                raise MigrationError(f"cannot read migrations of {self.path}: {exc}") from exc
            known = {name for name, _ in MIGRATIONS}
            if unknown := done - known:
                raise MigrationError(
                    f"{self.path} was written by a newer engrain (migrations {sorted(unknown)})"
                )
            for name, step in MIGRATIONS:
                if name in done:
                    continue
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                    step(self._db)
                    self._db.execute(
                        "INSERT INTO migrations VALUES (?, datetime('now'))", (name,)
                    )
                    self._db.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._db.execute("ROLLBACK")
                    raise MigrationError(f"migration {name} failed: {exc}") from exc
                applied.append(name)
        return applied

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a write on {self.path}: {exc}") from exc
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK")
                raise StoreError(f"write to {self.path} failed: {exc}") from exc

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"read from {self.path} failed: {exc}") from exc

    # -- protocol -----------------------------------------------------------------------

    def write(self, upserts: Sequence[Memory] = (), deletes: Sequence[Memory] = ()) -> None:
        if not upserts and not deletes:
            return
        rows = [_to_row(m) for m in upserts]
        placeholders = ", ".join("?" for _ in _COLUMNS)
        try:
            with self._transaction() as db:
                db.executemany(
                    f"INSERT OR REPLACE INTO memories ({', '.join(_COLUMNS)}) "
                    f"VALUES ({placeholders})",
                    rows,
                )
                db.executemany(
                    "DELETE FROM memories WHERE user_id = ? AND id = ?",
                    [(m.user_id, m.id) for m in deletes],
                )
        except sqlite3.Error as exc:
            raise StoreError(f"write to {self.path} failed: {exc}") from exc
        finally:
            for user in {m.user_id for m in (*upserts, *deletes)}:
                self._indexes.pop(user, None)

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        if not ids:
            return []
        found: dict[str, Memory] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ", ".join("?" for _ in part)
            for row in self._read(
                f"{_SELECT} WHERE user_id = ? AND id IN ({marks})", (user_id, *part)
            ):
                memory = _from_row(row)
                found[memory.id] = memory
        return [found[i] for i in ids if i in found]

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        where, params = _where(user_id, flt)
        sql = f"{_SELECT} WHERE {where} ORDER BY updated_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params += [limit, offset]
        elif offset:
            sql += " LIMIT -1 OFFSET ?"
            params.append(offset)
        return [_from_row(r) for r in self._read(sql, params)]

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        if k <= 0:
            return []
        if _needs_sql(flt):
            return _exact_search(self.query(user_id, flt), vector, k)
        index = self._index(user_id)
        if index is None:
            return []
        sims = index.matrix @ np.asarray(vector, dtype=np.float32)
        return self._top(user_id, index, sims, _mask(index, flt), k)

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        if k <= 0:
            return []
        if _needs_sql(flt):
            found = self.query(user_id, flt)
            scores = LexicalIndex([m.content for m in found]).scores(text)
            order = [i for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0]
            return [(found[i], float(scores[i])) for i in order]
        index = self._index(user_id)
        if index is None:
            return []
        with self._lock:
            if index.lexical is None:
                index.lexical = LexicalIndex(index.contents)
        scores = index.lexical.scores(text)
        return self._top(user_id, index, scores, _mask(index, flt) & (scores > 0), k)

    def _top(
        self,
        user_id: str,
        index: _UserIndex,
        scores: npt.NDArray[np.float32],
        mask: npt.NDArray[np.bool_],
        k: int,
    ) -> list[tuple[Memory, float]]:
        """The ``k`` best-scoring rows passing ``mask``, best first, as memories."""
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return []
        picked = scores[candidates]
        if candidates.size > k:
            top = np.argpartition(-picked, k - 1)[:k]
        else:
            top = np.arange(candidates.size)
        top = top[np.argsort(-picked[top], kind="stable")]
        chosen = [index.ids[candidates[i]] for i in top]
        memories = {m.id: m for m in self.get(user_id, chosen)}
        return [
            (memories[memory_id], float(picked[i]))
            for memory_id, i in zip(chosen, top, strict=True)
            if memory_id in memories
        ]

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        if not ids:
            return
        with self._transaction() as db:
            db.executemany(
                "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? "
                "WHERE user_id = ? AND id = ?",
                [(_dt(at), user_id, i) for i in ids],
            )

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        where, params = _where(user_id, flt)
        return int(self._read(f"SELECT COUNT(*) FROM memories WHERE {where}", params)[0][0])

    def centroid(self, user_id: str) -> Vector | None:
        index = self._index(user_id)
        if index is None:
            return None
        return index.matrix.mean(axis=0).astype(np.float32)

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
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO embedding_cache VALUES (?, ?, ?)",
                [
                    (model_id, h, np.asarray(v, dtype=np.float32).tobytes())
                    for h, v in vectors.items()
                ],
            )

    def users(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT user_id FROM memories ORDER BY 1")]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- the in-process vector index ------------------------------------------------------

    def _index(self, user_id: str) -> _UserIndex | None:
        with self._lock:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:  # another connection committed
                self._indexes.clear()
                self._data_version = version
            index = self._indexes.get(user_id)
            if index is None:
                index = self._build_index(user_id)
                if index is not None:
                    self._indexes[user_id] = index
            return index

    def _build_index(self, user_id: str) -> _UserIndex | None:
        rows = self._read(
            "SELECT id, embedding, memory_type, kind, project, compressed, muted, importance, "
            "content FROM memories WHERE user_id = ? AND embedding IS NOT NULL ORDER BY rowid",
            (user_id,),
        )
        if not rows:
            return None
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return _UserIndex(
            ids=[r[0] for r in rows],
            matrix=matrix.reshape(len(rows), -1),
            memory_type=np.array([r[2] for r in rows]),
            kind=np.array([r[3] for r in rows]),
            project=[r[4] for r in rows],
            compressed=np.array([bool(r[5]) for r in rows]),
            muted=np.array([bool(r[6]) for r in rows]),
            importance=np.array([r[7] for r in rows], dtype=np.float64),
            contents=[r[8] for r in rows],
        )


def _mask(index: _UserIndex, flt: MemoryFilter) -> npt.NDArray[np.bool_]:
    mask = np.ones(len(index.ids), dtype=bool)
    if flt.memory_types is not None:
        mask &= np.isin(index.memory_type, [t.value for t in flt.memory_types])
    if flt.kinds is not None:
        mask &= np.isin(index.kind, [k.value for k in flt.kinds])
    if flt.project is not None:
        mask &= np.array([p == flt.project for p in index.project], dtype=bool)
    if not flt.include_compressed:
        mask &= ~index.compressed
    if not flt.include_muted:
        mask &= ~index.muted
    if flt.min_importance is not None:
        mask &= index.importance >= flt.min_importance
    return mask


def _needs_sql(flt: MemoryFilter) -> bool:
    """Filters the cached index does not hold (rare in search): answered via SQL."""
    return flt.session_id is not None or flt.key is not None or flt.pinned is not None


def _exact_search(memories: list[Memory], vector: Vector, k: int) -> list[tuple[Memory, float]]:
    """Search a small, already filtered list (session or key filters) without the index."""
    found = [m for m in memories if m.embedding is not None]
    if not found:
        return []
    sims = np.vstack([m.embedding for m in found if m.embedding is not None]) @ vector
    order = np.argsort(-sims, kind="stable")[:k]
    return [(found[i], float(sims[i])) for i in order]


def _where(user_id: str, flt: MemoryFilter) -> tuple[str, list[Any]]:
    clauses = ["user_id = ?"]
    params: list[Any] = [user_id]
    if flt.project is not None:
        clauses.append("project = ?")
        params.append(flt.project)
    if flt.memory_types is not None:
        clauses.append(f"memory_type IN ({', '.join('?' for _ in flt.memory_types)})")
        params += [t.value for t in flt.memory_types]
    if flt.kinds is not None:
        clauses.append(f"kind IN ({', '.join('?' for _ in flt.kinds)})")
        params += [k.value for k in flt.kinds]
    if flt.session_id is not None:
        clauses.append("session_id = ?")
        params.append(flt.session_id)
    if flt.key is not None:
        clauses.append("key = ?")
        params.append(flt.key)
    if not flt.include_compressed:
        clauses.append("compressed = 0")
    if not flt.include_muted:
        clauses.append("muted = 0")
    if flt.min_importance is not None:
        clauses.append("importance >= ?")
        params.append(flt.min_importance)
    if flt.pinned is not None:
        clauses.append("pinned = ?")
        params.append(int(flt.pinned))
    return " AND ".join(clauses), params


def _dt(value: datetime | None) -> str | None:
    return None if value is None else as_utc(value).isoformat()


def _parse(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _to_row(m: Memory) -> tuple[Any, ...]:
    return (
        m.id, m.user_id, m.project, m.content, m.memory_type.value, m.kind.value,
        json.dumps(list(m.domains)), m.session_id, _dt(m.created_at), _dt(m.updated_at),
        _dt(m.event_at), m.key, m.importance, m.confidence, m.usefulness, m.access_count,
        _dt(m.last_accessed_at), int(m.pinned), int(m.muted), _dt(m.promoted_at),
        int(m.compressed), int(m.compression_source), m.source_session_id,
        json.dumps(m.provenance.to_dict()), m.content_hash,
        None if m.embedding is None else np.asarray(m.embedding, dtype=np.float32).tobytes(),
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
    )  # fmt: skip
