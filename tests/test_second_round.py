"""A question about a person: its conversation chunks ranked a second time by their cosine
with the mean vector of the first round's best (recall.second_round, issue 15)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector
from engrain.recall import pool_rules
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.second_round import (
    FUSION_K,
    SECOND_ROUND_WEIGHT,
    SEEDS,
    TUNED_WEIGHT,
    with_second_round,
)
from engrain.store.memory import MemoryStore

from .conftest import NOW, make_settings

#: Three directions: what the person talks about (0), other things (1), greetings (2).
AXES = np.eye(3, dtype=np.float32)


def _chunk(name: str, content: str, axis: int | None, relevance: float) -> Candidate:
    memory = Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW,
                        provenance=Provenance((f"D1:{name}",)),
                        embedding=None if axis is None else AXES[axis])  # fmt: skip
    return Candidate(memory, 0.5, 0.0, relevance)


def _pool(axes: Sequence[int | None] = (0, 0, 2, 2, 0, 1)) -> list[Candidate]:
    """Six chunks, relevance 0.9 down to 0.4, on the given axes; the third is the other
    speaker's, so the question "What does Mel do?" names one of two speakers."""
    names = "ABCDEF"
    return [
        _chunk(names[i], "Cat: Hello there!" if i == 2 else f"Mel: I did thing {names[i]}.",
               axis, 0.9 - i / 10)
        for i, axis in enumerate(axes)
    ]  # fmt: skip


def _order(pool: Sequence[Candidate]) -> str:
    return "".join(c.memory.provenance.turn_ids[0][-1] for c in pool)


def test_a_chunk_near_the_best_ones_moves_up_by_the_fused_rank() -> None:
    pool = _pool()
    out = with_second_round(pool, "What does Mel do?", weight=1.0, seeds=2)
    # seeds A, B: mean along axis 0; E (5th) is 3rd by that cosine and passes D (4th
    # first, 5th second): 1/64 + 1/62 > 1/63 + 1/64, while C keeps its place over E
    # (1/62 + 1/63 > 1/64 + 1/62)
    assert 1 / (FUSION_K + 4) + 1 / (FUSION_K + 2) > 1 / (FUSION_K + 3) + 1 / (FUSION_K + 4)
    assert _order(out) == "ABCEDF"
    # the pool's relevance values are handed out again in the new order
    assert [round(c.relevance, 6) for c in out] == [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    assert next(c for c in out if c.id == pool[4].id).relevance == pytest.approx(0.6)
    assert [c.memory for c in out if c.id == pool[4].id] == [pool[4].memory]


def test_a_lighter_second_ranking_moves_less() -> None:
    # the same pool at the measured weight: E's lead on the second ranking is too small
    assert TUNED_WEIGHT == 0.3
    out = with_second_round(_pool(), "What does Mel do?", weight=TUNED_WEIGHT, seeds=2)
    assert _order(out) == "ABCDEF"
    # ... unless the first ranking's gap is small and the second's large
    far = _pool((0, 0, 2, 2, 2, 2))
    far.append(_chunk("G", "Mel: I did thing G.", 0, 0.3))
    out = with_second_round(far, "What does Mel do?", weight=TUNED_WEIGHT, seeds=2)
    assert _order(out) == "ABCDEGF"


@pytest.mark.parametrize(
    ("message", "weight", "seeds"),
    [
        ("What does Mel do?", 0.0, 2),  # off
        ("What does everyone do?", 1.0, 2),  # no speaker named
        ("What do Mel and Cat do?", 1.0, 2),  # every speaker named
        ("What does Mel do?", 1.0, 6),  # no more chunks than seeds
        ("What does Mel do?", 1.0, 0),
    ],
)
def test_nothing_moves_without_a_named_speaker_or_enough_chunks(
    message: str, weight: float, seeds: int
) -> None:
    pool = _pool()
    assert with_second_round(pool, message, weight=weight, seeds=seeds) == pool


def test_chunks_without_a_vector_keep_their_place_and_do_not_seed() -> None:
    pool = _pool((None, 0, 2, 2, 0, 1))
    out = with_second_round(pool, "What does Mel do?", weight=1.0, seeds=2)
    assert out[0] == pool[0]  # A: no vector, untouched
    # seeds are B and C (the best two with vectors): their mean is as near D and E as
    # them, so the second ranking agrees with the first and nothing moves
    assert _order(out) == "ABCDEF"
    learning = Memory.new("u", "Mel prefers tea.", MemoryType.SEMANTIC, Kind.PREFERENCE, now=NOW,
                          embedding=AXES[0])  # fmt: skip
    mixed = [Candidate(learning, 0.5, 0.0, 0.95), *_pool()]
    out = with_second_round(mixed, "What does Mel do?", weight=1.0, seeds=2)
    assert out[0] == mixed[0]  # not a conversation chunk: not ranked, not a seed
    assert _order(out[1:]) == "ABCEDF"


def test_the_gate_runs_it_with_the_options_weight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # off by default (it cost R@10 on both halves); the option reaches the stage
    assert GateOptions().second_round == SECOND_ROUND_WEIGHT == 0.0 and SEEDS == 5
    pool = _pool()
    assert with_second_round(pool, "What does Mel do?", seeds=2) == pool
    seen: list[float] = []

    def spy(pool: Sequence[Candidate], message: str, weight: float) -> list[Candidate]:
        seen.append(weight)
        return list(pool)

    monkeypatch.setattr(pool_rules, "with_second_round", spy)
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=_Axes())
    turns = [Turn("Mel", "I went swimming.", "D1:1", NOW), Turn("Cat", "Nice!", "D1:2", NOW)]
    engine.ingest_conversation(turns, "u", "s1", now=NOW)
    options = engine.options.update(second_round=0.25)
    engine.explain("What sports does Mel do?", "u", token_budget=500, options=options, now=NOW)
    assert seen == [0.25]


class _Axes:
    """Every text along the first axis: enough for the pipeline to run."""

    model_id = "axes"
    dim = 3

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.tile(AXES[0], (len(texts), 1))

    def embed_query(self, text: str) -> Vector:
        vector: Vector = AXES[0]
        return vector
