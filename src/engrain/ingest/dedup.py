"""Near-duplicate detection (ADR-002): character-bigram Dice coefficient above 0.80 against
recent memories of the same type updates the existing memory instead of inserting."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from engrain.corrections import same_subject
from engrain.embed.base import Matrix
from engrain.model import Memory, Vector

DICE_THRESHOLD = 0.80
PREFILTER_COSINE = 0.5
#: Distinct bigrams given a bit of their own (:func:`bigram_bits`); a text with a bigram
#: beyond them keeps its set (English and LoCoMo text use ~1,500; the cap bounds the ints'
#: width and the table's memory for scripts with many characters).
BIT_SLOTS = 4_096


@lru_cache(maxsize=16_384)
def bigrams(text: str) -> frozenset[str]:
    """The distinct character pairs of the lowercased, whitespace-folded text.

    Distinct pairs, not a multiset: with them the ADR's own example ("My timezone is EST"
    against "My timezone is EST timezone") scores 0.97 and is caught, as the ADR says it is;
    counted with multiplicity it would score 0.79 and slip through."""
    folded = " ".join(text.lower().split())
    return frozenset(folded[i : i + 2] for i in range(len(folded) - 1))


_SLOTS: dict[str, int] = {}
_SLOTS_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    """A forked child's own lock: the parent's may have been held by a thread the child
    does not have. The table and the bits it gave stay valid in the child."""
    global _SLOTS_LOCK
    _SLOTS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_new_lock_in_child)


@lru_cache(maxsize=16_384)
def bigram_bits(text: str) -> tuple[int, int] | None:
    """:func:`bigrams` as an integer with one bit per distinct bigram (the bit a bigram got
    when the process first saw it) and the set's size, or ``None`` when the text holds a
    bigram the table has no room for (:data:`BIT_SLOTS`). For two texts with bits,
    ``(a & b).bit_count()`` is ``len(bigrams(a) & bigrams(b))`` exactly: one AND and a
    popcount instead of hashing every bigram of the smaller set (~30x faster on LoCoMo's
    chunks, the dedup's inner loop)."""
    pairs = bigrams(text)
    bits = 0
    with _SLOTS_LOCK:  # two threads must not give two bigrams one bit
        for pair in pairs:
            slot = _SLOTS.get(pair)
            if slot is None:
                if len(_SLOTS) >= BIT_SLOTS:
                    return None
                slot = _SLOTS[pair] = len(_SLOTS)
            bits |= 1 << slot
    return bits, len(pairs)


def _shared(a: str, b: str) -> int:
    """``len(bigrams(a) & bigrams(b))``, by their bits where both have them."""
    bits_a, bits_b = bigram_bits(a), bigram_bits(b)
    if bits_a is None or bits_b is None:
        return len(bigrams(a) & bigrams(b))
    return (bits_a[0] & bits_b[0]).bit_count()


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
    return best_duplicate(text, pool, threshold)


def best_duplicate(
    text: str, candidates: Iterable[Memory], threshold: float = DICE_THRESHOLD
) -> Memory | None:
    """The first of ``candidates`` with the highest Dice coefficient with ``text`` above
    ``threshold`` and about the same subject, or ``None`` (:func:`find_duplicate` without
    the cosine prefilter: the caller has applied it). The coefficient is
    :func:`dice_coefficient`'s, computed inline on the cached bigram sets (one lookup per
    memory instead of three calls: ingest compares each chunk with up to ``dedup_window``
    memories). The shared bigrams are counted on the texts' bits (:func:`bigram_bits`),
    the same integers as the sets' intersection."""
    best: Memory | None = None
    best_score = threshold
    size = len(bigrams(text))
    for memory in candidates:
        other = len(bigrams(memory.content))
        # Dice cannot exceed 2·min/(sum) of the two set sizes: skip hopeless pairs cheaply.
        if 2 * min(size, other) <= threshold * (size + other):
            continue
        if memory.content == text:
            score = 1.0
        else:
            score = 2.0 * _shared(text, memory.content) / (size + other)
        # "Service 3 runs on port 8033" / "Service 5 …": alike letters, another subject
        if score > best_score and same_subject(memory.content, text):
            best, best_score = memory, score
    return best


class Recent:
    """The recent memories one call's chunks are deduplicated against (read once per call
    and memory type), with their vectors stacked once per vector size, so each chunk's
    cosine prefilter is one matrix-vector product instead of a copy of every vector."""

    def __init__(self, memories: Sequence[Memory]) -> None:
        self.memories = list(memories)
        self._stacked: dict[tuple[int, ...], tuple[list[Memory], Matrix]] = {}
        self._bare = [m for m in self.memories if m.embedding is None]

    def partition(self, vector: Vector) -> tuple[list[Memory], list[Memory]]:
        """The memories whose cosine with ``vector`` reaches ``PREFILTER_COSINE`` and those
        without a vector, each in their order (a vector of another size: neither)."""
        stacked = self._stacked.get(vector.shape)
        if stacked is None:
            rows = [m for m in self.memories
                    if m.embedding is not None and m.embedding.shape == vector.shape]  # fmt: skip
            matrix: Matrix = np.array([m.embedding for m in rows], dtype=np.float32)
            stacked = (rows, matrix)
            self._stacked[vector.shape] = stacked
        rows, matrix = stacked
        if not rows:
            return [], self._bare
        sims = matrix @ vector
        return [m for m, s in zip(rows, sims, strict=True) if s >= PREFILTER_COSINE], self._bare


def partition(pool: Sequence[Memory], vector: Vector) -> tuple[list[Memory], list[Memory]]:
    """:meth:`Recent.partition` for a pool used once."""
    return Recent(pool).partition(vector)


def _close(pool: list[Memory], vector: Vector) -> list[Memory]:
    close, without = partition(pool, vector)
    return close + without
