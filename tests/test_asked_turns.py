"""A question about a person: the tail of its conversation chunks fused with their order by
that person's best turn (recall.asked_turns, issue 15, session 16)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector
from engrain.recall import pool_rules
from engrain.recall.asked_turns import ASKED_TURNS_WEIGHT, KEEP, turn_score, with_asked_turns
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.second_round import FUSION_K
from engrain.recall.speakers import SPEAKER_WEIGHT
from engrain.store.memory import MemoryStore

from .conftest import NOW, make_settings
from .test_second_round import _Axes

#: Three directions: what the question asks about (0), other things (1), greetings (2).
AXES = np.eye(3, dtype=np.float32)
ASK = "What sports does Mel play?"
STRIPPED = "What sports does play?"


def _chunk(name: str, content: str, axis: int, relevance: float) -> Candidate:
    turns = tuple(f"D1:{name}{n}" for n in range(len(content.split("\n"))))
    memory = Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW,
                        provenance=Provenance(turns), embedding=AXES[axis])  # fmt: skip
    return Candidate(memory, 0.5, 0.0, relevance)


def _pool(axes: Sequence[int]) -> list[Candidate]:
    """One chunk per axis, relevance 0.9, 0.8, …; the second is the other speaker's (so
    the question names one of two speakers), the others Mel's one-line chunks."""
    names = "ABCDEFGH"
    return [
        _chunk(names[i], "Cat: Hello there!" if i == 1 else f"Mel: I did thing {names[i]}.",
               axis, 0.9 - i / 10)
        for i, axis in enumerate(axes)
    ]  # fmt: skip


def _order(pool: Sequence[Candidate]) -> str:
    return "".join(c.memory.provenance.turn_ids[0][-2] for c in pool)


class _Queries:
    """An ``embed_query`` that records what it embeds: every text along axis 0."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> Vector:
        self.texts.append(text)
        vector: Vector = AXES[0]
        return vector


def test_a_tail_chunk_whose_turn_matches_moves_up_by_the_fused_rank() -> None:
    # pool order A B C D E F; turn order (axis 0 first): A C E, then B D F (cosine 0)
    pool = _pool((0, 2, 0, 1, 0, 1))
    queries = _Queries()
    out = with_asked_turns(pool, ASK, 1.0, queries, None, keep=2)
    assert queries.texts == [STRIPPED]  # the question without the asked speaker's name
    # A, B kept; E (pool rank 4, turn rank 2) passes D (3 and 4), C (2 and 1) stays first
    assert 1 / (FUSION_K + 4) + 1 / (FUSION_K + 2) > 1 / (FUSION_K + 3) + 1 / (FUSION_K + 4)
    assert _order(out) == "ABCEDF"
    # the pool's relevance values are handed out again in the new order
    assert [round(c.relevance, 6) for c in out] == [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    assert [c.memory for c in out if c.id == pool[4].id] == [pool[4].memory]


def test_the_kept_chunks_stay_whatever_their_turns_say() -> None:
    # B is the other speaker's greeting and D the best turn: with keep 2, B stays second
    pool = _pool((0, 2, 1, 0, 1, 1))
    out = with_asked_turns(pool, ASK, 1.0, _Queries(), None, keep=2)
    assert _order(out)[:2] == "AB"
    assert _order(out) == "ABDCEF"
    # with every chunk kept nothing moves, and nothing is embedded
    queries = _Queries()
    assert with_asked_turns(pool, ASK, 1.0, queries, None, keep=6) == pool
    assert queries.texts == []


def test_the_measured_weight_moves_less_than_an_equal_one() -> None:
    assert (ASKED_TURNS_WEIGHT, KEEP) == (0.5, 20)
    # G, last in the pool (rank 6), is the best turn of the tail (turn rank 1, after A)
    pool = _pool((0, 2, 1, 1, 1, 1, 0))
    # at 1 it passes D (ranks 3 and 4) …
    assert 1 / (FUSION_K + 6) + 1 / (FUSION_K + 1) > 1 / (FUSION_K + 3) + 1 / (FUSION_K + 4)
    assert _order(with_asked_turns(pool, ASK, 1.0, _Queries(), None, keep=2)) == "ABCGDEF"
    # … at the measured weight only E and F (ranks 4 and 5, turn ranks 5 and 6)
    w = ASKED_TURNS_WEIGHT
    assert 1 / (FUSION_K + 6) + w / (FUSION_K + 1) < 1 / (FUSION_K + 3) + w / (FUSION_K + 4)
    assert 1 / (FUSION_K + 6) + w / (FUSION_K + 1) > 1 / (FUSION_K + 4) + w / (FUSION_K + 5)
    assert _order(with_asked_turns(pool, ASK, w, _Queries(), None, keep=2)) == "ABCDGEF"


@pytest.mark.parametrize(
    ("message", "weight"),
    [
        (ASK, 0.0),  # off
        ("What sports does everyone play?", 1.0),  # no speaker named
        ("What sports do Mel and Cat play?", 1.0),  # every speaker named
    ],
)
def test_nothing_moves_without_a_named_speaker(message: str, weight: float) -> None:
    pool = _pool((0, 2, 1, 1, 0, 0))
    queries = _Queries()
    assert with_asked_turns(pool, message, weight, queries, None, keep=2) == pool
    assert queries.texts == []


def test_a_pool_without_conversation_chunks_reads_no_line_vectors() -> None:
    learnings = [
        Candidate(Memory.new("u", f"Mel prefers tea {n}.", MemoryType.SEMANTIC,
                             Kind.PREFERENCE, now=NOW, embedding=AXES[0]), 0.5, 0.0, 0.9 - n / 10)
        for n in range(5)
    ]  # fmt: skip
    read: list[Memory] = []

    def line_vectors(memory: Memory) -> npt.NDArray[np.float32] | None:
        read.append(memory)
        return None

    queries = _Queries()
    assert with_asked_turns(learnings, ASK, 1.0, queries, line_vectors, keep=2) == learnings
    assert read == [] and queries.texts == []


def test_a_chunk_scores_the_asked_speakers_best_line() -> None:
    asked = frozenset({"mel"})
    query = AXES[0]
    two = _chunk("A", "Cat: Do you swim?\nMel: Every Sunday.", 1, 0.9).memory
    lines = {two.id: np.stack([AXES[0], AXES[2]])}  # Cat's line on the question's axis

    def line_vectors(memory: Memory) -> npt.NDArray[np.float32] | None:
        return lines.get(memory.id)

    # Mel's line (axis 2) counts, not Cat's (axis 0), nor the chunk's own vector (axis 1)
    assert turn_score(two, asked, query, line_vectors) == pytest.approx(0.0)
    lines[two.id] = np.stack([AXES[1], AXES[0]])
    assert turn_score(two, asked, query, line_vectors) == pytest.approx(1.0)
    # line vectors unknown (or not one per line): the chunk's own vector
    assert turn_score(two, asked, query, None) == pytest.approx(0.0)
    lines[two.id] = np.stack([AXES[0]])
    assert turn_score(two, asked, query, line_vectors) == pytest.approx(0.0)
    # one line of Mel's: its own vector, no line vector read
    one = _chunk("B", "Mel: Every Sunday.", 0, 0.9).memory
    assert turn_score(one, asked, query, line_vectors) == pytest.approx(1.0)
    # no line of Mel's: its own cosine, scaled as recall.speakers scales a chunk not theirs
    other = _chunk("C", "Cat: I swim every Sunday.", 0, 0.9).memory
    assert turn_score(other, asked, query, line_vectors) == pytest.approx(1.0 - SPEAKER_WEIGHT)


def test_the_gate_runs_it_with_the_options_weight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert GateOptions().asked_turns == ASKED_TURNS_WEIGHT
    seen: list[float] = []

    def spy(
        pool: Sequence[Candidate], message: str, weight: float, *args: object
    ) -> list[Candidate]:
        seen.append(weight)
        return list(pool)

    monkeypatch.setattr(pool_rules, "with_asked_turns", spy)
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=_Axes())
    turns = [Turn("Mel", "I went swimming.", "D1:1", NOW), Turn("Cat", "Nice!", "D1:2", NOW)]
    engine.ingest_conversation(turns, "u", "s1", now=NOW)
    options = engine.options.update(asked_turns=0.25)
    engine.explain(ASK, "u", token_budget=500, options=options, now=NOW)
    assert seen == [0.25]
