"""The spec's recall (section 2): nearest candidates, optional re-ranking, procedural
memories first, then the token budget and ``top_k``. The relevance-gating pipeline
(``gate.py``) is what ``context()`` uses; this is ``Engine.recall``.

Procedural memories lead only when they are about the query (cosine at least
:data:`PROCEDURAL_MIN_SIMILARITY`) and within :data:`~engrain.recall.select.PROCEDURAL_SHARE`
of the budget: with thirty stored preferences, leading with all of them filled a 500-token
budget and left the one relevant fact out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engrain.model import Memory, MemoryType, Vector
from engrain.recall import candidates as cand
from engrain.recall.rerank import Reranker, rerank
from engrain.recall.results import RecallResult, ScoredMemory
from engrain.recall.select import PROCEDURAL_SHARE, enforce_budget
from engrain.store.base import Store
from engrain.tokens import count_tokens


def recall(
    store: Store,
    embed_query: Callable[[str], Vector],
    query: str,
    user_id: str,
    *,
    top_k: int,
    token_budget: int,
    candidate_multiplier: int,
    min_importance: float,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    reranker: Reranker | None = None,
    use_reranker: bool = False,
) -> RecallResult:
    """The memories to inject for ``query``: the ``top_k × candidate_multiplier`` nearest
    candidates of this user above ``min_importance``, re-ranked when ``use_reranker``
    (``reranker``, else the built-in blend), the user's procedural memories about the query
    first (within 15% of the budget), within ``token_budget`` tokens and ``top_k`` memories.
    Reads only."""
    vector = embed_query(query)
    found = cand.candidates(
        store, user_id, vector, k=top_k * candidate_multiplier, min_importance=min_importance,
        memory_types=memory_types, project=project, include_compressed=include_compressed,
    )  # fmt: skip
    if use_reranker:
        sims = {m.id: s for m, s in found}
        scored = [_scored(m, sims[m.id], s) for m, s in rerank(query, found, reranker)]
    else:
        scored = [_scored(m, s, s) for m, s in found]
    first = _leading_procedural(
        [
            _scored(m, s, s)
            for m in cand.procedural(store, user_id, project=project, memory_types=memory_types)
            if m.importance >= min_importance
            for s in [_similarity(m, vector)]
        ],
        int(token_budget * PROCEDURAL_SHARE),
    )
    selected, used = enforce_budget(first, scored, token_budget=token_budget, top_k=top_k)
    return RecallResult(
        memories=[s.memory for s in selected],
        total_tokens=used,
        budget_used=used / token_budget if token_budget else 0.0,
        scored=selected,
    )


#: The cosine from which a procedural memory is about the query (all-MiniLM-L6-v2 gives
#: unrelated sentences 0.0-0.1).
PROCEDURAL_MIN_SIMILARITY = 0.2


def _leading_procedural(items: list[ScoredMemory], share: int) -> list[ScoredMemory]:
    """The procedural memories that lead: the relevant ones, most similar first, within
    ``share`` tokens. The others compete with the candidates on similarity."""
    out = []
    used = 0
    for item in sorted(items, key=lambda s: s.similarity, reverse=True):
        if item.similarity >= PROCEDURAL_MIN_SIMILARITY and used + item.tokens <= share:
            out.append(item)
            used += item.tokens
    return out


def _similarity(memory: Memory, vector: Vector) -> float:
    if memory.embedding is None:
        return 0.0
    return float(np.dot(memory.embedding, vector))


def _scored(memory: Memory, similarity: float, score: float) -> ScoredMemory:
    return ScoredMemory(memory, score, similarity, count_tokens(memory.content))
