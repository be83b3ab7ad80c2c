"""What a compiled tier may hold: promotion, semantic dedup and the decay filter.

Run in this order at each recompilation (the document's pipeline): items used 10 times are
promoted first; near-duplicates (cosine above 0.85) collapse to one canonical item; items
whose per-kind recency has decayed below 0.10 are left out unless promoted; what remains is
ranked promoted first, then by use, then by how fresh it still is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np

from engrain.model import Kind, Memory
from engrain.recall.score import age_days, decay

#: Uses at which an item is promoted (its ``access_count``).
PROMOTION_USES = 10
#: Cosine similarity above which two items are one for compilation.
DEDUP_SIMILARITY = 0.85
#: Per-kind recency below which an unpromoted item is left out of tiers 1 and 2.
DECAY_FLOOR = 0.10

#: Kinds the compiled tiers draw on (project learnings, the user's preferences and facts).
TIER_KINDS = (
    Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.GOLDEN_PATH, Kind.ANTIPATTERN,
    Kind.PREFERENCE, Kind.FACT,
)  # fmt: skip


def promote_high_usage(memories: Iterable[Memory], now: datetime) -> list[Memory]:
    """The items used at least :data:`PROMOTION_USES` times and not yet promoted, with
    ``promoted_at`` set to ``now`` (the caller writes them)."""
    return [
        m.evolve(promoted_at=now)
        for m in memories
        if m.promoted_at is None and m.access_count >= PROMOTION_USES
    ]


def recency(memory: Memory, now: datetime) -> float:
    """The item's per-kind recency (the tiered-context half-lives; invariants stay 1.0)."""
    return decay(memory.kind, age_days(memory.when, now))


def survives_decay(memory: Memory, now: datetime) -> bool:
    """Promoted items always; others while their recency is at least :data:`DECAY_FLOOR`."""
    return memory.promoted_at is not None or recency(memory, now) >= DECAY_FLOOR


def _preference(memory: Memory) -> tuple[bool, int, datetime, str]:
    """Which of two near-duplicates is canonical: promoted, then most used, then most
    recently updated (the id breaks exact ties so the choice is stable)."""
    return (memory.promoted_at is not None, memory.access_count, memory.updated_at, memory.id)


def canonical(
    memories: Sequence[Memory], threshold: float = DEDUP_SIMILARITY
) -> tuple[list[Memory], dict[str, list[str]]]:
    """Group items whose embeddings are more than ``threshold`` cosine-similar; keep one per
    group. Returns the canonical items (best first by :func:`_preference`) and, for each,
    the ids of the items folded into it. Items without an embedding stand alone."""
    ordered = sorted(memories, key=_preference, reverse=True)
    kept: list[Memory] = []
    folded: dict[str, list[str]] = {}
    dims = {m.embedding.shape[0] for m in ordered if m.embedding is not None}
    matrix = np.zeros((len(ordered), dims.pop() if len(dims) == 1 else 0), dtype=np.float32)
    owners: list[Memory] = []  # the kept item behind each filled row of ``matrix``
    for memory in ordered:
        vector = memory.embedding
        usable = vector is not None and matrix.shape[1] == vector.shape[0]
        if usable and owners:
            sims = matrix[: len(owners)] @ vector
            best = int(np.argmax(sims))
            if float(sims[best]) > threshold:
                folded[owners[best].id].append(memory.id)
                continue
        kept.append(memory)
        folded[memory.id] = []
        if usable:
            matrix[len(owners)] = vector
            owners.append(memory)
    return kept, folded


def rank(memories: Iterable[Memory], now: datetime) -> list[Memory]:
    """Promoted first, then most used, then freshest, then oldest learned first."""
    return sorted(
        memories,
        key=lambda m: (
            m.promoted_at is None, -m.access_count, -recency(m, now), m.created_at, m.id,
        ),
    )  # fmt: skip


def eligible(memories: Iterable[Memory], now: datetime) -> tuple[list[Memory], dict[str, int]]:
    """The ranked items a tier may hold: tier kinds only, one per near-duplicate group,
    decayed items out unless promoted. Also returns how many each step removed."""
    pool = [m for m in memories if m.kind in TIER_KINDS]
    kept, folded = canonical(pool)
    alive = [m for m in kept if survives_decay(m, now)]
    stats = {
        "considered": len(pool),
        "duplicates": sum(len(v) for v in folded.values()),
        "decayed": len(kept) - len(alive),
    }
    return rank(alive, now), stats
