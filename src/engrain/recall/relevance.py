"""Hybrid candidates and their relevance: dense nearest neighbours and BM25 matches, fused.

The spec's candidates are the ``top_k × 4`` nearest neighbours by embedding only; on LoCoMo
that misses much evidence that lexical matching finds (names, rare words, numbers). Here the
pool is the union of the dense and the lexical top lists, and each candidate's relevance in
[0, 1] is a convex blend of its cosine similarity and its BM25 score divided by the best
BM25 score of the query — both on scales that mean the same from query to query, so the
gated thresholds keep their meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engrain.model import Memory, MemoryType, Vector
from engrain.store.base import MemoryFilter, Store

#: Weight of the lexical side in the relevance blend (the dense side gets the rest).
LEXICAL_WEIGHT = 0.35


@dataclass(frozen=True)
class Candidate:
    """A memory that may be injected, with the evidence for its relevance."""

    memory: Memory
    similarity: float  # cosine with the query
    lexical: float  # BM25 / best BM25 of the query, in [0, 1]
    relevance: float  # the blend the scorers see

    @property
    def id(self) -> str:
        """The memory's id."""
        return self.memory.id


def gather(
    store: Store,
    user_id: str,
    query: str,
    vector: Vector,
    *,
    pool: int,
    min_importance: float,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    hybrid: bool = True,
    lexical_weight: float = LEXICAL_WEIGHT,
) -> list[Candidate]:
    """The candidate pool: the ``pool`` nearest memories and (``hybrid``) the ``pool`` best
    BM25 matches, muted ones and the spec's filters excluded, best relevance first."""
    flt = MemoryFilter(
        project=project,
        memory_types=tuple(memory_types) if memory_types is not None else None,
        include_compressed=include_compressed,
        include_muted=False,
        min_importance=min_importance,
    )
    dense = store.search(user_id, vector, pool, flt)
    lexical = store.lexical_search(user_id, query, pool, flt) if hybrid else []
    best = max((score for _, score in lexical), default=0.0)
    lex = {m.id: score / best for m, score in lexical} if best > 0 else {}
    memories: dict[str, Memory] = {m.id: m for m, _ in dense}
    sims: dict[str, float] = {m.id: s for m, s in dense}
    for memory, _ in lexical:
        if memory.id not in memories:
            memories[memory.id] = memory
            sims[memory.id] = _cosine(memory, vector)
    weight = lexical_weight if hybrid else 0.0
    out = [
        Candidate(
            memory=memory,
            similarity=sims[mid],
            lexical=lex.get(mid, 0.0),
            relevance=(1.0 - weight) * max(0.0, sims[mid]) + weight * lex.get(mid, 0.0),
        )
        for mid, memory in memories.items()
    ]
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out


def _cosine(memory: Memory, vector: Vector) -> float:
    if memory.embedding is None:
        return 0.0
    return float(np.dot(memory.embedding, vector))
