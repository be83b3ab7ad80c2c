"""One user's memories held in process: the working set both stores search.

The in-memory store is a dict of these; the SQLite store keeps one per recently used user
beside the file (the file stays the source of truth). Filters, ordering, vector search and
BM25 run on numpy arrays built lazily after each change, so a burst of writes costs one
rebuild, and reads never decode rows again. Both backends therefore rank identically.

**Copy-on-write.** A :class:`UserCache` holds one immutable :class:`Snapshot` (the rows, the
column arrays built from them, the BM25 index). Nothing in a published snapshot is ever
changed: a writer builds the next snapshot from the current one plus its changes (patching
or extending *copies* of the arrays, so a write still costs O(changed rows) plus a memcpy)
and swaps the one reference under a lock. A reader takes the reference once per call and
works on that snapshot alone, so it never sees a half-patched array, and readers take no
lock. Lazy builds (arrays, BM25) publish a new snapshot only if no write replaced the one
they were built from; two racing builders do the same work twice, harmlessly.

**Large users.** Given an :class:`~engrain.store.ann.IndexSlot`, a user with at least
``slot.min_vectors`` vectors is searched through an approximate index (usearch HNSW) once it
is ready; until then, and for smaller users, search is the exact matrix product. The index
only proposes candidates: they are mapped onto the reader's snapshot (a forgotten memory is
not there), scored exactly with its vectors, and merged with an exact search of the rows the
index does not hold (written or re-embedded since it was built or patched), so a result is
always a current memory and a new memory is always found. A snapshot records which rows the
index holds (:class:`AnnRows`), carried through writes like the other columns.

**Vectors held once.** Once the index holds every loaded row's vector, the snapshot drops its
float32 matrix (154 MB at 100,000 × 384): a loaded row's vector is then read from its SQLite
row (float32, by rowid; the index's own vector only for a row another process replaced since:
:class:`_IndexVectors`), a row written since from its memory object (exact). A search reads
its candidates' vectors once: the memories it builds for its results take those, and a
memory already built reads none (docs/scale.md, "Session 8"). Readers of an older snapshot
keep its matrix until they are done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from engrain.errors import EngrainError
from engrain.model import Kind, Memory, MemoryType, Vector
from engrain.store import ann_kinds, built, coarse, heap, lexical_file
from engrain.store.ann import (
    PATCH_AFTER,
    REBUILD_SHARE,
    IndexSlot,
    Keys,
    Stash,
    VectorIndex,
    memory_keys,
)
from engrain.store.ann_rows import AnnRows
from engrain.store.base import ALL, MemoryFilter
from engrain.store.coarse import Projection
from engrain.store.columns import Table, parse_micros
from engrain.store.ids import IdColumn, IdPositions
from engrain.store.lexical import LexicalIndex
from engrain.store.reach import reachable
from engrain.store.rows import Decoded, Rows, RowsView
from engrain.store.rows import with_access as _with_access

BoolArray = npt.NDArray[np.bool_]

#: Enum members as small integer codes: a type or kind filter is a table lookup, not a
#: comparison of strings (0.4 → 0.02 ms at 10,000 memories).
MEMORY_TYPES: Mapping[MemoryType, int] = {t: i for i, t in enumerate(MemoryType)}
KINDS: Mapping[Kind, int] = {k: i for i, k in enumerate(Kind)}


Matrix = npt.NDArray[np.float32]


class RowVectors(Protocol):
    """Reads loaded rows' float32 vectors from where they are stored: given the rows'
    rowids, their memory ids and the vectors' size, which were found (the row still holds
    that memory with a vector of that size), the vectors (zeros where not found) and, if
    ``texts``, the rows' texts from the same read (``None`` where not found)."""

    def __call__(
        self, rowids: npt.NDArray[np.int64], ids: Sequence[str], dim: int, *, texts: bool = False
    ) -> tuple[BoolArray, npt.NDArray[np.float32], list[str | None] | None]:
        """See the class docstring."""
        ...


class _Subset(NamedTuple):
    """The rows a filter keeps (with a vector), their vectors, and for a large filter a
    coarse projection of them (``store/coarse.py``); ``vectors`` is ``None`` for what is
    carried only for its projection's directions."""

    rows: npt.NDArray[np.intp]
    vectors: npt.NDArray[np.float32] | None
    coarse: Projection | None = None

    @classmethod
    def directions(cls, subset: _Subset) -> _Subset:
        """What of ``subset`` stays valid once vectors changed: its projection's
        directions (any orthonormal basis keeps the scores exact)."""
        coarse = subset.coarse
        kept = None if coarse is None else Projection(coarse.basis, coarse.coords[:0])
        return cls(np.zeros(0, dtype=np.intp), None, kept)


@dataclass(frozen=True)
class _IndexVectors:
    """Where the vectors of a working set's loaded rows are read instead of a float32
    matrix: from ``exact`` (the store's rows, float32) if given, else from the approximate
    ``index`` that holds each of them (``keys``: per row, :func:`~engrain.store.ann.
    memory_keys` of its id). The index is patched but never loses a key, so every row
    loaded when this was made keeps a vector there: it also stands in for a row ``exact``
    no longer finds (changed or forgotten by another process since the load)."""

    index: VectorIndex
    keys: Keys
    dim: int
    exact: RowVectors | None = None

    def extended(self, keys: Keys) -> _IndexVectors:
        """For these rows followed by rows with ``keys``."""
        return replace(self, keys=np.concatenate([self.keys, keys]))

    def kept(self, keep: BoolArray) -> _IndexVectors:
        """For the rows kept."""
        return replace(self, keys=self.keys[keep])


@dataclass(frozen=True)
class _Arrays:
    """Column arrays of the cached memories, in insertion order, and the memories
    themselves (:class:`~engrain.store.rows.Rows`: built only when asked for). Never
    changed once built: :meth:`patched`, :meth:`extend`, :meth:`without` and
    :meth:`touched` return new ones."""

    rows: Rows
    #: Each id's row (``store/ids.py``: sorted hashes, no ``str`` or ``dict`` entry a row).
    position: IdPositions
    #: The rows' ids over one UTF-8 blob (a loaded table's own): a ``str`` made on access.
    ids: IdColumn
    #: Every row's vector (zeros without one); ``None`` once they are read from the index
    #: (``held``: a large user's, see the module docstring).
    matrix: Matrix | None
    has_vector: BoolArray
    memory_type: npt.NDArray[np.int8]  # position in MEMORY_TYPES
    kind: npt.NDArray[np.int8]  # position in KINDS
    project: npt.NDArray[np.object_]
    session_id: npt.NDArray[np.object_]
    key: npt.NDArray[np.object_]
    compressed: BoolArray
    muted: BoolArray
    superseded: BoolArray
    pinned: BoolArray
    importance: npt.NDArray[np.float64]
    updated: npt.NDArray[np.float64]
    held: _IndexVectors | None = None
    #: A new object whenever a row's vector may have changed (not for counted uses, other
    #: fields, or the matrix dropped for ``held``): the index job checks it is still current.
    version: object = field(default_factory=object, compare=False, repr=False)
    #: Filter → rows passing it, computed once per set of columns: every call of the gate
    #: asks for the same few filters (the pool's, the learnings', the pinned ones). Only
    #: the columns decide a mask, so :meth:`~UserCache.touch`, which changes none, keeps it.
    masks: dict[MemoryFilter, BoolArray] = field(default_factory=dict, compare=False, repr=False)
    #: Filter (``None``: every row) → (the index record's ``held`` they were counted
    #: with, the rows passing with a vector, how many of them the index holds, how
    #: many there are): three passes over every row per search otherwise (~0.3 ms a call
    #: at 100,000 rows). Kept like ``masks``; valid while ``held`` is the same array.
    counted: dict[MemoryFilter | None, tuple[BoolArray, BoolArray, int, int]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: Filter → (rows passing it with a vector, their vectors as one matrix, a coarse
    #: projection of them), for filters searched exactly beside the approximate index (a
    #: large user's learnings): the copy is made once per set of columns, not per search
    #: (22,000 rows: 5 → 1.3 ms).
    subsets: dict[MemoryFilter, _Subset] = field(default_factory=dict, compare=False, repr=False)
    #: The subsets of the arrays these were patched from: one is reused if no vector
    #: changed and its filter still keeps the same rows (a promotion rarely changes who is
    #: a learning; without the matrix a new copy is read from the store: ~22,000 rows),
    #: else only its projection's directions are.
    earlier_subsets: Mapping[MemoryFilter, _Subset] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def memories(self) -> list[Memory]:
        """Every row's memory, in order (each one built: for small sets and tests)."""
        return [self.memory(row) for row in range(len(self))]

    def memory(self, row: int) -> Memory:
        """The memory of ``row``."""
        return self.rows.memory(row, str(self.ids[row]), lambda: self._vector(row))

    def memories_of(self, rows: Sequence[int], vectors: Matrix | None = None) -> list[Memory]:
        """:meth:`memory` of each of ``rows``, built together. ``vectors``: the rows'
        vectors if the caller has just read them (its search scored them), so a memory
        that is not kept built is not read from the store a second time; else only those
        of the rows not kept built are read, in one go."""
        ids = self.ids.take(rows) if len(rows) else []
        if self.matrix is not None or not len(rows):
            return built.rows_memories(self.rows, rows, ids, self._vector)
        if vectors is not None:
            block, at = vectors, {row: i for i, row in enumerate(rows)}
        else:  # the vectors of the memories to build (a kept memory has its own)
            decoded = self.rows.decoded
            todo = [row for row, memory_id in zip(rows, ids, strict=True)
                    if self.has_vector[row] and decoded.get(memory_id) is None]  # fmt: skip
            block = self.vectors(np.asarray(todo, dtype=np.intp), texts=True)
            at = {row: i for i, row in enumerate(todo)}
        block.flags.writeable = False

        def vector(row: int) -> Vector | None:
            if not self.has_vector[row]:
                return None
            found = at.get(row)  # None: dropped from the kept ones since (another thread)
            return block[found] if found is not None else self._vector(row)

        return built.rows_memories(self.rows, rows, ids, vector)

    @property
    def dim(self) -> int:
        """The size of the vectors (0 before the first)."""
        if self.matrix is not None:
            return int(self.matrix.shape[1])
        assert self.held is not None
        return self.held.dim

    def vectors(self, rows: npt.NDArray[np.intp], *, texts: bool = False) -> Matrix:
        """The vectors of ``rows`` as a new matrix (zeros for a row without one): rows of
        the matrix, or without it, a loaded row's from the index and a row written since
        from its memory. ``texts``: the caller will build some of these rows' memories, so
        loaded rows read from the store bring their texts in the same read (kept by the
        table's :class:`~engrain.store.texts.RowTexts`, which then need not read them)."""
        if self.matrix is not None:
            return self.matrix[rows]
        held = self.held
        assert held is not None
        out = np.zeros((len(rows), held.dim), dtype=np.float32)
        source = self.rows.source[rows]
        loaded = np.flatnonzero((source >= 0) & self.has_vector[rows])
        if loaded.size:
            out[loaded] = self._loaded_vectors(rows[loaded], held, texts=texts)
        for i in np.flatnonzero((source < 0) & self.has_vector[rows]).tolist():
            embedding = self.rows.objects[str(self.ids[rows[i]])].embedding
            if embedding is not None:
                out[i] = embedding
        return out

    def _loaded_vectors(
        self, rows: npt.NDArray[np.intp], held: _IndexVectors, *, texts: bool = False
    ) -> Matrix:
        """The vectors of loaded ``rows``: float32 from the store's rows when it can read
        them (a row changed or forgotten by another process since: the index's vector),
        else the index's. ``texts``: the texts of the rows found are read with them and
        kept by a table whose texts stay in the store."""
        base = self.rows.base
        if held.exact is None or base is None or len(base.rowids) != len(base):
            return held.index.vectors(held.keys[rows])
        positions = self.rows.source[rows]
        keep = getattr(base.content, "keep", None) if texts else None
        found, vectors, read = held.exact(
            base.rowids[positions], self.ids.take(rows.tolist()), held.dim,
            texts=keep is not None,
        )  # fmt: skip
        if keep is not None and read is not None:
            at = np.flatnonzero(found).tolist()
            keep(positions[at].tolist(), [read[i] for i in at])
        lost = np.flatnonzero(~found)
        if lost.size:
            vectors[lost] = held.index.vectors(held.keys[rows[lost]])
        return vectors

    def products(self, query: Matrix, chunk: int = 16_384) -> Matrix:
        """Every row's vector times ``query`` (without the matrix: a chunk of vectors read
        at a time)."""
        if self.matrix is not None:
            return self.matrix @ query
        return np.concatenate(
            [self.vectors(np.arange(start, min(start + chunk, len(self)), dtype=np.intp)) @ query
             for start in range(0, len(self), chunk)] or [np.zeros(0, dtype=np.float32)]
        )  # fmt: skip

    def same_vector(self, row: int, embedding: Vector | None) -> bool:
        """Whether ``row``'s vector is ``embedding``: for a loaded row without the matrix,
        whether the index holds ``embedding`` for it at its own precision (a memory written
        back unchanged is not a new vector; nothing is read from the store)."""
        held = self.held
        if self.matrix is None and held is not None and self.rows.source[row] >= 0 \
                and self.has_vector[row] and embedding is not None \
                and embedding.shape == (held.dim,):  # fmt: skip
            vector = np.asarray(embedding, dtype=np.float32).reshape(1, -1)
            return bool(held.index.holds(held.keys[row : row + 1], vector)[0])
        return _same_vector(self.embedding(row), embedding)

    def without_matrix(self, held: _IndexVectors) -> _Arrays:
        """These arrays with vectors read through ``held`` (same rows, same version). The
        memories built so far are not carried: their vectors are views of the matrix, and
        would keep all of it alive."""
        rows = replace(self.rows, decoded=Decoded()) if self.matrix is not None else self.rows
        return replace(self, rows=rows, matrix=None, held=held)

    def embedding(self, row: int) -> Vector | None:
        """The vector the memory of ``row`` has (without building the memory)."""
        memory_id = str(self.ids[row])
        held = self.rows.objects.get(memory_id) if self.rows.source[row] < 0 else None
        return held.embedding if held is not None else self._vector(row)

    def content(self, row: int) -> str:
        """The text of ``row`` (without building the memory)."""
        return self.rows.content(row, str(self.ids[row]))

    def view(self) -> Mapping[str, Memory]:
        """The memories by id, built on access."""
        return RowsView(self.position, self.memory)

    def _vector(self, row: int) -> Vector | None:
        if not self.has_vector[row]:
            return None
        vector: Vector = (self.matrix[row] if self.matrix is not None
                          else self.vectors(np.array([row], dtype=np.intp))[0])  # fmt: skip
        vector.flags.writeable = False
        return vector

    def patched(self, changed: Mapping[int, Memory]) -> _Arrays | None:
        """A copy with these rows overwritten; ``None`` if one no longer fits (a vector of
        another size). The vector matrix is copied only if a vector changed."""
        dim = self.dim
        if any(m.embedding is not None and m.embedding.shape != (dim,)
               for m in changed.values()):  # fmt: skip
            return None
        # a column is copied only if a value of it changes: a promotion, a count or a text
        # changes none, and then the filters' masks, counts and subsets stay valid too
        columns: dict[str, Any] = {name: getattr(self, name) for name in _SMALL_FIELDS}
        copied: set[str] = set()
        vectors_changed = any(not self.same_vector(row, m.embedding) for row, m in changed.items())
        # without the matrix a changed row is an object from now on: its vector is its own
        matrix = self.matrix
        if vectors_changed and self.matrix is not None:
            matrix = self.matrix.copy()
        for row, m in changed.items():
            if matrix is not None and matrix is not self.matrix:
                matrix[row] = 0.0 if m.embedding is None else m.embedding
            for name, value in _column_values(m).items():
                column = columns[name]
                if column[row] != value:
                    if name not in copied:
                        column = columns[name] = column.copy()
                        copied.add(name)
                    column[row] = value
        version = object() if vectors_changed else self.version
        carried: dict[str, Any] = {}
        if not copied and not vectors_changed:  # same columns, same vectors
            carried = {"masks": self.masks, "counted": self.counted, "subsets": self.subsets}
        earlier = {**self.earlier_subsets, **self.subsets}
        if vectors_changed:  # only the directions of their projections stay useful
            earlier = {flt: _Subset.directions(found) for flt, found in earlier.items()}
        return _Arrays(
            rows=self.rows.patched(changed), position=self.position, ids=self.ids,
            matrix=matrix, held=self.held, version=version, earlier_subsets=earlier,
            **columns, **carried,
        )  # fmt: skip

    def extend(self, more: Sequence[Memory], dim: int) -> _Arrays:
        """These rows followed by ``more``."""
        added = _columns(list(more), dim)
        columns: dict[str, Any] = {
            name: np.concatenate([getattr(self, name), getattr(added, name)])
            for name in _SMALL_FIELDS
        }
        assert added.matrix is not None
        fresh = [m.id for m in more]
        ids = self.ids.extended(fresh)
        return _Arrays(
            rows=self.rows.extended(more),
            position=self.position.extended(ids, fresh),
            ids=ids,
            matrix=None if self.matrix is None else np.concatenate([self.matrix, added.matrix]),
            held=None if self.held is None else self.held.extended(memory_keys(fresh)),
            **columns,
        )

    def without(self, rows: Iterable[int]) -> _Arrays:
        """These columns with ``rows`` left out (the others keep their order)."""
        gone = list(rows)
        keep = np.ones(len(self), dtype=bool)
        keep[gone] = False
        ids = self.ids.kept(keep)
        return _Arrays(
            rows=self.rows.without(keep, self.ids.take(gone)),
            position=self.position.kept(ids, keep),
            ids=ids,
            matrix=None if self.matrix is None else self.matrix[keep],
            held=None if self.held is None else self.held.kept(keep),
            **{name: getattr(self, name)[keep] for name in _SMALL_FIELDS},
        )

    def touched(self, by_row: Mapping[int, tuple[str, int]], at: datetime) -> _Arrays:
        """One access more per count of each row (row → (its id, the count)); no column
        array is copied (access fields are not indexed), so masks and subsets are kept."""
        return replace(self, rows=self.rows.touched(by_row, at))


def _column_values(m: Memory) -> dict[str, Any]:
    """``m``'s value in each column of :data:`_SMALL_FIELDS`."""
    return {
        "has_vector": m.embedding is not None,
        "memory_type": MEMORY_TYPES[m.memory_type],
        "kind": KINDS[m.kind],
        "project": m.project,
        "session_id": m.session_id,
        "key": m.key,
        "compressed": m.compressed,
        "muted": m.muted,
        "superseded": m.superseded_by is not None,
        "pinned": m.pinned,
        "importance": m.importance,
        "updated": m.updated_at.timestamp(),
    }


_SMALL_FIELDS = (
    "has_vector", "memory_type", "kind", "project", "session_id", "key",
    "compressed", "muted", "superseded", "pinned", "importance", "updated",
)  # fmt: skip


@dataclass(frozen=True)
class Snapshot:
    """One published state of a user's working set; never changed after publication.
    ``arrays`` and ``lexical`` (built over ``arrays.memories``) are ``None`` until a read
    needs them; ``ann`` is set once a large user's approximate index is ready, ``part``
    once its second index, over the typed learnings (``store/ann_kinds.py``), is."""

    rows: Mapping[str, Memory]
    arrays: _Arrays | None = None
    lexical: LexicalIndex | None = None
    ann: AnnRows | None = None
    part: AnnRows | None = None

    @classmethod
    def over(
        cls,
        arrays: _Arrays,
        lexical: LexicalIndex | None = None,
        ann: AnnRows | None = None,
        part: AnnRows | None = None,
    ) -> Snapshot:
        """A snapshot of ``arrays``, its ``rows`` built from them on access."""
        return cls(arrays.view(), arrays, lexical, ann, part)


class UserCache:
    """A user's memories with vectorised filter, order, search and BM25; safe to share
    between threads (see the module docstring)."""

    def __init__(
        self,
        memories: Iterable[Memory] = (),
        *,
        ann: IndexSlot | None = None,
        table: Table | None = None,
        lexical_stash: Stash | None = None,
        row_vectors: RowVectors | None = None,
    ) -> None:
        """``memories`` as objects, or ``table``: memories a store read as columns (built
        into objects only when a call returns them). ``lexical_stash``: where a large user's
        BM25 index is kept between processes (``store/lexical_file.py``). ``row_vectors``:
        reads the table's rows' float32 vectors from the store, so an indexed user keeps
        none in memory (an int8 index cannot score)."""
        if table is not None:
            self._snapshot = Snapshot.over(_columns_of(table))
        else:
            self._snapshot = Snapshot({m.id: m for m in memories})
        self._lock = threading.Lock()
        self._slot = ann
        self._lexical_stash = lexical_stash
        self._row_vectors = row_vectors
        #: (ids, vector version, centroid) of the last centroid computed
        self._centroid: tuple[object, object, Vector] | None = None
        #: Drop the float32 matrix once the index holds every loaded row (tests and
        #: benchmarks turn it off to compare).
        self.drop_matrix = True

    def __len__(self) -> int:
        return len(self._snapshot.rows)

    @property
    def snapshot(self) -> Snapshot:
        """The current snapshot (immutable: read it as long as you like)."""
        return self._snapshot

    # -- changes ----------------------------------------------------------------------------

    def upsert(self, memories: Iterable[Memory]) -> None:
        """Insert or replace by id. Built arrays are copied and patched (replacements) or
        extended (new ids) rather than rebuilt, so a write costs O(changed rows) plus the
        copy."""
        batch = list(memories)
        if not batch:
            return
        with self._lock:
            old = self._snapshot
            if old.arrays is not None:
                self._snapshot = _upserted(old, old.arrays, batch)
            else:
                self._snapshot = Snapshot({**old.rows, **{m.id: m for m in batch}})

    def delete(self, ids: Iterable[str]) -> None:
        """Remove these ids (unknown ids are ignored)."""
        with self._lock:
            old = self._snapshot
            gone = {i for i in ids if i in old.rows}
            if not gone:
                return
            if old.arrays is None:
                self._snapshot = Snapshot({i: m for i, m in old.rows.items() if i not in gone})
                return
            removed = [old.arrays.position[i] for i in gone]
            arrays = old.arrays.without(removed)
            keep = np.ones(len(old.arrays), dtype=bool)
            keep[removed] = False
            ann = None if old.ann is None else old.ann.without(keep)
            part = None if old.part is None else old.part.without(keep)
            # the BM25 index loses these documents (renumbered like the rows): not rebuilt
            lexical = None if old.lexical is None else old.lexical.without(keep)
            self._snapshot = Snapshot.over(arrays, lexical, ann, part)

    def touch(self, ids: Sequence[str], at: datetime) -> None:
        """Count one access of each id (once per occurrence); unknown ids are skipped. No
        column array but the access counts is copied: access fields are not indexed."""
        with self._lock:
            old = self._snapshot
            if old.arrays is not None:
                by_row: dict[int, tuple[str, int]] = {}
                found = old.arrays.position.rows_of(ids)  # one search for all
                for memory_id, row in zip(ids, found.tolist(), strict=True):
                    if row >= 0:
                        by_row[row] = (memory_id, by_row.get(row, (memory_id, 0))[1] + 1)
                if by_row:
                    arrays = old.arrays.touched(by_row, at)
                    self._snapshot = Snapshot.over(arrays, old.lexical, old.ann, old.part)
                return
            counts: dict[str, int] = {}
            for memory_id in ids:
                if memory_id in old.rows:
                    counts[memory_id] = counts.get(memory_id, 0) + 1
            if not counts:
                return
            rows = dict(old.rows)
            for memory_id, n in counts.items():
                memory = rows[memory_id]
                rows[memory_id] = _with_access(memory, memory.access_count + n, at)
            self._snapshot = Snapshot(rows)

    def recount(self, counts: Sequence[tuple[str, int, str | None]]) -> bool:
        """Set the access count and last access of every row to ``counts`` (per memory
        id, as the store holds them: another process counted uses); ``False``, changing
        nothing, if they are not exactly this working set's rows (the caller reloads it).
        No column array but the access counts is copied, as for :meth:`touch`."""
        with self._lock:
            old = self._snapshot
            arrays = old.arrays
            if arrays is None or len(counts) != len(arrays):
                return False
            listed = [i for i, _, _ in counts]
            rows = (np.arange(len(listed), dtype=np.intp) if arrays.ids.same(listed)
                    else arrays.position.rows_of(listed))  # fmt: skip
            if (rows < 0).any() or np.unique(rows).size != rows.size:
                return False
            found = np.fromiter((n for _, n, _ in counts), np.int64, len(counts))
            access, last = arrays.rows.counts.arrays()
            changed = np.flatnonzero(access[rows] != found)
            if not changed.size:
                return True
            at = rows[changed]
            access[at] = found[changed]
            last[at] = [parse_micros(counts[i][2]) for i in changed.tolist()]
            ids = [counts[i][0] for i in changed.tolist()]
            now = replace(arrays, rows=arrays.rows.recounted(access, last, ids))
            self._snapshot = Snapshot.over(now, old.lexical, old.ann, old.part)
            return True

    # -- reads ------------------------------------------------------------------------------

    def get(self, ids: Sequence[str]) -> list[Memory]:
        """These memories in the order given; unknown ids skipped."""
        rows = self._snapshot.rows
        return [rows[i] for i in ids if i in rows]

    def query(
        self, flt: MemoryFilter = ALL, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """Memories passing ``flt``, most recently updated first (ties: larger id first)."""
        arrays = self._built().arrays
        assert arrays is not None
        rows = np.flatnonzero(self._mask(arrays, flt))
        if rows.size == 0:
            return []
        updated = arrays.updated[rows]
        if np.unique(updated).size == updated.size:  # no tie: the ids need not be made
            order = rows[np.argsort(updated, kind="stable")[::-1]]
        else:
            order = rows[np.lexsort((arrays.ids[rows], updated))[::-1]]
        end = None if limit is None else offset + limit
        return arrays.memories_of(order[offset:end].tolist())

    def count(self, flt: MemoryFilter = ALL) -> int:
        """How many memories pass ``flt``."""
        arrays = self._built().arrays
        assert arrays is not None
        return int(self._mask(arrays, flt).sum())

    def search(self, vector: Vector, k: int, flt: MemoryFilter = ALL) -> list[tuple[Memory, float]]:
        """The ``k`` best cosine matches among memories with a vector passing ``flt``."""
        return self.search_many(vector, [(k, flt)])[0]

    def search_many(
        self, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, from one product of the query with the
        matrix (the gate asks for a candidate pool and every learning at once); through the
        approximate index for a large user once it is ready (see the module docstring)."""
        snapshot = self._built()
        arrays = snapshot.arrays
        assert arrays is not None
        query = np.asarray(vector, dtype=np.float32)
        if not arrays.has_vector.any() or arrays.dim != query.shape[0]:
            return [[] for _ in searches]
        ann = self._ann_rows(snapshot)
        if ann is not None:
            part, expected = self._part_rows(snapshot, searches)
            return _approximate(arrays, ann, query, searches, self._mask, part, expected)
        with _single_threaded_blas():
            sims = arrays.products(query)
        return [
            _top(arrays, sims, self._mask(arrays, flt) & arrays.has_vector, k) if k > 0 else []
            for k, flt in searches
        ]

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Start the approximate index if this user is large enough, and wait (up to
        ``timeout`` seconds) until searches use it; whether they do. The typed learnings'
        own index (``store/ann_kinds.py``) is waited for too, if the user gets one."""
        snapshot = self._built()
        if self._ann_rows(snapshot) is None:
            if self._slot is None or not self._large(snapshot):
                return False
            self._slot.wait(timeout)
            if self._ann_rows(self._built()) is None:
                return False
        part_slot = self._slot.part if self._slot is not None else None
        learnings = [(1, ann_kinds.FILTER)]
        if part_slot is not None and self._part_rows(self._built(), learnings) == (None, True):
            part_slot.wait(timeout)  # the learnings' index too, if the user gets one
            self._part_rows(self._built(), learnings)
        return True

    def lexical_search(
        self, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` best BM25 matches passing ``flt`` (statistics over all the user's
        memories); memories sharing no term with ``text`` are left out."""
        snapshot = self._built()
        arrays = snapshot.arrays
        assert arrays is not None
        if k <= 0 or not len(arrays):
            return []
        lexical = snapshot.lexical
        if lexical is None:
            lexical = self._lexical(arrays)
            self._publish(snapshot, replace(snapshot, lexical=lexical))
        rows, scores = lexical.top(text, k, self._mask(arrays, flt))
        found = arrays.memories_of(rows.tolist())
        return list(zip(found, scores.tolist(), strict=True))

    def _lexical(self, arrays: _Arrays) -> LexicalIndex:
        """A BM25 index of the rows: the user's saved one if it was built from exactly these
        texts, else built (and, for a large user, saved on another thread; not a daemon: a
        process that exits at once still leaves it for the next one)."""
        stash = self._lexical_stash
        if stash is None or len(arrays) < lexical_file.PERSIST_MIN_DOCUMENTS:
            return LexicalIndex(arrays.rows.contents(arrays.ids.tolist()))
        digest = arrays.rows.contents_digest()  # the texts as loaded: known, not hashed
        documents = None if digest is not None else arrays.rows.contents(arrays.ids.tolist())
        expected = (lexical_file.fingerprint_of(digest) if digest is not None
                    else lexical_file.fingerprint(documents or []))  # fmt: skip
        try:
            index = lexical_file.load_matching(stash.read(), expected, len(arrays))
        except EngrainError:  # as if none were saved
            index = None
        if index is None:
            if documents is None:
                documents = arrays.rows.contents(arrays.ids.tolist())
            index = LexicalIndex(documents)
            built, texts = index, documents
            stash.later(lambda: _stash_lexical(stash, built, texts))
        else:
            heap.release()  # the saved copy's bytes, read and dropped
        return index

    def centroid(self) -> Vector | None:
        """The mean of the memories' vectors, or ``None`` without any."""
        arrays = self._built().arrays
        assert arrays is not None
        if not arrays.has_vector.any():
            return None
        if arrays.matrix is not None:
            return np.asarray(arrays.matrix[arrays.has_vector].mean(axis=0), dtype=np.float32)
        # without the matrix every vector is read (100,000 rows: ~0.5 s): once per set of
        # rows and vectors (the ids array and the vector version change with them)
        kept = self._centroid
        if kept is not None and kept[0] is arrays.ids and kept[1] is arrays.version:
            return kept[2]
        rows = np.flatnonzero(arrays.has_vector)
        total = np.zeros(arrays.dim, dtype=np.float64)
        for start in range(0, rows.size, 16_384):
            total += arrays.vectors(rows[start : start + 16_384]).sum(axis=0, dtype=np.float64)
        centroid = np.asarray(total / rows.size, dtype=np.float32)
        centroid.flags.writeable = False
        self._centroid = (arrays.ids, arrays.version, centroid)
        return centroid

    # -- internals --------------------------------------------------------------------------

    def _built(self) -> Snapshot:
        """The current snapshot with its arrays built (and published, if still current)."""
        snapshot = self._snapshot
        if snapshot.arrays is not None:
            return snapshot
        memories = list(snapshot.rows.values())
        dim = next((m.embedding.shape[0] for m in memories if m.embedding is not None), 0)
        built = Snapshot.over(_columns(memories, dim))
        self._publish(snapshot, built)
        return built

    def _publish(self, old: Snapshot, new: Snapshot) -> bool:
        """Make ``new`` current if ``old`` still is (a write since then wins); whether it
        did."""
        with self._lock:
            if self._snapshot is old:
                self._snapshot = new
                return True
            return False

    def _large(self, snapshot: Snapshot) -> bool:
        arrays = snapshot.arrays
        slot = self._slot
        return (slot is not None and arrays is not None
                and int(arrays.has_vector.sum()) >= slot.min_vectors)  # fmt: skip

    def _ann_rows(self, snapshot: Snapshot) -> AnnRows | None:
        """The snapshot's record of the rows the index holds, if the user is large and the
        index ready; starts the job that builds, loads or patches it when needed (searches
        stay exact meanwhile)."""
        slot = self._slot
        if slot is None or not self._large(snapshot):
            return None
        ann = snapshot.ann
        if ann is not None and ann.index is slot.index:
            arrays = snapshot.arrays
            assert arrays is not None
            _, _, held, with_vector = _counted(arrays, ann.held, None, self._mask)
            if with_vector - held > PATCH_AFTER:
                slot.start(self._sync)
            return ann
        slot.start(self._sync)
        # inline (no background) the job may have published already
        ann = self._snapshot.ann
        return ann if ann is not None and ann.index is slot.index else None

    def _sync(self) -> None:
        """The index job: bring the index up to the current snapshot (load, build, patch or
        rebuild it) and record which rows it holds on the current snapshot. Retried if a
        write changed the rows or vectors meanwhile (counted uses do not: they keep both)."""
        slot = self._slot
        assert slot is not None
        for _ in range(3):
            snapshot = self._built()
            arrays = snapshot.arrays
            assert arrays is not None
            with_vector = np.flatnonzero(arrays.has_vector)
            ann = snapshot.ann
            keys = ann.keys if ann is not None else memory_keys(arrays.ids.tolist())
            index, held = _brought_up(slot, arrays, keys, with_vector, ann)
            rows_held = np.zeros(len(arrays), dtype=bool)
            rows_held[with_vector] = held
            if self._attach(arrays, AnnRows.of(index, keys, rows_held)):
                if len(arrays) >= HEAP_RELEASE_ROWS:
                    heap.release()  # the matrix dropped, the saved index's bytes freed
                return

    def _attach(self, arrays: _Arrays, ann: AnnRows) -> bool:
        """Record ``ann`` (made for ``arrays``) on the current snapshot if it still has the
        same rows and vectors (the same id array and vector version: counted uses and
        patches of other fields keep them); whether it did. If the index holds every loaded
        row's vector, the snapshot's matrix is dropped: they are read from the index (from
        this one, if they were read from an older one)."""
        with self._lock:
            current = self._snapshot
            now = current.arrays
            if now is None or now.ids is not arrays.ids or now.version is not arrays.version:
                return False
            loaded_held = not bool(((now.rows.source >= 0) & now.has_vector & ~ann.held).any())
            # an int8 index cannot score: without the store's rows the matrix stays
            readable = self._row_vectors is not None or not ann.index.lossy
            # vectors read from an index the slot has since replaced: from the new one
            # (the old one is then freed), once it holds them all
            moved = now.held is not None and now.held.index is not ann.index
            if loaded_held and readable and ((now.matrix is not None and self.drop_matrix)
                                             or moved):  # fmt: skip
                held = _IndexVectors(ann.index, ann.keys, now.dim, self._row_vectors)
                now = now.without_matrix(held)
                self._snapshot = replace(current, rows=now.view(), arrays=now, ann=ann)
            else:
                self._snapshot = replace(current, ann=ann)
            return True

    def _part_rows(
        self, snapshot: Snapshot, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> tuple[AnnRows | None, bool]:
        """The snapshot's record of the rows the second index (the typed learnings',
        ``store/ann_kinds.py``) holds, if one of ``searches`` can use it and it is ready,
        and whether the user has enough such rows for one; starts the job that loads,
        builds or patches it when needed (those searches go through the first index
        meanwhile)."""
        slot = self._slot
        part_slot = None if slot is None else slot.part
        arrays = snapshot.arrays
        if part_slot is None or arrays is None \
                or not any(k > 0 and ann_kinds.covers(flt) for k, flt in searches):  # fmt: skip
            return None, False
        found = snapshot.part
        if found is not None and found.index is part_slot.index:
            _, _, held, with_vector = _counted(arrays, found.held, ann_kinds.FILTER, self._mask)
            if with_vector - held > PATCH_AFTER:
                part_slot.start(self._sync_part)
            return found, True
        rows = int((self._mask(arrays, ann_kinds.FILTER) & arrays.has_vector).sum())
        if rows < ann_kinds.min_rows(part_slot.min_vectors):
            return None, False
        part_slot.start(self._sync_part)
        found = self._snapshot.part  # inline (no background) the job may have published
        return (found if found is not None and found.index is part_slot.index else None), True

    def _sync_part(self) -> None:
        """The second index's job, as :meth:`_sync` for the first: bring it up to the
        current snapshot's rows of the indexed kinds (load and check, build, patch or
        rebuild it) and record which rows it holds. Retried if a write changed the rows or
        vectors meanwhile."""
        slot = self._slot
        part_slot = None if slot is None else slot.part
        assert part_slot is not None
        for _ in range(3):
            snapshot = self._built()
            arrays = snapshot.arrays
            assert arrays is not None
            rows = np.flatnonzero(self._mask(arrays, ann_kinds.FILTER) & arrays.has_vector)
            ann, found = snapshot.ann, snapshot.part
            keys = (ann.keys if ann is not None else found.keys if found is not None
                    else memory_keys(list(arrays.ids)))  # fmt: skip
            index, held = _brought_up(part_slot, arrays, keys, rows, found)
            rows_held = np.zeros(len(arrays), dtype=bool)
            rows_held[rows] = held
            rows_held.flags.writeable = False
            if ann is not None and ann.keys is keys:  # the same keys: their order is known
                record = AnnRows(index, keys, rows_held, ann.sorted_keys, ann.order)
            else:
                record = AnnRows.of(index, keys, rows_held)
            with self._lock:
                current = self._snapshot
                now = current.arrays
                if now is not None and now.ids is arrays.ids and now.version is arrays.version:
                    self._snapshot = replace(current, part=record)
                    return

    @staticmethod
    def _mask(a: _Arrays, flt: MemoryFilter) -> BoolArray:
        """The rows passing ``flt`` (read-only: it is shared through ``a.masks``)."""
        mask = a.masks.get(flt)
        if mask is None:
            mask = _filter_rows(a, flt)
            mask.flags.writeable = False
            if len(a.masks) >= _MASKS_MAX:
                a.masks.clear()
            a.masks[flt] = mask
        return mask


_MASKS_MAX = 32
#: After the index job of a working set this large, freed heap is handed back
#: (``store/heap.py``: a trim costs milliseconds; smaller sets free little).
HEAP_RELEASE_ROWS = 5_000


def _filter_rows(a: _Arrays, flt: MemoryFilter) -> BoolArray:
    """A fresh boolean row mask of the memories passing ``flt``."""
    mask = np.ones(len(a), dtype=bool)
    if flt.project is not None:
        mask &= a.project == flt.project
    if flt.memory_types is not None:
        mask &= _codes(MEMORY_TYPES, flt.memory_types)[a.memory_type]
    if flt.kinds is not None:
        mask &= _codes(KINDS, flt.kinds)[a.kind]
    if flt.session_id is not None:
        mask &= a.session_id == flt.session_id
    if flt.key is not None:
        mask &= a.key == flt.key
    if not flt.include_compressed:
        mask &= ~a.compressed
    if not flt.include_muted:
        mask &= ~a.muted
    if not flt.include_superseded:
        mask &= ~a.superseded
    if flt.min_importance is not None:
        mask &= a.importance >= flt.min_importance
    if flt.pinned is not None:
        mask &= a.pinned == flt.pinned
    return mask


def _brought_up(
    slot: IndexSlot,
    arrays: _Arrays,
    keys: Keys,
    rows: npt.NDArray[np.intp],
    known: AnnRows | None,
) -> tuple[VectorIndex, BoolArray]:
    """``slot``'s index made to hold the vectors of ``rows`` (keyed ``keys[rows]``), with
    which of them it holds: prepared (a saved index loaded and checked, or built) when it
    has none of this dimension; else rebuilt when more than :data:`REBUILD_SHARE` of them
    are missing, patched when some are. ``known``: a published record of this index (its
    held rows need no check)."""
    index = slot.index
    if index is None or index.ndim != arrays.dim:
        return slot.prepare(keys[rows], _with_vector(arrays, rows))
    if known is not None and known.index is index:
        held = known.held[rows]
    else:
        held = index.holds(keys[rows], _with_vector(arrays, rows))
    missing = np.flatnonzero(~held)
    if missing.size > REBUILD_SHARE * rows.size:
        return slot.rebuild(keys[rows], _with_vector(arrays, rows)), np.ones(rows.size, bool)
    if missing.size:
        slot.update(keys[rows][missing], arrays.vectors(rows[missing]))
        held = np.ones(rows.size, dtype=bool)
    return index, held


def _with_vector(arrays: _Arrays, rows: npt.NDArray[np.intp]) -> Matrix:
    """The vectors of ``rows`` (the rows with a vector): the matrix itself if that is every
    row and it is kept, else a copy."""
    if arrays.matrix is not None and rows.size == len(arrays):
        return arrays.matrix
    return arrays.vectors(rows)


def _same_vector(a: Vector | None, b: Vector | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a is b or bool(np.array_equal(a, b))


def _codes(codes: Mapping[Any, int], members: Iterable[Any]) -> BoolArray:
    """A lookup table over the codes: true at the codes of ``members``."""
    table = np.zeros(len(codes), dtype=bool)
    table[[codes[m] for m in members]] = True
    return table


@lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def _single_threaded_blas() -> Any:
    """One BLAS thread for the search product. OpenBLAS's idle threads spin after a call and
    steal the cores onnxruntime needs for the next query embedding: at 10,000 memories this
    halves context() latency on a 2-core machine (bench/latency.py), for ~0.3 ms here."""
    return _blas().limit(limits=1, user_api="blas")


def _stash_lexical(stash: Stash, index: LexicalIndex, documents: list[str]) -> None:
    """Save a user's BM25 index (on its own thread); if that fails, the next process
    builds it again."""
    with suppress(EngrainError):
        stash.write(lexical_file.dump(index, documents))


#: A filter keeping at most this many rows is searched exactly over those rows alone
#: (copying 5,000 vectors and their product cost ~1.5 ms, about an index search for a few
#: thousand candidates).
EXACT_SUBSET = 5_000
#: Candidates asked of the index per search at most (8 ms for 4,096 at 100,000 vectors): a
#: filter needing more is searched exactly over the rows it keeps.
FETCH_MAX = 2_048
#: Over-fetch: candidates asked = k / share of the index's vectors passing x factor + 16
#: (nearest neighbours pass a filter less often than the average row), the factor
#: 1 + OVERFETCH_SLOPE x (1 - share), at most OVERFETCH: 2 for a filter keeping half the
#: rows or fewer, 1 for a filter keeping every row (the gate's pool on the benchmark's
#: corpus), where asking for twice k gave the same R@50 (0.9974 / 0.9984 against 0.9974 /
#: 0.9982 on the 100,000-memory corpus, tuning / held-out queries) for ~0.5 ms more per
#: search (docs/scale.md, "Session 8").
OVERFETCH = 2.0
OVERFETCH_SLOPE = 2.0


def _approximate(
    arrays: _Arrays,
    ann: AnnRows,
    query: npt.NDArray[np.float32],
    searches: Sequence[tuple[int, MemoryFilter]],
    mask_of: Callable[[_Arrays, MemoryFilter], BoolArray],
    part: AnnRows | None = None,
    part_expected: bool = False,
) -> list[list[tuple[Memory, float]]]:
    """:meth:`UserCache.search_many` through the index: one index search sized for the most
    demanding filter (over-fetched by how few of the index's vectors each filter keeps),
    its candidates mapped onto ``arrays`` and kept if they pass, are held with their current
    vector and can be among the k best by their int8 similarity (``store/reach.py``), and
    score exactly; plus the rows passing that the index does not hold. A filter keeping
    few rows, or too few among the candidates, is searched exactly over its rows. A filter
    of the typed learnings' kinds goes through their own index (``part``,
    ``store/ann_kinds.py``) when there is one, and through the first while one is being
    made (``part_expected``)."""
    covered = [ann_kinds.covers(flt) for _, flt in searches]
    records = [part if part is not None and covers else ann for covers in covered]
    masks, counts = [], []
    for (k, flt), record, covers in zip(searches, records, covered, strict=True):
        size = max(len(record.index), 1)
        _, mask, passing, kept = _counted(arrays, record.held, flt, mask_of)
        masks.append(mask)
        share = passing / size
        factor = min(OVERFETCH, 1.0 + OVERFETCH_SLOPE * (1.0 - share))
        if record is part:
            factor = max(factor, ann_kinds.OVERFETCH)
        count = int(k / max(share, 1 / size) * factor) + 16
        # a filter keeping a small share is searched exactly over its (cached) rows: the
        # index's candidates pass it less often than its share (a query's neighbours are
        # facts when the filter keeps learnings), so over-fetching rarely yields k
        # ... unless it keeps more than SUBSET_MAX rows (a million memories' learnings: a
        # copy of 220,000 vectors and a product over them per call): through the index then
        # ... or it has an index of its own (the learnings), or will have once it is ready
        # (through the first index meanwhile: a copy would outlive the wait)
        own = covers and (part is not None or part_expected)
        small = kept <= (EXACT_SUBSET if own else
                         max(EXACT_SUBSET, min(SUBSET_SHARE * len(mask), SUBSET_MAX)))  # fmt: skip
        exact = k <= 0 or passing == 0 or small or (count > FETCH_MAX and kept <= SUBSET_MAX)
        counts.append(0 if exact else min(count, size, FETCH_RETRY))
    # one walk per index, as wide as its most demanding search
    walks: dict[int, tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]] = {}
    for record, count in zip(records, counts, strict=True):
        widest = max(c for r, c in zip(records, counts, strict=True) if r is record)
        if count and id(record) not in walks:
            keys, similar = record.index.search_similar(query, widest)
            walks[id(record)] = (record.rows_of(keys), similar)
    out: list[list[tuple[Memory, float]]] = []
    with _single_threaded_blas():
        for (k, flt), mask, count, record in zip(searches, masks, counts, records, strict=True):
            if k <= 0:
                out.append([])
                continue
            size = max(len(record.index), 1)
            walk = walks.get(id(record)) if count else None
            if walk is not None:
                near, near_similar = _passing(walk[0][:count], walk[1][:count], mask,
                                              record.held)  # fmt: skip
                if near.size < k and count < size and int(mask.sum()) > SUBSET_MAX:
                    # too few passed: once more with more candidates, not a huge exact search
                    count = min(size, FETCH_RETRY, max(8 * count, FETCH_MAX))
                    more, more_similar = record.index.search_similar(query, count)
                    near, near_similar = _passing(record.rows_of(more), more_similar, mask,
                                                  record.held)  # fmt: skip
                if near.size >= k or count >= size:
                    # only the candidates that can be among the k best are read and scored
                    near = near[reachable(near_similar, k)]
                    unheld = np.flatnonzero(mask & ~record.held)
                    rows = np.unique(np.concatenate([near, unheld]))
                    vectors = _scored_vectors(arrays, rows)
                    out.append(_top_rows(arrays, rows, vectors @ query, k, vectors))
                    continue
            # few rows pass, or too few near the query: exact over the rows passing (a
            # large filter's: over the best of them by a coarse pass, store/coarse.py)
            out.append(_subset_top(arrays, _subset(arrays, flt, mask), query, k))
    return out


def _subset_top(
    arrays: _Arrays, subset: _Subset, query: npt.NDArray[np.float32], k: int
) -> list[tuple[Memory, float]]:
    """The ``k`` best of a filter's rows (``subset``) by exact score, from its float32
    copy (a large filter's: among the best by its coarse projection, store/coarse.py)."""
    rows, copied, rough = subset
    assert copied is not None
    picked = None if rough is None else rough.candidates(query, k)
    if picked is not None:
        rows, copied = rows[picked], copied[picked]
    return _top_rows(arrays, rows, copied @ query, k, copied)


def _scored_vectors(arrays: _Arrays, rows: npt.NDArray[np.intp]) -> Matrix:
    """The vectors of candidate ``rows`` to score exactly: a memory kept built gives its
    own (nothing read: ~20 % of a large user's candidates at 100,000 memories), the
    others are read from the store with their texts (the best k are built)."""
    if arrays.matrix is not None or not len(rows):
        return arrays.vectors(rows, texts=True)
    kept = arrays.rows.decoded.get_many(arrays.ids.take(rows))
    dim = arrays.dim
    have = np.array([m is not None and m.embedding is not None and m.embedding.shape == (dim,)
                     for m in kept], dtype=bool)  # fmt: skip
    if not have.any():
        return arrays.vectors(rows, texts=True)
    out = np.empty((len(rows), dim), dtype=np.float32)
    out[have] = np.stack([m.embedding for m in kept if m is not None and m.embedding is not None
                          and m.embedding.shape == (dim,)])  # fmt: skip
    if not have.all():
        out[~have] = arrays.vectors(rows[~have], texts=True)
    return out


def _counted(
    arrays: _Arrays,
    held: BoolArray,
    flt: MemoryFilter | None,
    mask_of: Callable[[_Arrays, MemoryFilter], BoolArray],
) -> tuple[BoolArray, BoolArray, int, int]:
    """For the rows passing ``flt`` (``None``: every row) with a vector: ``held``, their
    mask, how many of them ``held`` marks, how many there are; computed once per set of
    columns and index record (``_Arrays.counted``)."""
    found = arrays.counted.get(flt)
    if found is not None and found[0] is held:
        return found
    if flt is None:
        mask = arrays.has_vector
    else:
        mask = mask_of(arrays, flt) & arrays.has_vector
        mask.flags.writeable = False
    found = (held, mask, int((mask & held).sum()), int(mask.sum()))
    if len(arrays.counted) >= _MASKS_MAX:
        arrays.counted.clear()
    arrays.counted[flt] = found
    return found


def _passing(
    rows: npt.NDArray[np.intp],
    similar: npt.NDArray[np.float32],
    mask: BoolArray,
    held: BoolArray,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """The candidate ``rows`` (-1: no row) passing ``mask`` and held by the index, with
    their ``similar`` (one per candidate)."""
    known = rows >= 0
    rows, similar = rows[known], similar[known]
    keep = mask[rows] & held[rows]
    return rows[keep], similar[keep]


#: Filters keeping at most this share of the rows, and at most SUBSET_MAX rows, are searched
#: exactly over them (with their vectors copied once by :func:`_subset`); at most this many
#: filters' copies are kept (60% of the matrix again, at most).
SUBSET_SHARE = 0.3
SUBSET_MAX = 50_000
SUBSETS_MAX = 2
#: Candidates asked of the index for a filter keeping more than SUBSET_MAX rows, at most
#: (a second search when the first yields fewer than k passing).
FETCH_RETRY = 16_384


def _subset(arrays: _Arrays, flt: MemoryFilter, mask: BoolArray) -> _Subset:
    """The rows passing ``flt`` (``mask``) and their vectors, copied once per set of
    columns for a filter keeping a small share of them, with a coarse projection if it
    keeps at least :data:`~engrain.store.coarse.MIN_ROWS` (``store/coarse.py``)."""
    cached = arrays.subsets.get(flt)
    if cached is not None:
        return cached
    rows = np.flatnonzero(mask)
    earlier = arrays.earlier_subsets.get(flt)  # same vectors: valid if the same rows
    if earlier is not None and earlier.vectors is not None and np.array_equal(earlier.rows, rows):
        found = earlier
    else:
        found = _Subset(rows, arrays.vectors(rows))
    if rows.size > SUBSET_SHARE * len(arrays):
        return found  # searched once, not kept: no projection either
    if found.coarse is None and rows.size >= coarse.MIN_ROWS and found.vectors is not None:
        basis = None if earlier is None or earlier.coarse is None else earlier.coarse.basis
        if basis is not None and basis.shape[1] != found.vectors.shape[1]:
            basis = None
        found = found._replace(coarse=Projection.of(found.vectors, basis))
    if len(arrays.subsets) >= SUBSETS_MAX:
        arrays.subsets.clear()
    arrays.subsets[flt] = found
    return found


def _top_rows(
    arrays: _Arrays,
    rows: npt.NDArray[np.intp],
    scores: npt.NDArray[np.float32],
    k: int,
    vectors: Matrix | None = None,
) -> list[tuple[Memory, float]]:
    """The ``k`` best of ``rows`` by ``scores`` (one per row), best first; ties keep row
    order, as in :func:`_top`. ``vectors``: the rows' vectors the scores came from (the
    memories built get theirs, not read again)."""
    if rows.size == 0:
        return []
    order = np.argsort(rows, kind="stable")
    rows, scores = rows[order], scores[order]
    top = np.argpartition(-scores, k - 1)[:k] if rows.size > k else np.arange(rows.size)
    top = top[np.argsort(-scores[top], kind="stable")]
    picked = None if vectors is None or arrays.matrix is not None else vectors[order[top]]
    found = arrays.memories_of(rows[top].tolist(), picked)
    return list(zip(found, scores[top].tolist(), strict=True))


def _top(
    arrays: _Arrays, scores: npt.NDArray[np.float32], mask: BoolArray, k: int
) -> list[tuple[Memory, float]]:
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    picked = scores[rows]
    top = np.argpartition(-picked, k - 1)[:k] if rows.size > k else np.arange(rows.size)
    top = top[np.argsort(-picked[top], kind="stable")]
    found = arrays.memories_of(rows[top].tolist())
    return list(zip(found, picked[top].tolist(), strict=True))


def _columns(
    memories: list[Memory], dim: int, vectors: npt.NDArray[np.float32] | None = None
) -> _Arrays:
    """Column arrays for ``memories``; vectors of another dimension count as missing.
    ``vectors``: every memory's vector, in order, to use as the matrix as it is."""
    if vectors is not None:
        matrix = vectors
        has_vector = np.ones(len(memories), dtype=bool)
    else:
        matrix = np.zeros((len(memories), dim), dtype=np.float32)
        has_vector = np.zeros(len(memories), dtype=bool)
        for row, memory in enumerate(memories):
            if memory.embedding is not None and memory.embedding.shape == (dim,):
                matrix[row] = memory.embedding
                has_vector[row] = True
    listed = [m.id for m in memories]
    ids = IdColumn.of(listed)
    return _Arrays(
        rows=Rows.of_objects(memories),
        position=IdPositions(ids, listed),
        ids=ids,
        matrix=matrix,
        has_vector=has_vector,
        # object, not fixed-width str: patch() may write a longer value into a row
        memory_type=np.array([MEMORY_TYPES[m.memory_type] for m in memories], dtype=np.int8),
        kind=np.array([KINDS[m.kind] for m in memories], dtype=np.int8),
        project=np.array([m.project for m in memories], dtype=object),
        session_id=np.array([m.session_id for m in memories], dtype=object),
        key=np.array([m.key for m in memories], dtype=object),
        compressed=np.array([m.compressed for m in memories], dtype=bool),
        muted=np.array([m.muted for m in memories], dtype=bool),
        superseded=np.array([m.superseded_by is not None for m in memories], dtype=bool),
        pinned=np.array([m.pinned for m in memories], dtype=bool),
        importance=np.array([m.importance for m in memories], dtype=np.float64),
        updated=np.array([m.updated_at.timestamp() for m in memories], dtype=np.float64),
    )


def _columns_of(table: Table) -> _Arrays:
    """Column arrays of memories a store read as columns (none of them built)."""
    c = table.columns
    ids = IdColumn(c.ids)  # the table's own blob, not a copy
    # the table's arrays themselves where the type is already the column's (~1.3 MB at
    # 100,000): a patch copies a column before it writes to it, so neither changes
    return _Arrays(
        rows=Rows.of_columns(c, table.access, table.last),
        position=IdPositions(ids),
        ids=ids,
        matrix=table.matrix,
        has_vector=table.has_vector,
        memory_type=c.memory_type.astype(np.int8, copy=False),
        kind=c.kind.astype(np.int8, copy=False),
        project=c.project.objects(),
        session_id=c.session_id.objects(),
        key=c.key.objects(),
        compressed=c.compressed.astype(bool, copy=False),
        muted=c.muted.astype(bool, copy=False),
        superseded=c.superseded_by.codes >= 0,
        pinned=c.pinned.astype(bool, copy=False),
        importance=c.importance.astype(np.float64, copy=False),
        # seconds, as datetime.timestamp() gives them for the rows patched later
        updated=c.updated / 1e6,
    )


def _upserted(old: Snapshot, arrays: _Arrays, batch: Sequence[Memory]) -> Snapshot:
    """The snapshot after upserting ``batch`` into ``old`` (whose arrays are built)."""
    changed: dict[int, Memory] = {}
    fresh: dict[str, Memory] = {}
    edited: dict[int, tuple[str, str]] = {}  # row → (old text, new text)
    for memory in batch:
        row = arrays.position.get(memory.id)
        if row is None:
            fresh[memory.id] = memory
            continue
        previous = changed[row].content if row in changed else arrays.content(row)
        if previous != memory.content:
            edited[row] = (edited.get(row, (previous, ""))[0], memory.content)
        changed[row] = memory
    revectored = [row for row, m in changed.items() if not arrays.same_vector(row, m.embedding)]
    new = arrays.patched(changed) if changed else arrays
    if new is not None and fresh:
        dim = new.dim
        if dim == 0 or any(m.embedding is not None and m.embedding.shape != (dim,)
                           for m in fresh.values()):  # fmt: skip
            new = None  # the first vectors, or another size: rebuilt lazily
        else:
            new = new.extend(list(fresh.values()), dim)
    if new is None:
        return Snapshot({**old.rows, **{m.id: m for m in batch}})
    ann = part = None
    fresh_keys = memory_keys(list(fresh)) if old.ann is not None or old.part is not None else None
    if old.ann is not None and fresh_keys is not None:
        ann = old.ann.after_write(revectored, fresh_keys)
    if old.part is not None and fresh_keys is not None:
        part = old.part.after_write(revectored, fresh_keys)
    lexical = None
    if old.lexical is not None:
        # edited rows keep their place; new memories are appended to the arrays in
        # ``fresh`` order, and so to the index: its document numbers stay the rows
        lexical = old.lexical
        if edited:
            lexical = lexical.replaced(edited)
        if fresh:
            lexical = lexical.extended([m.content for m in fresh.values()])
    return Snapshot.over(new, lexical, ann, part)
