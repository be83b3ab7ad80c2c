"""A pool led by a conversation chunk is gathered as deep whatever the budget (chunk_rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.chunk_rank import CHUNK_POOL, deep_enough, transcript_led
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate

from .conftest import NOW


def _candidate(mid: str, relevance: float, *, turns: bool) -> Candidate:
    memory = Memory(
        id=mid, user_id="u", content=f"text {mid}", memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT if turns else Kind.FACT, created_at=NOW, updated_at=NOW,
        provenance=Provenance(turn_ids=(f"{mid}:1",) if turns else ()),
    )  # fmt: skip
    return Candidate(memory, 0.3, 0.0, relevance)


def test_a_pool_is_transcript_led_when_its_most_relevant_candidate_is_a_chunk() -> None:
    chunk, fact = _candidate("c", 0.9, turns=True), _candidate("f", 0.5, turns=False)
    assert transcript_led([fact, chunk])
    assert not transcript_led([_candidate("c", 0.4, turns=True), fact])
    assert not transcript_led([])


def test_only_a_shallow_transcript_led_pool_is_not_deep_enough() -> None:
    led = [_candidate("c", 0.9, turns=True), _candidate("f", 0.5, turns=False)]
    learned = [_candidate("f", 0.9, turns=False), _candidate("c", 0.5, turns=True)]
    assert not deep_enough(led, 50)
    assert deep_enough(led, CHUNK_POOL)  # already as deep
    assert deep_enough(led, 50, depth=0)  # the option off
    assert deep_enough(learned, 50)  # a learning leads: the budget's depth
    assert GateOptions().chunk_pool == CHUNK_POOL == 125


def _depths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, conversation: bool,
            options: dict[str, Any] | None = None, budget: int = 500) -> list[int]:  # fmt: skip
    """The ``pool=`` depth of each ``gather`` an ``explain`` makes."""
    from engrain import Engine, Settings, Turn
    from engrain.embed import HashEmbedder
    from engrain.recall import pool
    from engrain.recall.relevance import gather as original

    depths: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> list[Candidate]:
        depths.append(int(kwargs["pool"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(pool, "gather", spy)
    engine = Engine(settings=Settings(data_dir=tmp_path), embedder=HashEmbedder())
    if conversation:
        turns = [Turn("Caroline", "I adopted a dog named Max last week.", "D1:1", NOW),
                 Turn("Melanie", "That is wonderful, what breed is Max?", "D1:2", NOW)]  # fmt: skip
        engine.ingest_conversation(turns, "u", "session_1", now=NOW)
    else:
        engine.remember("Caroline's dog is called Max", "u", kind="fact")
    opts = engine.options.update(**(options or {}))
    engine.explain("What is Caroline's dog called?", "u", token_budget=budget, options=opts,
                   now=NOW)  # fmt: skip
    engine.close()
    return depths


def test_gate_gathers_a_transcript_question_again_deeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _depths(tmp_path, monkeypatch, conversation=True) == [50, CHUNK_POOL]


def test_gate_keeps_the_budgets_depth_without_a_transcript_or_with_the_option_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _depths(tmp_path / "a", monkeypatch, conversation=False) == [50]
    # the question names a speaker: without recall.unnamed (tests/test_unnamed.py), which
    # searches such a pool again at the same depth
    off = {"chunk_pool": 0, "unnamed": 0.0}
    assert _depths(tmp_path / "b", monkeypatch, conversation=True, options=off) == [50]
    assert _depths(tmp_path / "c", monkeypatch, conversation=True, budget=8000,
                   options={"unnamed": 0.0}) == [200]  # fmt: skip
    assert _depths(tmp_path / "d", monkeypatch, conversation=True, budget=8000) == [200, 200]
