"""Near-duplicate detection (ADR-002): character-bigram Dice coefficient above 0.80 against
recent memories of the same type updates the existing memory instead of inserting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from engrain.model import Memory

DICE_THRESHOLD = 0.80


@lru_cache(maxsize=16_384)
def bigrams(text: str) -> Counter[str]:
    """The multiset of character pairs of the lowercased, whitespace-folded text."""
    folded = " ".join(text.lower().split())
    return Counter(folded[i : i + 2] for i in range(len(folded) - 1))


def dice_coefficient(a: str, b: str) -> float:
    """``2 × shared bigrams / total bigrams``; 1.0 for two identical one-character texts."""
    if a == b:
        return 1.0
    ba, bb = bigrams(a), bigrams(b)
    total = sum(ba.values()) + sum(bb.values())
    if total == 0:
        return 0.0
    return 2.0 * sum((ba & bb).values()) / total


def find_duplicate(
    text: str, recent: Iterable[Memory], threshold: float = DICE_THRESHOLD
) -> Memory | None:
    """The most similar of ``recent`` whose Dice coefficient with ``text`` exceeds
    ``threshold``, or ``None``."""
    best: Memory | None = None
    best_score = threshold
    size = len(text)
    for memory in recent:
        # Dice cannot exceed 2·min/(sum) of the bigram counts: skip hopeless length pairs.
        other = len(memory.content)
        if 2 * min(size, other) / max(size + other, 1) <= threshold:
            continue
        score = dice_coefficient(text, memory.content)
        if score > best_score:
            best, best_score = memory, score
    return best
