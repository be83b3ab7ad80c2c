"""Dedup's cosine prefilter (``dedup._close``): which recent memories reach the Dice
comparison when the new text's vector is known (issue 18 rewrote how it builds its matrix)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engrain.ingest.dedup import PREFILTER_COSINE, _close, find_duplicate
from engrain.model import Kind, Memory, MemoryType

from .conftest import NOW


def _memory(key: str, content: str, embedding: np.ndarray | None) -> Memory:
    memory = Memory(
        id=key, user_id="u", content=content, memory_type=MemoryType.SEMANTIC,
        kind=Kind.FACT, created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    return replace(memory, embedding=embedding)


def _unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_the_prefilter_keeps_close_vectors_in_order_then_memories_without_one() -> None:
    query = _unit(1, 0, 0)
    close = _memory("close", "x", _unit(1, 0.2, 0))
    far = _memory("far", "x", _unit(0, 1, 0))
    edge = _memory("edge", "x", _unit(PREFILTER_COSINE, (1 - PREFILTER_COSINE**2) ** 0.5, 0))
    bare = _memory("bare", "x", None)
    other_model = _memory("dim", "x", _unit(1, 0))  # another dimension: never compared
    kept = _close([far, bare, close, other_model, edge], query)
    sims = {m.id: float(m.embedding @ query) for m in (close, far, edge)}
    expected = [m.id for m in (close, edge) if sims[m.id] >= PREFILTER_COSINE] + ["bare"]
    assert [m.id for m in kept] == expected
    assert _close([other_model], query) == []
    assert [m.id for m in _close([bare, other_model], query)] == ["bare"]


def test_a_textual_near_duplicate_with_a_far_vector_is_not_merged() -> None:
    text = "My timezone is EST timezone"
    alike = "My timezone is EST"
    query = _unit(1, 0, 0)
    assert find_duplicate(text, [_memory("far", alike, _unit(0, 1, 0))], vector=query) is None
    found = find_duplicate(text, [_memory("near", alike, _unit(1, 0.1, 0))], vector=query)
    assert found is not None and found.id == "near"
    assert find_duplicate(text, [_memory("bare", alike, None)], vector=query) is not None
