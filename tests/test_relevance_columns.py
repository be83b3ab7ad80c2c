"""A pool's blends and relevances computed as NumPy columns (``recall.relevance.blends``,
``gather``) are the per-candidate Python arithmetic's to the last bit, and the pool keeps
its order: best relevance first, ties in the order the memories joined it (docs/scale.md,
session 20, h1). A deep pool (7,500 tokens: 187 nearest and 187 lexical matches) computed
these one candidate at a time."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.recall.relevance import (
    LEXICAL_WEIGHT,
    RELEVANCE_FLOOR,
    Candidate,
    blend,
    blends,
    gather,
)
from engrain.store import MemoryStore
from engrain.store.base import MemoryFilter

NOW = datetime(2026, 1, 15, 12, tzinfo=UTC)


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


@pytest.mark.parametrize("weight", [LEXICAL_WEIGHT, 0.0, 0.5, 0.1])
def test_blends_equal_blend_bit_for_bit(weight: float) -> None:
    rng = random.Random(20)
    sims = [rng.uniform(-0.3, 1.0) for _ in range(2_000)]
    sims += [0.0, -0.0, 0.2, 0.19999999999999998, 0.20000000000000004, 1.0, -1.0]
    lexes = [rng.choice([0.0, 1.0, rng.random()]) for _ in sims]
    columns = blends(np.array(sims), np.array(lexes), weight).tolist()
    scalar = [blend(s, x, weight) for s, x in zip(sims, lexes, strict=True)]
    assert [_bits(v) for v in columns] == [_bits(v) for v in scalar]


def _reference(
    dense: list[tuple[Memory, float]],
    lexical: list[tuple[Memory, float]],
    include: list[tuple[Memory, float]],
    vector: np.ndarray,
) -> list[Candidate]:
    """The pool as ``gather`` built it one candidate at a time (before session 20)."""
    best = max((score for _, score in lexical), default=0.0)
    lex = {m.id: score / best for m, score in lexical} if best > 0 else {}
    memories = {m.id: m for m, _ in dense}
    sims = {m.id: s for m, s in dense}
    for memory, _ in lexical:
        if memory.id not in memories:
            memories[memory.id] = memory
            sims[memory.id] = float(np.dot(memory.embedding, vector))
    for memory, sim in include:
        if memory.id not in memories:
            memories[memory.id] = memory
            sims[memory.id] = sim
    weight = LEXICAL_WEIGHT if lex else 0.0
    mixed = {mid: blend(sims[mid], lex.get(mid, 0.0), weight) for mid in memories}
    scale = max(max(mixed.values(), default=0.0), RELEVANCE_FLOOR)
    out = [Candidate(m, sims[mid], lex.get(mid, 0.0), min(1.0, mixed[mid] / scale))
           for mid, m in memories.items()]  # fmt: skip
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out


def _memory(i: int, vector: np.ndarray) -> Memory:
    return Memory.new("ada", f"note {i} about the billing service", MemoryType.SEMANTIC,
                      Kind.FACT, now=NOW, embedding=vector.astype(np.float32))  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gather_gives_the_scalar_pool_in_its_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vector = rng.normal(size=16)
    vector /= np.linalg.norm(vector)
    memories = []
    for i in range(400):
        v = rng.normal(size=16)
        memories.append(_memory(i, v / np.linalg.norm(v)))
    cos = [float(np.dot(m.embedding, vector)) for m in memories]
    # ties on purpose: equal similarities and lexical scores, several relevances of 1.0
    for i in range(0, 60, 3):
        cos[i + 1] = cos[i]
    dense = sorted(((m, c) for m, c in zip(memories[:187], cos[:187], strict=True)),
                   key=lambda mc: -mc[1])  # fmt: skip
    lexical = [(m, float(rng.choice([3.0, 2.0, 7.5]))) for m in memories[100:287]]
    include = [(m, c) for m, c in zip(memories[280:320], cos[280:320], strict=True)]
    pool = gather(MemoryStore(), "ada", "billing service", vector, MemoryFilter(), pool=187,
                  lexical=lexical, dense=dense, include=include)  # fmt: skip
    expected = _reference(dense, lexical, include, vector)
    assert [c.id for c in pool] == [c.id for c in expected]
    assert [(_bits(c.relevance), _bits(c.similarity), c.lexical) for c in pool] == [
        (_bits(c.relevance), _bits(c.similarity), c.lexical) for c in expected
    ]
    assert sum(1 for c in pool if c.relevance == 1.0) >= 1
    assert len({c.relevance for c in pool}) < len(pool)  # some ties were ordered


def test_an_empty_pool() -> None:
    assert gather(MemoryStore(), "ada", "anything", np.ones(4), MemoryFilter(), pool=10,
                  lexical=[], dense=[]) == []  # fmt: skip
