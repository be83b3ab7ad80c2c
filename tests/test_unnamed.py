"""A transcript question is searched without the speakers' names too (recall.unnamed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.unnamed import UNNAMED_WEIGHT, blended, named_speakers, without_names

from .conftest import NOW


def test_without_names_removes_each_name_and_its_possessive() -> None:
    assert without_names("What activities does Melanie partake in?", ["melanie"]) == (
        "What activities does partake in?"
    )
    assert without_names("What are Melanie's pets' names?", ["melanie"]) == (
        "What are pets' names?"
    )
    assert without_names("Do both James and John have pets?", ["james", "john"]) == (
        "Do both and have pets?"
    )
    assert without_names("Where did James' dogs go?", ["james"]) == "Where did dogs go?"
    # a full name: the whole of it, then its first word alone
    assert without_names("Did Caroline Smith meet Caroline's aunt?", ["caroline smith"]) == (
        "Did meet aunt?"
    )


def test_without_names_keeps_other_words_and_says_when_nothing_changes() -> None:
    assert without_names("Has Johnson met Jo?", ["john"]) is None  # no whole word "John"
    assert without_names("What did Caroline research?", []) is None
    assert without_names("Melanie?", ["melanie"]) is None  # nothing left to search
    assert without_names("What did JOHN buy?", ["john"]) == "What did buy?"


def _chunk(mid: str, content: str) -> Candidate:
    memory = Memory(
        id=mid, user_id="u", content=content, memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT, created_at=NOW, updated_at=NOW,
        provenance=Provenance(turn_ids=(f"{mid}:1",)),
    )  # fmt: skip
    return Candidate(memory, 0.3, 0.0, 0.5)


def test_named_speakers_are_the_pools_speakers_the_question_names() -> None:
    pool = [_chunk("a", "Caroline: I went hiking.\nMelanie: Nice!"),
            _chunk("b", "Melanie: I paint.\nCaroline: Lovely.")]  # fmt: skip
    assert named_speakers(pool, "What does Melanie paint?") == ("melanie",)
    assert named_speakers(pool, "What do Melanie and Caroline like?") == ("caroline", "melanie")
    assert named_speakers(pool, "What does Max eat?") == ()  # named, but no speaker
    fact = Candidate(
        Memory(id="f", user_id="u", content="Max: a dog", memory_type=MemoryType.SEMANTIC,
               kind=Kind.FACT, created_at=NOW, updated_at=NOW),
        0.3, 0.0, 0.9,
    )  # fmt: skip
    assert named_speakers([fact], "What does Max eat?") == ()  # not a conversation chunk


def test_blended_orders_memories_as_the_blend_of_the_two_cosines() -> None:
    rng = np.random.default_rng(7)
    unit = lambda v: (v / np.linalg.norm(v)).astype(np.float32)  # noqa: E731
    a, b = unit(rng.normal(size=16)), unit(rng.normal(size=16))
    memories = np.stack([unit(rng.normal(size=16)) for _ in range(50)])
    for weight in (0.25, 0.5, 1.0):
        vector = blended(a, b, weight)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)
        mixed = (1 - weight) * (memories @ a) + weight * (memories @ b)
        assert list(np.argsort(-(memories @ vector))) == list(np.argsort(-mixed))
    assert np.allclose(blended(a, b, 0.0), a, atol=1e-6)
    assert GateOptions().unnamed == UNNAMED_WEIGHT == 0.5


def _searches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, question: str,
              *, conversation: bool = True, **options: Any) -> list[Any]:  # fmt: skip
    """The vectors of every nearest-neighbour search an ``explain`` at 5,000 tokens makes
    for the pool (the learnings' search left out), with the embedder used."""
    from engrain import Engine, Settings, Turn
    from engrain.embed import HashEmbedder
    from engrain.recall import pool

    vectors: list[Any] = []
    original = pool.nearest

    def spy(store: Any, user_id: str, vector: Any, searches: Any, begin: Any = None) -> Any:
        vectors.append(np.array(vector))
        return original(store, user_id, vector, searches, begin)

    monkeypatch.setattr(pool, "nearest", spy)
    embedder = HashEmbedder()
    engine = Engine(settings=Settings(data_dir=tmp_path), embedder=embedder)
    if conversation:
        turns = [Turn("Caroline", "Hey Melanie! I went swimming with the kids.", "D1:1", NOW),
                 Turn("Melanie", "Fun! I signed up for a pottery class.", "D1:2", NOW)]  # fmt: skip
        engine.ingest_conversation(turns, "u", "session_1", now=NOW)
    else:
        engine.remember("Melanie signed up for a pottery class", "u", kind="fact")
    engine.explain(question, "u", token_budget=5000, options=engine.options.update(**options),
                   now=NOW)  # fmt: skip
    engine.close()
    return [vectors, embedder]


def test_a_transcript_question_naming_a_speaker_is_searched_again_without_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "What activities does Melanie partake in?"
    vectors, embedder = _searches(tmp_path, monkeypatch, question)
    full, stripped = embedder.embed([question, "What activities does partake in?"])
    assert len(vectors) == 2
    assert np.allclose(vectors[0], full, atol=1e-6)
    assert np.allclose(vectors[1], blended(np.asarray(full), np.asarray(stripped)), atol=1e-6)


def test_no_second_search_without_a_named_speaker_a_transcript_or_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def count(path: str, question: str, **kwargs: Any) -> int:
        return len(_searches(tmp_path / path, monkeypatch, question, **kwargs)[0])

    assert count("a", "What activities does anyone partake in?") == 1
    assert count("b", "What activities does Melanie partake in?", conversation=False) == 1
    assert count("c", "What activities does Melanie partake in?", unnamed=0.0) == 1
