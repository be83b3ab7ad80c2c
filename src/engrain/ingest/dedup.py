"""Near-duplicate detection (ADR-002): character-bigram Dice coefficient above 0.80 against
recent memories of the same type updates the existing memory instead of inserting."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from engrain.model import Memory

DICE_THRESHOLD = 0.80


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
    text: str, recent: Iterable[Memory], threshold: float = DICE_THRESHOLD
) -> Memory | None:
    """The most similar of ``recent`` whose Dice coefficient with ``text`` exceeds
    ``threshold``, or ``None``."""
    best: Memory | None = None
    best_score = threshold
    size = len(bigrams(text))
    for memory in recent:
        # Dice cannot exceed 2·min/(sum) of the two set sizes: skip hopeless pairs cheaply.
        other = len(bigrams(memory.content))
        if 2 * min(size, other) <= threshold * (size + other):
            continue
        score = dice_coefficient(text, memory.content)
        if score > best_score:
            best, best_score = memory, score
    return best
