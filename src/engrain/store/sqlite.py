"""The embedded default: one SQLite file in WAL mode, vectors as float32 BLOBs.

This Python's ``sqlite3`` cannot load extensions, so vectors are searched in-process with
numpy: each user's vectors are kept as one contiguous matrix, built on first use and rebuilt
only after a write that touches that user (or after another process commits, which
``PRAGMA data_version`` reveals). Exact search over 10,000 × 384 is well under a millisecond.

A user with many vectors (``ann_min_vectors``, 20,000 by default) is searched through an
approximate index once it is built (``store/ann.py``, docs/scale.md), kept in the
``derived_indexes`` table with the BM25 index of users with 5,000+ memories, both checked
against the working set when read.

**Modules.** :class:`SQLiteStore` is the protocol over four layers, each a class in its own
module that the next one extends (imports point one way, down): ``sqlite_connection`` (the
connection, its pragmas and lock, migrations, write transactions, reads), ``sqlite_versions``
(the cached working sets kept current with the file), ``sqlite_saves`` (the derived indexes,
images and stamps saved for the next process, on their own threads) and ``sqlite_working``
(a working set loaded, and its rows read back by rowid). Beside them: ``sqlite_schema`` (the
named migrations), ``sqlite_rows`` (rows to and from memories and keys), ``sqlite_writes``
(what a write does inside its transaction), and ``sqlite_open``, ``sqlite_load``,
``sqlite_uses``, ``sqlite_tokens``, ``sqlite_stamps`` as before. The reads answered from a
working set alone (``query``, ``search``, ``count``…) are ``cache_reads.WorkingSetReads``,
shared with the in-memory store.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engrain import envvars
from engrain.errors import KeyChangedError, StoreError
from engrain.model import Memory, MemoryFields, Vector
from engrain.store import heap, sqlite_rows, sqlite_uses, sqlite_writes
from engrain.store.ann import ANN_MIN_VECTORS
from engrain.store.base import (
    ALL,
    LAZY_NAMESPACES,
    KeyClaim,
    KeyRecord,
    MemoryFilter,
    Patch,
    State,
    counted,
    lazy_commit,
)
from engrain.store.cache_reads import WorkingSetReads
from engrain.store.reads import Begin
from engrain.store.sqlite_deferred import VARIABLE, DeferredUses, Uses
from engrain.store.sqlite_rows import ROW_COLUMNS, SELECT_KEYS, dt, key_from_row, key_row
from engrain.store.sqlite_schema import MIGRATIONS
from engrain.store.sqlite_working import WorkingSets

__all__ = ["MIGRATIONS", "SAVE_WAIT", "SQLiteStore", "ann_threshold", "deferred_uses"]

#: Seconds :meth:`SQLiteStore.close` waits for each derived index being saved.
SAVE_WAIT = 60.0

log = logging.getLogger(__name__)


def deferred_uses(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a ``context()``'s counted uses are written after it returns, by a thread of
    the store (``ENGRAIN_DEFER_USES``: ``on``, the default, or ``off``: in the call, in one
    transaction with its record; ``store/sqlite_deferred.py``); any other value raises
    :class:`~engrain.errors.ConfigError`."""
    return envvars.choice(VARIABLE, environ) == "on"


def ann_threshold(environ: Mapping[str, str] | None = None) -> int | None:
    """The vector count from which a user is searched through the approximate index:
    ``ENGRAIN_ANN_MIN_VECTORS`` (a count, or ``off``) or :data:`ANN_MIN_VECTORS`; any other
    value raises :class:`~engrain.errors.ConfigError` (:mod:`engrain.envvars`)."""
    value = envvars.count("ENGRAIN_ANN_MIN_VECTORS", environ)
    if value is envvars.OFF:
        return None
    return value if isinstance(value, int) else ANN_MIN_VECTORS


class SQLiteStore(WorkingSets, WorkingSetReads):
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
        defer_uses: bool | None = None,
    ) -> None:
        # before the file is opened: a bad ENGRAIN_ANN_MIN_VECTORS creates nothing
        ann_min = ann_threshold() if ann_min_vectors == "auto" else ann_min_vectors
        defer = deferred_uses() if defer_uses is None else defer_uses
        heap.share_one_arena()  # before the checkpointer's and loaders' threads start
        super().__init__(path, ann_min, ann_background)
        self.migrate()
        #: The counts of calls that returned, written by a thread of the store
        #: (``store/sqlite_deferred.py``); ``None``: written in the call.
        self._deferred: DeferredUses | None = None
        if self.read_only:
            log.warning("%s is on a read-only filesystem: opened read-only; context() "
                        "counts no uses and records no context, and writes raise "
                        "StoreError", self.path)  # fmt: skip
        elif defer:
            deferred = DeferredUses(self._lock)
            if deferred.start():
                self._deferred = deferred
                self._lock.first = self._commit_deferred
            else:  # no thread to write them after a call: each call writes its own
                log.warning("%s: the counted uses are written in each context() call "
                            "(their thread could not start)", self.path)  # fmt: skip

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
        rows = [sqlite_uses.stored(sqlite_rows.to_row(m)) for m in upserts]
        documents = [(s, None if s.change else s.encoded()) for s in state]
        staged = {(m.user_id, m.id): m for m in upserts}
        removed = {(m.user_id, m.id) for m in deletes}
        now = dt(datetime.now(UTC))
        placeholders = ", ".join("?" for _ in ROW_COLUMNS)
        with self._lock:
            try:
                durable = not lazy_commit(upserts, deletes, state, patches)
                with self._transaction(durable=durable) as db:
                    # the working sets checked at this version hold the revisions this
                    # write leaves (no other process committed since)
                    version = db.execute("PRAGMA data_version").fetchall()[0][0]
                    sqlite_writes.check_claims(db, claims)
                    db.executemany(
                        f"INSERT OR REPLACE INTO memories ({', '.join(ROW_COLUMNS)}) "
                        f"VALUES ({placeholders})",
                        rows,
                    )
                    sqlite_uses.put(db, upserts, dt)
                    patched = sqlite_writes.apply_patches(db, patches, staged)
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
                    sqlite_writes.write_state(db, documents, now)
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

    def cached(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """These memories from the user's working set (loaded or brought up to the store's
        revision first), in the order given, unknown ids skipped: no SQL per call, for a
        caller that resolves hundreds of ids per search (the Chroma store's hits)."""
        return self._cache(user_id).get(ids)

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        return sqlite_rows.by_ids(self._read, user_id, ids)

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
        now = dt(datetime.now(UTC))
        if self._deferred is not None:
            self._record_deferring(user_id, counts, at, documents, now)
            return
        with self._lock:
            with self._transaction(
                durable=any(s.namespace not in LAZY_NAMESPACES for s in state)
            ) as db:
                sqlite_writes.write_state(db, documents, now)
                sqlite_uses.count(db, user_id, counts, dt(at))
            self._sync_version()
            if counts:
                self._in_line(user_id, used=(ids, at))  # committed: dropped if it cannot

    def _record_deferring(
        self,
        user_id: str,
        counts: Counter[str],
        at: datetime,
        documents: list[tuple[State, Any]],
        now: str | None,
    ) -> None:
        """:meth:`record_uses` with the counts deferred: the ``documents`` (the context's
        record) committed now, the counts handed to the store's thread once they are, so
        a failed record hands nothing over (``store/sqlite_deferred.py``)."""
        with self._lock:  # taken first: the counts waiting before these are committed
            if documents:
                durable = any(s.namespace not in LAZY_NAMESPACES for s, _ in documents)
                with self._transaction(durable=durable) as db:
                    sqlite_writes.write_state(db, documents, now)
                self._sync_version()
            if counts and self._deferred is not None:
                self._deferred.add(Uses(user_id, counts, at))

    def _commit_deferred(self) -> None:
        """Commit the counts waiting, in one transaction, then touch the working sets: run
        by the store's lock when a thread takes it first (``store/sqlite_deferred.py``).
        A failure loses those counts, logged (memory running out also drops their users'
        working sets); it never fails the thread that took the lock for its own statement."""
        deferred = self._deferred
        if deferred is None or not deferred.waiting():
            return
        taken = deferred.take()
        try:
            with self._transaction(durable=False) as db:
                for uses in taken:
                    sqlite_uses.count(db, uses.user_id, uses.counts, dt(uses.at))
            self._sync_version()
        except StoreError as exc:
            log.warning("the counted uses of %d context() calls were not written: %s",
                        len(taken), exc)  # fmt: skip
            return
        except MemoryError:
            # committed or not (memory may run out after the commit): the working sets read
            # the counts again from the rows, and the thread that took the lock goes on
            log.warning("the counted uses of %d context() calls may not be written: out of "
                        "memory", len(taken))  # fmt: skip
            for uses in taken:
                self._caches.pop(uses.user_id, None)
            return
        for uses in taken:  # committed: a working set that cannot follow is dropped
            self._in_line(uses.user_id, used=(list(uses.counts.elements()), uses.at))

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
                (user_id, namespace, dt(before)),
            )
            return int(cursor.rowcount)

    def users(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT user_id FROM memories ORDER BY 1")]

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` (nothing written) if its id is taken."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                key_row(record),
            )
            return cursor.rowcount == 1

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest``, read from the file (so another
        process's revocation is seen at once), or ``None``."""
        rows = self._read(f"{SELECT_KEYS} WHERE digest = ?", (digest,))
        return key_from_row(rows[0]) if rows else None

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first (ties by id)."""
        return [key_from_row(r) for r in self._read(f"{SELECT_KEYS} ORDER BY created_at, id")]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked (the first revocation time is kept); ``False`` if unknown."""
        with self._transaction() as db:
            db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (dt(at), key_id),
            )
            found = db.execute("SELECT 1 FROM api_keys WHERE id = ?", (key_id,)).fetchall()
            return bool(found)

    def wait_for_index(self, user_id: str, timeout: float | None = None) -> bool:
        """Start the user's approximate index if the user is large enough and wait (up to
        ``timeout`` seconds) until searches use it; whether they do (benchmarks and tests:
        a caller never needs to, searches are exact until then)."""
        return self._cache(user_id).wait_for_index(timeout)

    def close(self) -> None:
        """Wait for derived indexes being saved (at most :data:`SAVE_WAIT` seconds each),
        then close the file."""
        with self._lock:
            for user_id in self._stale_images & set(self._caches) - self._reshaped:
                self._later(partial(self._refresh_image, user_id), "engrain-columns")
            for user_id in set(self._caches) & set(self._slots) - self._reshaped:
                self._later(partial(self._stamp_indexes, user_id), "engrain-stamps")
            with self._saves_lock:
                self._closed = True  # the counts waiting were committed as the lock was taken
                saves = list(self._saves)
        if self._deferred is not None:
            self._deferred.close(SAVE_WAIT)
        for thread in saves:
            thread.join(SAVE_WAIT)
        with self._lock:
            for slot in self._slots.values():
                slot.close()
            self._checkpoints.close()
            self._shut = True
            self._db.close()
            self._lock.first = None  # nothing is committed on the closed connection

    # -- the per-user working set -------------------------------------------------------
