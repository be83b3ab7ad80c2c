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

A typed learning (not a conversation chunk) that the message leaves unrelated (relevance
under :data:`~engrain.recall.select.UNRELATED_RELEVANCE`: a related memory is judged on its
own relevance) is *pointed to* by a clear match (another typed learning at least
:data:`~engrain.recall.area.AREA_RELEVANCE` relevant) when

* they share at least :data:`MIN_SHARED` terms the message does not say that at most
  :data:`RARE_DF` of the pool's learnings carry (names of tools, hosts, parts, numbers:
  "slurm", "a100", "critcmp", "kconfig"; a word most memories use links nothing), and
* their own embeddings are at least :data:`MIN_COSINE` similar (the same meaning, not
  only the same names: two memories of one subsystem that say different things stay
  apart).

Its relevance becomes the chain's: the clear match's relevance times that cosine; nothing
else changes, and the thresholds, the shares and the budget judge it as any memory. On the
gating evaluation's tuning halves, 11 learnings were raised so and selected, 4 of them
labelled as needed (the fact about the cluster for the sbatch script; the Sentry
crash-free target for the Play staged rollout; the Kconfig preference for a current-draw
bug whose match is the Kconfig pattern; the criterion golden path for "what does Kenji
want in a perf PR", whose match says he asks for critcmp output), where a tenth of all
injected memories is labelled. Without the cosine test (shared names alone) 56 were, 4
labelled, linked through ordinary words ("object", "task"; "back", "roll").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from engrain.model import Vector
from engrain.recall.area import AREA_RELEVANCE
from engrain.recall.relevance import Candidate
from engrain.recall.select import UNRELATED_RELEVANCE
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


def _uncommon(term: str, learnings: Sequence[tuple[str, str]]) -> bool:
    """Whether at most :data:`RARE_DF` of ``learnings`` (each a memory's content and its
    lowercased text) carry ``term`` among their :func:`terms_of`. Only a text containing
    the term's letters is tokenized (a term is a stem, a prefix of the word it comes from,
    but for "-ies" made "-y" and "-ing" / "-ed" given back the word's "e": "hoping" →
    "hope"; a final "y" or "e" is left out of the probe), and the count stops at the first
    memory past the limit, so a call tokenizes little beyond the memories it links."""
    probe = term[:-1] if term.endswith(("y", "e")) else term
    seen = 0
    for content, text in learnings:
        if probe in text and term in terms_of(content):
            seen += 1
            if seen > RARE_DF:
                return False
    return True


def with_pointed(
    pool: Sequence[Candidate], message: str
) -> tuple[list[Candidate], dict[str, tuple[str, float]]]:
    """``pool`` (best relevance first) with the relevance of every typed learning a clear
    match points to raised to the chain's (the match's relevance times the two memories'
    cosine), and for each raised id its pointer and its new relevance. A pool without a
    clear typed match comes back as it is. The cosines come first, in one product; terms
    are read only for the pairs they leave (memoised per text)."""
    learnings = _learnings(pool)
    clear = [(c, v) for c, v in learnings if c.relevance >= AREA_RELEVANCE]
    # only what the message leaves unrelated: a related memory is judged on its relevance
    low = [(c, v) for c, v in learnings if c.relevance < UNRELATED_RELEVANCE]
    if not clear or not low:
        return list(pool), {}
    cosines = (np.stack([v for _, v in low]) @ np.stack([v for _, v in clear]).T).astype(
        np.float64
    )  # unrelated learnings x clear matches
    chained = cosines * np.array([c.relevance for c, _ in clear], dtype=np.float64)
    rows, cols = np.nonzero(cosines >= MIN_COSINE)
    if not len(rows):
        return list(pool), {}
    asked = frozenset(tokenize(message))
    shared: dict[tuple[int, int], frozenset[str]] = {}
    for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
        terms = terms_of(low[row][0].memory.content) & terms_of(clear[col][0].memory.content)
        terms -= asked
        if len(terms) >= MIN_SHARED:
            shared[row, col] = terms
    if not shared:
        return list(pool), {}
    texts = [(c.memory.content, c.memory.content.lower()) for c, _ in learnings]
    known: dict[str, bool] = {}

    def linked(terms: frozenset[str]) -> bool:
        found = 0
        for term in sorted(terms):
            if term not in known:
                known[term] = _uncommon(term, texts)
            found += known[term]
            if found >= MIN_SHARED:
                return True
        return False

    pointed: dict[str, tuple[str, float]] = {}
    for (row, col), terms in sorted(shared.items(), key=lambda kv: -chained[kv[0]]):
        candidate = low[row][0]
        if candidate.id in pointed or not linked(terms):
            continue
        pointed[candidate.id] = (clear[col][0].id, float(chained[row, col]))
    if not pointed:
        return list(pool), {}
    out = [replace(c, relevance=pointed[c.id][1]) if c.id in pointed else c for c in pool]
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out, pointed
