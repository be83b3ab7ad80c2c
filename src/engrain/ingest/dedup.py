"""Near-duplicate detection (ADR-002): character-bigram Dice coefficient above 0.80 against
recent memories of the same type updates the existing memory instead of inserting."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from engrain.corrections import same_subject
from engrain.model import Memory, Vector

DICE_THRESHOLD = 0.80
PREFILTER_COSINE = 0.5


@lru_cache(maxsize=16_384)
def bigrams(text: str) -> frozenset[str]:
    """The distinct character pairs of the lowercased, whitespace-folded text.

    Distinct pairs, not a multiset: with them the ADR's own example ("My timezone is EST"
    against "My timezone is EST timezone") scores 0.97 and is caught, as the ADR says it is;
    counted with multiplicity it would score 0.79 and slip through."""
    folded = " ".join(text.lower().split())
    return frozenset(folded[i : i + 2] for i in range(len(folded) - 1))


def dice_coefficient(a: str, b: str) -> float:
    """``2 × shared bigrams / total bigrams``; 1.0 for identical texts."""
    if a == b:
        return 1.0
    ba, bb = bigrams(a), bigrams(b)
    total = len(ba) + len(bb)
    if total == 0:
        return 0.0
    return 2.0 * len(ba & bb) / total


def find_duplicate(
    text: str,
    recent: Iterable[Memory],
    threshold: float = DICE_THRESHOLD,
    vector: Vector | None = None,
) -> Memory | None:
    """The most similar of ``recent`` whose Dice coefficient with ``text`` exceeds
    ``threshold``, or ``None``.

    With ``vector`` (the text's embedding), memories whose cosine with it is below
    ``PREFILTER_COSINE`` are skipped without computing Dice: texts sharing more than 80% of
    their bigrams are near-identical and embed far closer than that. Texts about different
    subjects (``corrections.same_subject``) are never duplicates, however alike."""
    pool = list(recent)
    if vector is not None:
        pool = _close(pool, vector)
    best: Memory | None = None
    best_score = threshold
    size = len(bigrams(text))
    for memory in pool:
        # Dice cannot exceed 2·min/(sum) of the two set sizes: skip hopeless pairs cheaply.
        other = len(bigrams(memory.content))
        if 2 * min(size, other) <= threshold * (size + other):
            continue
        score = dice_coefficient(text, memory.content)
        # "Service 3 runs on port 8033" / "Service 5 …": alike letters, another subject
        if score > best_score and same_subject(memory.content, text):
            best, best_score = memory, score
    return best


def _close(pool: list[Memory], vector: Vector) -> list[Memory]:
    with_vectors: list[Memory] = []
    rows: list[Vector] = []
    without: list[Memory] = []
    for m in pool:
        if m.embedding is None:
            without.append(m)
        elif m.embedding.shape == vector.shape:
            with_vectors.append(m)
            rows.append(m.embedding)
    if not with_vectors:
        return without
    # one C-level copy into a matrix (np.vstack checks and reshapes each row in Python)
    sims = np.array(rows) @ vector
    close = [m for m, s in zip(with_vectors, sims, strict=True) if s >= PREFILTER_COSINE]
    return close + without
