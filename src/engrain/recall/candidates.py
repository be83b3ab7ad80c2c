"""Steps 2–3 of recall (spec 2.3–2.4): nearest neighbours for one user, then the filters."""

from __future__ import annotations

from collections.abc import Sequence

from engrain.model import Memory, MemoryType, Vector
from engrain.store.base import MemoryFilter, Store


def recall_filter(
    *,
    min_importance: float,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
) -> MemoryFilter:
    """The spec's candidate filters (2.4) plus mutes and corrections: importance at least
    ``min_importance``, not compressed unless asked, of the requested memory types, never
    muted, never superseded by a correction."""
    return MemoryFilter(
        project=project,
        memory_types=tuple(memory_types) if memory_types is not None else None,
        include_compressed=include_compressed,
        include_muted=False,
        include_superseded=False,
        min_importance=min_importance,
    )


def candidates(
    store: Store,
    user_id: str,
    vector: Vector,
    *,
    k: int,
    min_importance: float,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
) -> list[tuple[Memory, float]]:
    """The ``k`` nearest memories of ``user_id`` (``k = top_k × 4`` in the spec) that pass
    the filters: importance at least ``min_importance``, not compressed unless asked, of the
    requested memory types, not muted. The filters run inside the search, so ``k`` results
    come back whenever that many memories pass them."""
    flt = recall_filter(
        min_importance=min_importance,
        memory_types=memory_types,
        project=project,
        include_compressed=include_compressed,
    )
    return store.search(user_id, vector, k, flt)


def procedural(
    store: Store,
    user_id: str,
    *,
    project: str | None = None,
    memory_types: Sequence[MemoryType] | None = None,
) -> list[Memory]:
    """The user's procedural memories (the key-value store placed first at recall), oldest
    key first so the order is stable between calls."""
    if memory_types is not None and MemoryType.PROCEDURAL not in memory_types:
        return []
    flt = MemoryFilter(
        project=project, memory_types=(MemoryType.PROCEDURAL,), include_muted=False,
        include_compressed=False, include_superseded=False,
    )  # fmt: skip
    return sorted(store.query(user_id, flt), key=lambda m: (m.created_at, m.id))
