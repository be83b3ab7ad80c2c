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
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from engrain.errors import EngrainError
from engrain.model import Memory, MemoryFields, Vector
from engrain.store import ann_kinds, heap, lexical_file
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
from engrain.store.arrays import (
    Arrays,
    BoolArray,
    HeldTable,
    IndexVectors,
    Matrix,
    RowVectors,
    arrays_of,
    arrays_of_table,
    mask_of,
)
from engrain.store.base import ALL, MemoryFilter
from engrain.store.columns import Table, parse_micros
from engrain.store.found import built_all
from engrain.store.lexical import LexicalIndex
from engrain.store.reads import Begin
from engrain.store.rows import with_access as _with_access
from engrain.store.vector_search import (
    approximate,
    counted_rows,
    exact_top,
    single_threaded_blas,
)


@dataclass(frozen=True)
class Snapshot:
    """One published state of a user's working set; never changed after publication.
    ``arrays`` and ``lexical`` (built over ``arrays.memories``) are ``None`` until a read
    needs them; ``ann`` is set once a large user's approximate index is ready, ``part``
    once its second index, over the typed learnings (``store/ann_kinds.py``), is."""

    rows: Mapping[str, Memory]
    arrays: Arrays | None = None
    lexical: LexicalIndex | None = None
    ann: AnnRows | None = None
    part: AnnRows | None = None

    @classmethod
    def over(
        cls,
        arrays: Arrays,
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
        table: Table | HeldTable | None = None,
        lexical_stash: Stash | None = None,
        row_vectors: RowVectors | None = None,
        held_by: Stamped | None = None,
        lexical_saved: Callable[[], lexical_file.Saved | None] | None = None,
    ) -> None:
        """``memories`` as objects, or ``table``: memories a store read as columns (built
        into objects only when a call returns them). ``lexical_stash``: where a large user's
        BM25 index is kept between processes (``store/lexical_file.py``). ``row_vectors``:
        reads the table's rows' float32 vectors from the store, so an indexed user keeps
        none in memory (an int8 index cannot score). ``held_by``: for a table read without
        its vectors (:class:`~engrain.store.arrays.HeldTable`), the saved indexes ``ann``
        (and its learnings' slot) adopted, whose stamps vouch that they hold every row
        (``store/ann_stamp.py``): searched at once, with no check. ``lexical_saved``: the
        saved BM25 index, read back already (perhaps on another thread: its error, if it
        failed, is raised when it is asked for), taken instead of reading the stash the
        first time an index is needed, and checked against the texts the same way."""
        self._snapshot: Snapshot
        if isinstance(table, HeldTable):
            assert held_by is not None
            self._snapshot = _stamped(table, held_by, row_vectors)
        elif table is not None:
            self._snapshot = Snapshot.over(arrays_of_table(table))
        else:
            self._snapshot = Snapshot({m.id: m for m in memories})
        self._lock = threading.Lock()
        self._slot = ann
        self._lexical_stash = lexical_stash
        self._lexical_saved = lexical_saved
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

    def recount(self, used: Sequence[tuple[str, int, str | None]]) -> bool:
        """Set the access count and last access of every row as the store holds them
        (another process counted uses): ``used`` gives ``(id, count, last use)`` per
        memory, and a row it does not list was used 0 times, never. ``False``, changing
        nothing, if an id of ``used`` is not in this working set or comes twice (the caller
        reloads it). No column array but the access counts is copied, as for
        :meth:`touch`."""
        with self._lock:
            old = self._snapshot
            arrays = old.arrays
            if arrays is None:
                return False
            rows = arrays.position.rows_of([i for i, _, _ in used])
            if (rows < 0).any() or np.unique(rows).size != rows.size:
                return False
            found = np.zeros(len(arrays), dtype=np.int64)
            found[rows] = np.fromiter((n for _, n, _ in used), np.int64, len(used))
            access, last = arrays.rows.counts.arrays()
            changed = np.flatnonzero(access != found)
            if not changed.size:
                return True
            when = dict(zip(rows.tolist(), (t for _, _, t in used), strict=True))
            access[changed] = found[changed]
            last[changed] = [parse_micros(when.get(row)) for row in changed.tolist()]
            ids = [arrays.ids[row] for row in changed.tolist()]
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
        """:meth:`search` for each ``(k, flt)``: :meth:`search_found`'s, built (and kept)."""
        snapshot = self._built()
        return [_built(found, snapshot) for found in self._search(snapshot, vector, searches)]

    def search_found(
        self,
        vector: Vector,
        searches: Sequence[tuple[int, MemoryFilter]],
        begin: Begin | None = None,
    ) -> list[list[tuple[MemoryFields, float]]]:
        """:meth:`search` for each ``(k, flt)``, each match as its fields
        (``store/found.py``: built only if the caller asks), from one product of the query
        with the matrix (the gate asks for a candidate pool and every learning at once);
        through the approximate index for a large user once it is ready (see the module
        docstring; ``begin``: how its second index's walk is begun, ``store/reads.py``)."""
        return self._search(self._built(), vector, searches, begin)

    def _search(
        self,
        snapshot: Snapshot,
        vector: Vector,
        searches: Sequence[tuple[int, MemoryFilter]],
        begin: Begin | None = None,
    ) -> list[list[tuple[MemoryFields, float]]]:
        """:meth:`search_found` in ``snapshot``."""
        arrays = snapshot.arrays
        assert arrays is not None
        query = np.asarray(vector, dtype=np.float32)
        if not arrays.has_vector.any() or arrays.dim != query.shape[0]:
            return [[] for _ in searches]
        ann = self._ann_rows(snapshot)
        if ann is not None:
            part, expected = self._part_rows(snapshot, searches)
            return approximate(arrays, ann, query, searches, self._mask, part, expected, begin)
        with single_threaded_blas():
            sims = arrays.products(query)
        return [
            exact_top(arrays, sims, self._mask(arrays, flt) & arrays.has_vector, k) if k > 0 else []
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
        return _built(self._lexical_found(snapshot, text, k, flt), snapshot)

    def lexical_found(
        self, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[MemoryFields, float]]:
        """:meth:`lexical_search`, each match as its fields (``store/found.py``)."""
        return self._lexical_found(self._built(), text, k, flt)

    def _lexical_found(
        self, snapshot: Snapshot, text: str, k: int, flt: MemoryFilter
    ) -> list[tuple[MemoryFields, float]]:
        """:meth:`lexical_found` in ``snapshot``."""
        arrays = snapshot.arrays
        assert arrays is not None
        if k <= 0 or not len(arrays):
            return []
        lexical = snapshot.lexical
        if lexical is None:
            lexical = self._lexical(arrays)
            self._publish(snapshot, replace(snapshot, lexical=lexical))
        rows, scores = lexical.top(text, k, self._mask(arrays, flt))
        found = arrays.found_of(rows.tolist())
        return list(zip(found, scores.tolist(), strict=True))

    def _lexical(self, arrays: Arrays) -> LexicalIndex:
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
        saved, self._lexical_saved = self._lexical_saved, None  # taken once: then the stash's
        try:
            found = saved() if saved is not None else lexical_file.parsed(stash.read(), expected)
            index = lexical_file.matching(found, expected, len(arrays))
        except EngrainError:  # as if none were saved
            index = None
        if index is None:
            if documents is None:
                documents = arrays.rows.contents(arrays.ids.tolist())
            index = LexicalIndex(documents)
            built = index
            stash.later(lambda: _stash_lexical(stash, built, expected))
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

    def held_indexes(self) -> tuple[Snapshot, list[tuple[IndexSlot, VectorIndex]]]:
        """The current snapshot, and the slots whose index holds the vector of every row
        of it with one (the learnings' of every such row of its kinds) and is still the
        copy it was saved or loaded as: what a stamp may vouch for (``store/ann_stamp.py``;
        the rows' keys are the snapshot's records')."""
        snapshot = self._snapshot
        arrays = snapshot.arrays
        slot = self._slot
        if slot is None or arrays is None:
            return snapshot, []
        out: list[tuple[IndexSlot, VectorIndex]] = []
        for record, owner, flt in ((snapshot.ann, slot, None),
                                   (snapshot.part, slot.part, ann_kinds.FILTER)):  # fmt: skip
            index = record.index if record is not None else None
            if record is None or owner is None or index is None or index is not owner.index \
                    or index.saved is None:  # fmt: skip
                continue
            _, _, held, with_vector = counted_rows(arrays, record.held, flt, self._mask)
            if held == with_vector:
                out.append((owner, index))
        return snapshot, out

    # -- internals --------------------------------------------------------------------------

    def _built(self) -> Snapshot:
        """The current snapshot with its arrays built (and published, if still current)."""
        snapshot = self._snapshot
        if snapshot.arrays is not None:
            return snapshot
        memories = list(snapshot.rows.values())
        dim = next((m.embedding.shape[0] for m in memories if m.embedding is not None), 0)
        built = Snapshot.over(arrays_of(memories, dim))
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
        """Whether the user has at least the slot's threshold of vectors: asked on every
        search, so counted without summing a million booleans as integers (0.36 ms;
        ``count_nonzero`` 0.05 ms)."""
        arrays = snapshot.arrays
        slot = self._slot
        return (slot is not None and arrays is not None
                and int(np.count_nonzero(arrays.has_vector)) >= slot.min_vectors)  # fmt: skip

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
            _, _, held, with_vector = counted_rows(arrays, ann.held, None, self._mask)
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

    def _attach(self, arrays: Arrays, ann: AnnRows) -> bool:
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
                held = IndexVectors(ann.index, ann.keys, now.dim, self._row_vectors)
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
            _, _, held, with_vector = counted_rows(arrays, found.held, ann_kinds.FILTER, self._mask)
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

    #: The rows passing a filter (:func:`~engrain.store.arrays.mask_of`).
    _mask = staticmethod(mask_of)


#: After the index job of a working set this large, freed heap is handed back
#: (``store/heap.py``: a trim costs milliseconds; smaller sets free little).
HEAP_RELEASE_ROWS = 5_000


def _built(
    found: Sequence[tuple[MemoryFields, float]], snapshot: Snapshot
) -> list[tuple[Memory, float]]:
    """Matches found in ``snapshot`` with their memories built (together:
    :func:`~engrain.store.found.built_all`) and kept, as a search that returns memories
    has always kept them."""
    if not found:
        return []
    assert snapshot.arrays is not None
    built = built_all([fields for fields, _ in found])
    memories = snapshot.arrays.rows.decoded.keep_many(built)
    return list(zip(memories, (score for _, score in found), strict=True))


def _brought_up(
    slot: IndexSlot,
    arrays: Arrays,
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


@dataclass(frozen=True)
class Stamped:
    """Saved indexes a store loaded on a stamp's word (``store/ann_stamp.py``) and adopted
    in their slots: the first, each row's key, and the learnings' (``None``: not stamped
    too; its job loads and checks it as before)."""

    index: VectorIndex
    keys: Keys
    part: VectorIndex | None = None


def _stamped(table: HeldTable, held_by: Stamped, row_vectors: RowVectors | None) -> Snapshot:
    """The snapshot of a table read without vectors: they are read through the stamped
    index (float32 from the rows when ``row_vectors`` can), which holds every row with a
    vector, as the learnings' holds every such row of its kinds."""
    held = IndexVectors(held_by.index, held_by.keys, table.dim, row_vectors)
    arrays = arrays_of_table(table, held)
    ann = AnnRows.of(held_by.index, held_by.keys, table.has_vector.copy())
    part = None
    if held_by.part is not None:
        rows = mask_of(arrays, ann_kinds.FILTER) & table.has_vector
        rows.flags.writeable = False
        part = AnnRows(held_by.part, held_by.keys, rows, ann.sorted_keys, ann.order)
    return Snapshot.over(arrays, ann=ann, part=part)


def _with_vector(arrays: Arrays, rows: npt.NDArray[np.intp]) -> Matrix:
    """The vectors of ``rows`` (the rows with a vector): the matrix itself if that is every
    row and it is kept, else a copy."""
    if arrays.matrix is not None and rows.size == len(arrays):
        return arrays.matrix
    return arrays.vectors(rows)


def _stash_lexical(stash: Stash, index: LexicalIndex, expected: bytes) -> None:
    """Save a user's BM25 index built from the documents whose fingerprint is ``expected``
    (on its own thread); if that fails, the next process builds it again."""
    with suppress(EngrainError):
        stash.write(lexical_file.dump(index, expected))


def _upserted(old: Snapshot, arrays: Arrays, batch: Sequence[Memory]) -> Snapshot:
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
