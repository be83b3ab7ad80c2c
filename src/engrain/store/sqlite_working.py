"""The SQLite store's working sets loaded: a user's working set read from the file in one
read transaction (from the saved image of its columns if it matches the rows, else from the
rows: ``store/sqlite_load.py``), with the saved indexes adopted when their stamps allow,
and the readers through which a loaded working set reads its rows' vectors and texts back
by rowid (an indexed user keeps none in memory: ``store/cache.py``).

A load runs under the connection's lock, in a plain ``BEGIN`` … ``COMMIT`` read
transaction (a consistent snapshot; nothing in it writes). What it reads on other threads
meanwhile (saved indexes) is checked against what the transaction read before it is used.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from engrain.errors import StoreError
from engrain.store import (
    built,
    columns,
    heap,
    lexical_file,
    sqlite_load,
    sqlite_rows,
    sqlite_stamps,
)
from engrain.store.ann import IndexSlot
from engrain.store.ann_stamp import IndexStamp
from engrain.store.arrays import HeldTable, RowVectors
from engrain.store.cache import Stamped, UserCache
from engrain.store.columns import Stamp, Strings
from engrain.store.reads import lazy, overlapped
from engrain.store.sqlite_connection import reason
from engrain.store.sqlite_rows import IN_CHUNK
from engrain.store.sqlite_saves import DerivedSaves
from engrain.store.sqlite_versions import CACHED_USERS
from engrain.store.texts import ReadTexts

T = TypeVar("T")


class WorkingSets(DerivedSaves):
    """Each user's working set, loaded on first use and kept current (the layers below)."""

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

        def held(stamp: Stamp) -> IndexStamp | None:
            if slot is None or slot.index is not None:
                return None
            stamps.update(sqlite_stamps.read(self._db, user_id, stamp))
            first = stamps.get(sqlite_stamps.FIRST)
            if first is None:
                return None
            bm25 = self._stash(user_id, "bm25").read
            # two jobs, each on a pool thread of its own: the index is read in place (no
            # copy of it at the peak), so the BM25 copy need not wait for its transients
            named.append(self._beside(sqlite_stamps.loader(dict(stamps), slot, read)))
            lexical.append(self._beside(lambda: lexical_file.parsed(bm25())))
            return first

        for stamped in (True, False):
            try:
                self._db.execute("BEGIN")
                try:
                    loaded = sqlite_load.read(
                        self._db, user_id, self._stash(user_id, "columns").read,
                        sqlite_rows.from_row, partial(self._row_texts, user_id),
                        held if stamped else None,
                    )  # fmt: skip
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"read from {self.path} failed: {reason(exc)}") from exc
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
            for start in range(0, len(unique), IN_CHUNK):
                part = unique[start : start + IN_CHUNK]
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
            for start in range(0, len(want), IN_CHUNK):
                part = [rowid for rowid, _ in want[start : start + IN_CHUNK]]
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
                moved = {m.id: m.content for m in sqlite_rows.by_ids(self._read, user_id, lost)}
                out = [moved.get(memory_id) if text is None else text
                       for (_, memory_id), text in zip(want, out, strict=True)]  # fmt: skip
            return out

        return read
