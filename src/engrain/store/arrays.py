"""The column arrays of one user's working set (``store/cache.py``): each memory's filter
fields, vector and row as numpy columns, the memories themselves built only when asked for
(``store/rows.py``), and the masks of the filters a call asks for.

An :class:`Arrays` is never changed once built: a write makes the next one from it
(:meth:`Arrays.patched`, :meth:`Arrays.extend`, :meth:`Arrays.without`,
:meth:`Arrays.touched`), copying only the columns whose values change, so a reader holding
one needs no lock. Its caches (``masks``, ``counted``, ``subsets``) are filled by readers
and depend only on the columns they were computed from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from engrain.model import Kind, Memory, MemoryFields, MemoryType, Vector
from engrain.store import built, found
from engrain.store.ann import Keys, VectorIndex, memory_keys
from engrain.store.base import MemoryFilter
from engrain.store.coarse import Projection
from engrain.store.columns import Columns, Table
from engrain.store.ids import IdColumn, IdPositions
from engrain.store.rows import Decoded, Rows, RowsView

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


class Subset(NamedTuple):
    """The rows a filter keeps (with a vector), their vectors, and for a large filter a
    coarse projection of them (``store/coarse.py``); ``vectors`` is ``None`` for what is
    carried only for its projection's directions."""

    rows: npt.NDArray[np.intp]
    vectors: npt.NDArray[np.float32] | None
    coarse: Projection | None = None

    @classmethod
    def directions(cls, subset: Subset) -> Subset:
        """What of ``subset`` stays valid once vectors changed: its projection's
        directions (any orthonormal basis keeps the scores exact)."""
        coarse = subset.coarse
        kept = None if coarse is None else Projection(coarse.basis, coarse.coords[:0])
        return cls(np.zeros(0, dtype=np.intp), None, kept)


@dataclass(frozen=True)
class IndexVectors:
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

    def extended(self, keys: Keys) -> IndexVectors:
        """For these rows followed by rows with ``keys``."""
        return replace(self, keys=np.concatenate([self.keys, keys]))

    def kept(self, keep: BoolArray) -> IndexVectors:
        """For the rows kept."""
        return replace(self, keys=self.keys[keep])


@dataclass(frozen=True)
class Arrays:
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
    held: IndexVectors | None = None
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
    subsets: dict[MemoryFilter, Subset] = field(default_factory=dict, compare=False, repr=False)
    #: The subsets of the arrays these were patched from: one is reused if no vector
    #: changed and its filter still keeps the same rows (a promotion rarely changes who is
    #: a learning; without the matrix a new copy is read from the store: ~22,000 rows),
    #: else only its projection's directions are.
    earlier_subsets: Mapping[MemoryFilter, Subset] = field(
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

    def memories_of(
        self,
        rows: Sequence[int],
        vectors: Matrix | None = None,
        *,
        ids: Sequence[str] | None = None,
    ) -> list[Memory]:
        """:meth:`memory` of each of ``rows``, built together. ``vectors``: the rows'
        vectors if the caller has just read them (its search scored them), so a memory
        that is not kept built is not read from the store a second time; else only those
        of the rows not kept built are read, in one go. ``ids``: the rows' ids if the
        caller has made them (:meth:`ids_of`), so they are not made again."""
        ids = self.ids_of(rows, ids)
        return built.rows_memories(self.rows, rows, ids, self._vectors_of(rows, ids, vectors))

    def found_of(
        self,
        rows: Sequence[int],
        vectors: Matrix | None = None,
        *,
        ids: Sequence[str] | None = None,
        defer_texts: bool = False,
    ) -> list[MemoryFields]:
        """The fields of each of ``rows`` (``store/found.py``): the memory where it is built
        already, else the row's columns read when asked, its memory built only if the
        caller asks for it. ``vectors`` and ``ids`` as for :meth:`memories_of`;
        ``defer_texts``: texts kept in the store read when first asked for, not now."""
        ids = self.ids_of(rows, ids)
        return found.found(self.rows, rows, ids, self._vectors_of(rows, ids, vectors),
                           defer_texts=defer_texts)  # fmt: skip

    def ids_of(
        self, rows: Sequence[int] | npt.NDArray[np.intp], ids: Sequence[str] | None = None
    ) -> Sequence[str]:
        """The ids of ``rows``, in order: ``ids`` if given (the caller made them for these
        rows), else made from the id blob. A call's search makes a candidate's id once and
        passes it along (its kept fields looked up, its vector read, its fields found)."""
        if ids is not None:
            assert len(ids) == len(rows)
            return ids
        return self.ids.take(rows) if len(rows) else []

    def _vectors_of(
        self, rows: Sequence[int], ids: Sequence[str], vectors: Matrix | None
    ) -> Callable[[int], Vector | None]:
        """The vector of each of ``rows`` (by row) for building their memories: the
        matrix's, ``vectors`` (the rows' own, in order), or for the rows not kept built
        those read from the store in one go."""
        if self.matrix is not None or not len(rows):
            return self._vector
        kept: dict[int, Vector] = {}
        if vectors is not None:
            block, at = vectors, {row: i for i, row in enumerate(rows)}
        else:  # the vectors of the rows to build or find (a kept one has its own)
            for row, fields in zip(rows, self.rows.decoded.fields_many(ids), strict=True):
                if fields is not None and fields.embedding is not None:
                    kept[row] = fields.embedding
            todo, todo_ids = [], []
            for row, memory_id in zip(rows, ids, strict=True):
                if self.has_vector[row] and row not in kept:
                    todo.append(row)
                    todo_ids.append(memory_id)
            block = self.vectors(np.asarray(todo, dtype=np.intp), texts=True, ids=todo_ids)
            at = {row: i for i, row in enumerate(todo)}
        block.flags.writeable = False

        def vector(row: int) -> Vector | None:
            if not self.has_vector[row]:
                return None
            found = at.get(row)
            if found is not None:
                read: Vector = block[found]
                return read
            # kept, or (None) dropped from the kept ones since by another thread: read it
            return kept[row] if row in kept else self._vector(row)

        return vector

    @property
    def dim(self) -> int:
        """The size of the vectors (0 before the first)."""
        if self.matrix is not None:
            return int(self.matrix.shape[1])
        assert self.held is not None
        return self.held.dim

    def vectors(
        self,
        rows: npt.NDArray[np.intp],
        *,
        texts: bool = False,
        ids: Sequence[str] | None = None,
    ) -> Matrix:
        """The vectors of ``rows`` as a new matrix (zeros for a row without one): rows of
        the matrix, or without it, a loaded row's from the index and a row written since
        from its memory. ``texts``: the caller will build some of these rows' memories, so
        loaded rows read from the store bring their texts in the same read (kept by the
        table's :class:`~engrain.store.texts.RowTexts`, which then need not read them).
        ``ids``: the rows' ids if the caller has made them (not made again)."""
        if self.matrix is not None:
            return self.matrix[rows]
        held = self.held
        assert held is not None
        out = np.zeros((len(rows), held.dim), dtype=np.float32)
        source = self.rows.source[rows]
        loaded = np.flatnonzero((source >= 0) & self.has_vector[rows])
        if loaded.size:
            some = None if ids is None else [ids[i] for i in loaded.tolist()]
            out[loaded] = self._loaded_vectors(rows[loaded], held, texts=texts, ids=some)
        for i in np.flatnonzero((source < 0) & self.has_vector[rows]).tolist():
            memory_id = str(self.ids[rows[i]]) if ids is None else ids[i]
            embedding = self.rows.objects[memory_id].embedding
            if embedding is not None:
                out[i] = embedding
        return out

    def _loaded_vectors(
        self,
        rows: npt.NDArray[np.intp],
        held: IndexVectors,
        *,
        texts: bool = False,
        ids: Sequence[str] | None = None,
    ) -> Matrix:
        """The vectors of loaded ``rows`` (whose ids are ``ids`` if given): float32 from the
        store's rows when it can read them (a row changed or forgotten by another process
        since: the index's vector), else the index's. ``texts``: the texts of the rows found
        are read with them and kept by a table whose texts stay in the store."""
        base = self.rows.base
        if held.exact is None or base is None or len(base.rowids) != len(base):
            return held.index.vectors(held.keys[rows])
        positions = self.rows.source[rows]
        keep = getattr(base.content, "keep", None) if texts else None
        found, vectors, read = held.exact(
            base.rowids[positions], self.ids_of(rows, ids), held.dim, texts=keep is not None
        )
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
        return equal_vectors(self.embedding(row), embedding)

    def without_matrix(self, held: IndexVectors) -> Arrays:
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

    def patched(self, changed: Mapping[int, Memory]) -> Arrays | None:
        """A copy with these rows overwritten; ``None`` if one no longer fits (a vector of
        another size). The vector matrix is copied only if a vector changed."""
        dim = self.dim
        if any(m.embedding is not None and m.embedding.shape != (dim,)
               for m in changed.values()):  # fmt: skip
            return None
        # a column is copied only if a value of it changes: a promotion, a count or a text
        # changes none, and then the filters' masks, counts and subsets stay valid too
        columns: dict[str, Any] = {name: getattr(self, name) for name in SMALL_FIELDS}
        copied: set[str] = set()
        vectors_changed = any(not self.same_vector(row, m.embedding) for row, m in changed.items())
        # without the matrix a changed row is an object from now on: its vector is its own
        matrix = self.matrix
        if vectors_changed and self.matrix is not None:
            matrix = self.matrix.copy()
        for row, m in changed.items():
            if matrix is not None and matrix is not self.matrix:
                matrix[row] = 0.0 if m.embedding is None else m.embedding
            for name, value in column_values(m).items():
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
            earlier = {flt: Subset.directions(found) for flt, found in earlier.items()}
        return Arrays(
            rows=self.rows.patched(changed), position=self.position, ids=self.ids,
            matrix=matrix, held=self.held, version=version, earlier_subsets=earlier,
            **columns, **carried,
        )  # fmt: skip

    def extend(self, more: Sequence[Memory], dim: int) -> Arrays:
        """These rows followed by ``more``."""
        added = arrays_of(list(more), dim)
        columns: dict[str, Any] = {
            name: np.concatenate([getattr(self, name), getattr(added, name)])
            for name in SMALL_FIELDS
        }
        assert added.matrix is not None
        fresh = [m.id for m in more]
        ids = self.ids.extended(fresh)
        return Arrays(
            rows=self.rows.extended(more),
            position=self.position.extended(ids, fresh),
            ids=ids,
            matrix=None if self.matrix is None else np.concatenate([self.matrix, added.matrix]),
            held=None if self.held is None else self.held.extended(memory_keys(fresh)),
            **columns,
        )

    def without(self, rows: Iterable[int]) -> Arrays:
        """These columns with ``rows`` left out (the others keep their order)."""
        gone = list(rows)
        keep = np.ones(len(self), dtype=bool)
        keep[gone] = False
        ids = self.ids.kept(keep)
        return Arrays(
            rows=self.rows.without(keep, self.ids.take(gone)),
            position=self.position.kept(ids, keep),
            ids=ids,
            matrix=None if self.matrix is None else self.matrix[keep],
            held=None if self.held is None else self.held.kept(keep),
            **{name: getattr(self, name)[keep] for name in SMALL_FIELDS},
        )

    def touched(self, by_row: Mapping[int, tuple[str, int]], at: datetime) -> Arrays:
        """One access more per count of each row (row → (its id, the count)); no column
        array is copied (access fields are not indexed), so masks and subsets are kept."""
        return replace(self, rows=self.rows.touched(by_row, at))


def column_values(m: Memory) -> dict[str, Any]:
    """``m``'s value in each column of :data:`SMALL_FIELDS`."""
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


#: The filter columns beside the vectors: copied by a patch only when a value changes.
SMALL_FIELDS = (
    "has_vector", "memory_type", "kind", "project", "session_id", "key",
    "compressed", "muted", "superseded", "pinned", "importance", "updated",
)  # fmt: skip


#: Masks (and counts) kept per arrays at most: the gate asks for a few filters a call.
MASKS_MAX = 32


def filter_rows(a: Arrays, flt: MemoryFilter) -> BoolArray:
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


def mask_of(a: Arrays, flt: MemoryFilter) -> BoolArray:
    """The rows passing ``flt`` (read-only: it is shared through ``a.masks``)."""
    mask = a.masks.get(flt)
    if mask is None:
        mask = filter_rows(a, flt)
        mask.flags.writeable = False
        if len(a.masks) >= MASKS_MAX:
            a.masks.clear()
        a.masks[flt] = mask
    return mask


def equal_vectors(a: Vector | None, b: Vector | None) -> bool:
    """Whether two vectors (or their absence) are the same."""
    if a is None or b is None:
        return a is None and b is None
    return a is b or bool(np.array_equal(a, b))


def _codes(codes: Mapping[Any, int], members: Iterable[Any]) -> BoolArray:
    """A lookup table over the codes: true at the codes of ``members``."""
    table = np.zeros(len(codes), dtype=bool)
    table[[codes[m] for m in members]] = True
    return table


def arrays_of(
    memories: list[Memory], dim: int, vectors: npt.NDArray[np.float32] | None = None
) -> Arrays:
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
    return Arrays(
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


@dataclass(frozen=True)
class HeldTable:
    """A working set as a store read it without its vectors, because a saved approximate
    index holds every row's (``store/ann_stamp.py``): :class:`~engrain.store.columns.
    Table` without the matrix, and the vectors' size ``dim``."""

    columns: Columns
    has_vector: BoolArray
    access: npt.NDArray[np.int64]
    last: npt.NDArray[np.int64]
    dim: int


def arrays_of_table(table: Table | HeldTable, held: IndexVectors | None = None) -> Arrays:
    """Column arrays of memories a store read as columns (none of them built); a
    :class:`HeldTable`'s vectors are read through ``held``."""
    assert isinstance(table, Table) or (held is not None and held.dim == table.dim)
    c = table.columns
    ids = IdColumn(c.ids)  # the table's own blob, not a copy
    # the table's arrays themselves where the type is already the column's (~1.3 MB at
    # 100,000): a patch copies a column before it writes to it, so neither changes
    return Arrays(
        rows=Rows.of_columns(c, table.access, table.last),
        position=IdPositions(ids),
        ids=ids,
        matrix=table.matrix if isinstance(table, Table) else None,
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
        held=None if isinstance(table, Table) else held,
    )
