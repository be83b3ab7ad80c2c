"""A pool candidate with another relevance, on the hot path of every transcript question.

``recall.speakers``, ``recall.when`` and ``recall.chunk_rank`` each give every conversation
chunk of a pool a new relevance (a pool 125 deep: ~400 copies a call). ``dataclasses.replace``
costs ~3× the constructor (it reads the fields' metadata on every call); the constructor
with every field named here gives the same object.

Concurrency: a pure function (a new frozen object; nothing shared).
"""

from __future__ import annotations

from collections.abc import Sequence

from engrain.recall.relevance import Candidate


def rescored(candidate: Candidate, relevance: float) -> Candidate:
    """``candidate`` with ``relevance`` (what ``replace(candidate, relevance=…)`` gives)."""
    return Candidate(
        candidate.memory, candidate.similarity, candidate.lexical, relevance, candidate.no_evidence
    )


def reordered(
    pool: Sequence[Candidate], at: Sequence[int], scores: Sequence[float]
) -> list[Candidate]:
    """``pool`` with its candidates at positions ``at`` put in the order of ``scores`` (one
    each, ties to the higher relevance) and handed those candidates' relevance values again
    in that order, so every threshold reads the values it read before; sorted by relevance.
    How ``recall.chunk_rank`` and ``recall.soft_terms`` re-rank a pool's conversation chunks."""
    chunks = [pool[i] for i in at]
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], -chunks[i].relevance))
    values = sorted((c.relevance for c in chunks), reverse=True)
    out = list(pool)
    for value, i in zip(values, order, strict=True):
        out[at[i]] = rescored(chunks[i], value)
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out
