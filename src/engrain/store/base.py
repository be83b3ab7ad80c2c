"""The storage protocol every backend implements, and the filter it takes.

Small on purpose: backends differ in how they keep rows and search vectors, not in what
they promise. The contract test suite (``tests/test_store_contract.py``) runs one set of
tests against every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from engrain.model import Kind, Memory, MemoryType, Vector


@dataclass(frozen=True)
class MemoryFilter:
    """Which of a user's memories a query sees. ``None`` means "any"."""

    project: str | None = None
    memory_types: tuple[MemoryType, ...] | None = None
    kinds: tuple[Kind, ...] | None = None
    session_id: str | None = None
    key: str | None = None
    include_compressed: bool = True
    include_muted: bool = True
    min_importance: float | None = None
    pinned: bool | None = None

    def update(self, **changes: Any) -> MemoryFilter:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    def matches(self, memory: Memory) -> bool:
        """Whether ``memory`` passes this filter (the reference semantics for backends)."""
        return (
            (self.project is None or memory.project == self.project)
            and (self.memory_types is None or memory.memory_type in self.memory_types)
            and (self.kinds is None or memory.kind in self.kinds)
            and (self.session_id is None or memory.session_id == self.session_id)
            and (self.key is None or memory.key == self.key)
            and (self.include_compressed or not memory.compressed)
            and (self.include_muted or not memory.muted)
            and (self.min_importance is None or memory.importance >= self.min_importance)
            and (self.pinned is None or memory.pinned == self.pinned)
        )


ALL = MemoryFilter()


@runtime_checkable
class Store(Protocol):
    """Where memories live. Every method is scoped to one ``user_id``: a user never sees
    another user's memories. Multi-row writes are atomic: all of them or none."""

    def write(self, upserts: Sequence[Memory] = (), deletes: Sequence[Memory] = ()) -> None:
        """Insert or replace ``upserts`` (by id) and delete ``deletes``, in one transaction."""
        ...

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, in the order given; unknown ids are skipped."""
        ...

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, most recently updated first."""
        ...

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories most cosine-similar to ``vector`` among those passing ``flt``,
        best first, with their similarity."""
        ...

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories passing ``flt`` with the highest BM25 score for ``text`` (user's
        own term statistics), best first, with their score; memories sharing no term with
        ``text`` are never returned."""
        ...

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Increment the access count and set the last access time of these memories."""
        ...

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        """How many of the user's memories pass ``flt``."""
        ...

    def centroid(self, user_id: str) -> Vector | None:
        """The mean embedding of the user's memories, or ``None`` if there are none."""
        ...

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """Embedding cache lookup: content hash → vector, for the hashes known."""
        ...

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Embedding cache write."""
        ...

    def users(self) -> list[str]:
        """Every user id with at least one memory."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...
