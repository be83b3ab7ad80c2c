"""Step 4 of recall (spec 2.5), optional: re-rank candidates with a cross-encoder.

A reranker is any callable ``(query, texts) -> scores``. When re-ranking is enabled but no
reranker is configured, or it raises, recall falls back to weighted score blending: cosine
similarity blended with the memory's importance and confidence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from engrain.model import Memory

log = logging.getLogger(__name__)

Reranker = Callable[[str, Sequence[str]], Sequence[float]]

#: Fallback blend: similarity dominates; importance and confidence break near-ties.
BLEND_SIMILARITY = 0.8
BLEND_IMPORTANCE = 0.1
BLEND_CONFIDENCE = 0.1


def blend(memory: Memory, similarity: float) -> float:
    """The fallback score of one candidate."""
    return (
        BLEND_SIMILARITY * similarity
        + BLEND_IMPORTANCE * memory.importance
        + BLEND_CONFIDENCE * memory.confidence
    )


def rerank(
    query: str,
    scored: Sequence[tuple[Memory, float]],
    reranker: Reranker | None,
) -> list[tuple[Memory, float]]:
    """Candidates re-scored and sorted best first, by ``reranker`` or the fallback blend."""
    if not scored:
        return []
    scores: list[float] | None = None
    if reranker is not None:
        try:
            scores = [float(s) for s in reranker(query, [m.content for m, _ in scored])]
            if len(scores) != len(scored):
                raise ValueError(f"reranker returned {len(scores)} scores for {len(scored)}")
        except Exception as exc:  # any failure of a user-supplied hook falls back
            log.warning("reranker failed (%s); falling back to weighted score blending", exc)
            scores = None
    if scores is None:
        scores = [blend(m, s) for m, s in scored]
    ranked = [(m, score) for (m, _), score in zip(scored, scores, strict=True)]
    ranked.sort(key=lambda pair: pair[1], reverse=True)
    return ranked
