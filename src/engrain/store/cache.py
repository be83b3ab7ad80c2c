"""One user's memories held in process: the working set both stores search.

The in-memory store is a dict of these; the SQLite store keeps one per recently used user
beside the file (the file stays the source of truth). Filters, ordering, vector search and
BM25 run on numpy arrays built lazily after each change, so a burst of writes costs one
rebuild, and reads never decode rows again. Both backends therefore rank identically.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from engrain.lexical import LexicalIndex
from engrain.model import Memory, Vector
from engrain.store.base import ALL, MemoryFilter

BoolArray = npt.NDArray[np.bool_]


@dataclass
class _Arrays:
    """Column arrays of the cached memories, in insertion order."""

    memories: list[Memory]
    position: dict[str, int]
    ids: npt.NDArray[np.str_]
    matrix: npt.NDArray[np.float32]
    has_vector: BoolArray
    memory_type: npt.NDArray[np.object_]
    kind: npt.NDArray[np.object_]
    project: npt.NDArray[np.object_]
    session_id: npt.NDArray[np.object_]
    key: npt.NDArray[np.object_]
    compressed: BoolArray
    muted: BoolArray
    superseded: BoolArray
    pinned: BoolArray
    importance: npt.NDArray[np.float64]
    updated: npt.NDArray[np.float64]

    def patch(self, row: int, m: Memory) -> bool:
        """Overwrite one row in place; False if the memory no longer fits (new vector size)."""
        if m.embedding is not None and m.embedding.shape != (self.matrix.shape[1],):
            return False
        self.memories[row] = m
        self.matrix[row] = 0.0 if m.embedding is None else m.embedding
        self.has_vector[row] = m.embedding is not None
        self.memory_type[row] = m.memory_type.value
        self.kind[row] = m.kind.value
        self.project[row] = m.project
        self.session_id[row] = m.session_id
        self.key[row] = m.key
        self.compressed[row] = m.compressed
        self.muted[row] = m.muted
        self.superseded[row] = m.superseded_by is not None
        self.pinned[row] = m.pinned
        self.importance[row] = m.importance
        self.updated[row] = m.updated_at.timestamp()
        return True

    def extend(self, more: _Arrays) -> _Arrays:
        """These rows followed by ``more``'s."""
        offset = len(self.memories)
        return _Arrays(
            memories=self.memories + more.memories,
            position={**self.position, **{k: v + offset for k, v in more.position.items()}},
            **{
                name: np.concatenate([getattr(self, name), getattr(more, name)])
                for name in _ARRAY_FIELDS
            },
        )


_ARRAY_FIELDS = (
    "ids", "matrix", "has_vector", "memory_type", "kind", "project", "session_id", "key",
    "compressed", "muted", "superseded", "pinned", "importance", "updated",
)  # fmt: skip


class UserCache:
    """A user's memories with vectorised filter, order, search and BM25."""

    def __init__(self, memories: Iterable[Memory] = ()) -> None:
        self._rows: dict[str, Memory] = {m.id: m for m in memories}
        self._arrays: _Arrays | None = None
        self._lexical: LexicalIndex | None = None

    def __len__(self) -> int:
        return len(self._rows)

    # -- changes ----------------------------------------------------------------------------

    def upsert(self, memories: Iterable[Memory]) -> None:
        """Insert or replace by id. Built arrays are patched in place (replacements) or
        extended (new ids) rather than rebuilt, so a write costs O(changed rows)."""
        fresh: list[Memory] = []
        for memory in memories:
            old = self._rows.get(memory.id)
            if old is None or old.content != memory.content:
                self._lexical = None
            self._rows[memory.id] = memory
            if self._arrays is not None:
                row = self._arrays.position.get(memory.id)
                if row is None:
                    fresh.append(memory)
                elif not self._arrays.patch(row, memory):
                    self._arrays = None
        if self._arrays is not None and fresh:
            dim = self._arrays.matrix.shape[1]
            if dim == 0 or any(m.embedding is not None and m.embedding.shape != (dim,)
                               for m in fresh):  # fmt: skip
                self._arrays = None  # the first vectors, or another size: rebuild lazily
            else:
                self._arrays = self._arrays.extend(_columns(fresh, dim))

    def delete(self, ids: Iterable[str]) -> None:
        """Remove these ids (unknown ids are ignored)."""
        for memory_id in ids:
            if self._rows.pop(memory_id, None) is not None:
                self._lexical = None
                self._arrays = None

    def touch(self, ids: Sequence[str], at: datetime) -> None:
        """Count one access of each id (no array rebuild: access fields are not indexed)."""
        for memory_id in ids:
            memory = self._rows.get(memory_id)
            if memory is not None:
                self._rows[memory_id] = memory.evolve(
                    access_count=memory.access_count + 1, last_accessed_at=at
                )
        if self._arrays is not None:
            self._arrays.memories = list(self._rows.values())

    # -- reads ------------------------------------------------------------------------------

    def get(self, ids: Sequence[str]) -> list[Memory]:
        """These memories in the order given; unknown ids skipped."""
        return [self._rows[i] for i in ids if i in self._rows]

    def query(
        self, flt: MemoryFilter = ALL, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """Memories passing ``flt``, most recently updated first (ties: larger id first)."""
        arrays = self._build()
        rows = np.flatnonzero(self._mask(arrays, flt))
        if rows.size == 0:
            return []
        order = rows[np.lexsort((arrays.ids[rows], arrays.updated[rows]))[::-1]]
        end = None if limit is None else offset + limit
        return [arrays.memories[i] for i in order[offset:end]]

    def count(self, flt: MemoryFilter = ALL) -> int:
        """How many memories pass ``flt``."""
        return int(self._mask(self._build(), flt).sum())

    def search(self, vector: Vector, k: int, flt: MemoryFilter = ALL) -> list[tuple[Memory, float]]:
        """The ``k`` best cosine matches among memories with a vector passing ``flt``."""
        arrays = self._build()
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or not arrays.has_vector.any() or arrays.matrix.shape[1] != query.shape[0]:
            return []
        with _single_threaded_blas():
            sims = arrays.matrix @ query
        return _top(arrays, sims, self._mask(arrays, flt) & arrays.has_vector, k)

    def lexical_search(
        self, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` best BM25 matches passing ``flt`` (statistics over all the user's
        memories); memories sharing no term with ``text`` are left out."""
        arrays = self._build()
        if k <= 0 or not arrays.memories:
            return []
        if self._lexical is None:
            self._lexical = LexicalIndex([m.content for m in arrays.memories])
        scores = self._lexical.scores(text)
        return _top(arrays, scores, self._mask(arrays, flt) & (scores > 0), k)

    def centroid(self) -> Vector | None:
        """The mean of the memories' vectors, or ``None`` without any."""
        arrays = self._build()
        if not arrays.has_vector.any():
            return None
        return np.asarray(arrays.matrix[arrays.has_vector].mean(axis=0), dtype=np.float32)

    # -- internals --------------------------------------------------------------------------

    def _build(self) -> _Arrays:
        if self._arrays is not None:
            return self._arrays
        memories = list(self._rows.values())
        if self._lexical is not None and self._lexical.size != len(memories):
            self._lexical = None
        dim = next((m.embedding.shape[0] for m in memories if m.embedding is not None), 0)
        self._arrays = _columns(memories, dim)
        return self._arrays

    @staticmethod
    def _mask(a: _Arrays, flt: MemoryFilter) -> BoolArray:
        mask = np.ones(len(a.memories), dtype=bool)
        if flt.project is not None:
            mask &= a.project == flt.project
        if flt.memory_types is not None:
            mask &= np.isin(a.memory_type, [t.value for t in flt.memory_types])
        if flt.kinds is not None:
            mask &= np.isin(a.kind, [k.value for k in flt.kinds])
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


@lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def _single_threaded_blas() -> Any:
    """One BLAS thread for the search product. OpenBLAS's idle threads spin after a call and
    steal the cores onnxruntime needs for the next query embedding: at 10,000 memories this
    halves context() latency on a 2-core machine (bench/latency.py), for ~0.3 ms here."""
    return _blas().limit(limits=1, user_api="blas")


def _top(
    arrays: _Arrays, scores: npt.NDArray[np.float32], mask: BoolArray, k: int
) -> list[tuple[Memory, float]]:
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    picked = scores[rows]
    top = np.argpartition(-picked, k - 1)[:k] if rows.size > k else np.arange(rows.size)
    top = top[np.argsort(-picked[top], kind="stable")]
    return [(arrays.memories[rows[i]], float(picked[i])) for i in top]


def _columns(memories: list[Memory], dim: int) -> _Arrays:
    """Column arrays for ``memories``; vectors of another dimension count as missing."""
    matrix = np.zeros((len(memories), dim), dtype=np.float32)
    has_vector = np.zeros(len(memories), dtype=bool)
    for row, memory in enumerate(memories):
        if memory.embedding is not None and memory.embedding.shape == (dim,):
            matrix[row] = memory.embedding
            has_vector[row] = True
    return _Arrays(
        memories=memories,
        position={m.id: row for row, m in enumerate(memories)},
        ids=np.array([m.id for m in memories], dtype=str),
        matrix=matrix,
        has_vector=has_vector,
        # object, not fixed-width str: patch() may write a longer value into a row
        memory_type=np.array([m.memory_type.value for m in memories], dtype=object),
        kind=np.array([m.kind.value for m in memories], dtype=object),
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
