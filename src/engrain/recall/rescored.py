"""A pool candidate with another relevance, on the hot path of every transcript question.

``recall.speakers``, ``recall.when`` and ``recall.chunk_rank`` each give every conversation
chunk of a pool a new relevance (a pool 125 deep: ~400 copies a call). ``dataclasses.replace``
costs ~3× the constructor (it reads the fields' metadata on every call); the constructor
with every field named here gives the same object.

Concurrency: a pure function (a new frozen object; nothing shared).
"""

from __future__ import annotations

from engrain.recall.relevance import Candidate


def rescored(candidate: Candidate, relevance: float) -> Candidate:
    """``candidate`` with ``relevance`` (what ``replace(candidate, relevance=…)`` gives)."""
    return Candidate(candidate.memory, candidate.similarity, candidate.lexical, relevance)
