"""Memories a clear match points to (relevance gating, between candidates and scoring).

A message names what it is about in its own words, and the memory that answers it often
uses others: "Write the sbatch script for a 3-day TFT training run" never says "cluster"
or "72 hours", so the fact "The Slurm cluster has 6 nodes with four A100 40 GB each; …
gpu-long 72 hours" has a cosine of 0.10 with it and no shared term. The message's clear
match does share them: "GPU training is submitted with sbatch jobs/train_gpu.sh on the
Slurm cluster; the script asks for one A100 …" names the same cluster and the same card.
Two memories that name the same uncommon things and mean nearly the same are about the
same part of the project, so what the message's clear match is about, the memory it
points to is about too. This is pseudo-relevance feedback (Rocchio's, RM3's): the best
matches lend their vocabulary to a short query.

A typed learning (not a conversation chunk) is *pointed to* by a clear match (another
typed learning at least :data:`~engrain.recall.area.AREA_RELEVANCE` relevant) when

* they share at least :data:`MIN_SHARED` terms the message does not say that at most
  :data:`RARE_DF` of the pool's learnings carry (names of tools, hosts, parts, numbers:
  "slurm", "a100", "critcmp", "kconfig"; a word most memories use links nothing), and
* their own embeddings are at least :data:`MIN_COSINE` similar (the same meaning, not
  only the same names: two memories of one subsystem that say different things stay
  apart).

Its relevance becomes the chain's: the clear match's relevance times that cosine, when
that is more than its own; nothing else changes, and the thresholds, the shares and the
budget judge it as any memory. On the gating evaluation's tuning halves, the learnings
raised so and selected were 15, 4 of them labelled as needed (the fact about the cluster
for the sbatch script; the Sentry crash-free target for the Play staged rollout; the
Kconfig preference for a current-draw bug whose match is the Kconfig pattern; the
criterion golden path for "what does Kenji want in a perf PR", whose match says he asks
for critcmp output): a quarter, where a tenth of all injected memories is labelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from engrain.model import Vector
from engrain.recall.area import AREA_RELEVANCE
from engrain.recall.relevance import Candidate
from engrain.store.lexical import tokenize

#: A term carried by at most this many of the pool's typed learnings is uncommon: it names
#: something few of them are about (a project's ~100 learnings use most ordinary words
#: many times; with 5 or 10 the links through ordinary words grew 3-6 times on the tuning
#: halves, with no labelled memory more).
RARE_DF = 3
#: The uncommon terms two memories must share: one shared name is a coincidence as often
#: as a link ("queue", "budget"); two name the same thing.
MIN_SHARED = 2
#: The cosine of two memories' embeddings from which they mean nearly the same: the level
#: of a clearly related pair for all-MiniLM-L6-v2 (``relevance``: unrelated sentences
#: 0.0-0.1, related ones 0.3 and more).
MIN_COSINE = 0.4
#: Terms shorter than this are not names ("w" and "b" of "W&B", "t" of "t.Run").
MIN_TERM_LENGTH = 3


@lru_cache(maxsize=8_192)
def terms_of(content: str) -> frozenset[str]:
    """The distinct lexical terms of ``content`` (``store.lexical.tokenize``) at least
    :data:`MIN_TERM_LENGTH` long. Cached per text (thread-safe)."""
    return frozenset(t for t in tokenize(content) if len(t) >= MIN_TERM_LENGTH)


def _learnings(pool: Sequence[Candidate]) -> list[tuple[Candidate, Vector]]:
    """The typed learnings of ``pool`` with their embeddings (conversation chunks, which
    carry the turns they come from, and memories without an embedding left out)."""
    return [
        (c, c.memory.embedding)
        for c in pool
        if not c.memory.provenance.turn_ids and c.memory.embedding is not None
    ]


def with_pointed(
    pool: Sequence[Candidate], message: str
) -> tuple[list[Candidate], dict[str, tuple[str, float]]]:
    """``pool`` (best relevance first) with the relevance of every typed learning a clear
    match points to raised to the chain's (the match's relevance times the two memories'
    cosine), and for each raised id its pointer and its new relevance. A pool without a
    clear typed match comes back as it is."""
    learnings = _learnings(pool)
    clear = [(c, v) for c, v in learnings if c.relevance >= AREA_RELEVANCE]
    if not clear:
        return list(pool), {}
    # the chains that would raise a memory, from the cosines alone (cheap)
    reachable: dict[str, list[tuple[float, Candidate]]] = {}
    for candidate, vector in learnings:
        for match, toward in clear:
            if match.id == candidate.id:
                continue
            cosine = float(np.dot(toward, vector))
            chained = match.relevance * cosine
            if cosine >= MIN_COSINE and chained > candidate.relevance:
                reachable.setdefault(candidate.id, []).append((chained, match))
    if not reachable:
        return list(pool), {}
    df: Counter[str] = Counter()
    for candidate, _ in learnings:
        df.update(terms_of(candidate.memory.content))
    asked = frozenset(tokenize(message))
    rare = {
        match.id: frozenset(t for t in terms_of(match.memory.content) if df[t] <= RARE_DF) - asked
        for match, _ in clear
    }
    pointed: dict[str, tuple[str, float]] = {}
    out: list[Candidate] = []
    for candidate in pool:
        chains = sorted(reachable.get(candidate.id, ()), key=lambda pair: -pair[0])
        mine = terms_of(candidate.memory.content) if chains else frozenset()
        for chained, match in chains:
            if len(rare[match.id] & mine) >= MIN_SHARED:
                candidate = replace(candidate, relevance=chained)
                pointed[candidate.id] = (match.id, chained)
                break
        out.append(candidate)
    if pointed:
        out.sort(key=lambda c: c.relevance, reverse=True)
    return out, pointed
