"""Conversation chunks re-ranked by learning-free features (recall.chunk_rank)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engrain.errors import ConfigError
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall import chunk_rank
from engrain.recall.chunk_rank import FEATURES, Weights, features, proper_names, with_chunk_rank
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.store.lexical import tokenize

from .conftest import NOW


def _candidate(
    mid: str, content: str, relevance: float, *, cosine: float = 0.3, lexical: float = 0.0,
    turns: bool = True, session: str | None = None,
) -> Candidate:  # fmt: skip
    memory = Memory(
        id=mid, user_id="u", content=content, memory_type=MemoryType.EPISODIC, kind=Kind.EVENT,
        created_at=NOW, updated_at=NOW, session_id=session,
        provenance=Provenance(turn_ids=(f"{mid}:1",) if turns else ()),
    )  # fmt: skip
    return Candidate(memory, cosine, lexical, relevance)


def _column(rows: object, name: str) -> list[float]:
    return [float(v) for v in rows[:, FEATURES.index(name)]]  # type: ignore[index]


def test_the_order_changes_and_the_relevances_stay() -> None:
    pool = [
        _candidate("a", "Melanie: I went camping.", 0.9, lexical=0.1),
        _candidate("b", "Caroline: I researched adoption agencies.", 0.8, lexical=1.0),
        _candidate("note", "a typed note", 0.85, turns=False),
        _candidate("c", "Melanie: Cool!", 0.5, lexical=0.0),
    ]
    out = with_chunk_rank(pool, "What did Caroline research?", Weights({"lexical_rank": 1.0}))
    assert [c.id for c in out] == ["b", "note", "a", "c"]
    assert [c.relevance for c in out] == [0.9, 0.85, 0.8, 0.5]
    assert out[1] is pool[2]  # not a chunk: untouched


def test_the_relevance_weight_alone_keeps_the_pool() -> None:
    pool = [
        _candidate("a", "Melanie: one", 0.9, lexical=0.1),
        _candidate("b", "Caroline: two", 0.8, lexical=1.0),
    ]
    out = with_chunk_rank(pool, "What did Caroline do?", Weights({"relevance": 1.0}))
    assert [(c.id, c.relevance) for c in out] == [("a", 0.9), ("b", 0.8)]


def test_a_pool_of_learnings_is_unchanged() -> None:
    pool = [
        _candidate("x", "Use pytest fixtures", 0.4, lexical=1.0, turns=False),
        _candidate("y", "Deploy on Fridays never", 0.9, turns=False),
    ]
    out = with_chunk_rank(pool, "how do we deploy?", Weights({"lexical_rank": 5.0}))
    assert out == pool


def test_features_read_terms_names_and_speakers() -> None:
    chunks = [
        _candidate("a", "Caroline: We hiked in Spain last May.\nMelanie: Nice!", 0.9,
                   cosine=0.5, lexical=1.0),
        _candidate("b", "Melanie: My kids painted.\nCaroline: I love painting.", 0.7,
                   cosine=0.4, lexical=0.0),
    ]  # fmt: skip
    rows = features(chunks, "Where in Spain did Caroline hike?")
    assert _column(rows, "entities") == [1.0, 0.0]  # Spain; Caroline is a speaker
    assert _column(rows, "dense_rank") == [1.0, 0.5]
    assert _column(rows, "lexical_rank") == [1.0, 0.0]
    coverage = _column(rows, "coverage")
    assert coverage[0] > coverage[1]
    assert _column(rows, "line_coverage")[0] == pytest.approx(coverage[0])
    speaker = _column(rows, "speaker")
    assert speaker[0] > 0.7 and speaker[1] == pytest.approx(0.5)


def test_proper_names_skip_the_first_word_and_the_speakers() -> None:
    names = proper_names("What did Caroline see in Paris with Jon?", frozenset({"caroline"}))
    assert names == frozenset(tokenize("Paris Jon"))


def test_the_shipped_weights_are_read_and_on_by_default() -> None:
    weights = chunk_rank.shipped_weights()
    assert set(weights.coefficients) <= set(FEATURES)
    assert any(v != 0.0 for v in weights.coefficients.values())
    assert GateOptions().chunk_rank


def test_unreadable_weights_raise_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"coefficients": {"nonsense": 1.0}}))
    monkeypatch.setattr(chunk_rank, "WEIGHTS_FILE", bad)
    chunk_rank.shipped_weights.cache_clear()
    try:
        with pytest.raises(ConfigError):
            chunk_rank.shipped_weights()
    finally:
        chunk_rank.shipped_weights.cache_clear()


def test_session_support_is_the_best_other_chunk_of_the_session() -> None:
    chunks = [
        _candidate("a", "A: x", 0.9, session="s1"),
        _candidate("b", "B: y", 0.4, session="s1"),
        _candidate("c", "A: z", 0.3, session="s1"),
        _candidate("d", "B: w", 0.8, session="s2"),
        _candidate("e", "A: v", 0.7),
    ]
    assert chunk_rank.session_support(chunks) == [0.4, 0.9, 0.9, 0.0, 0.0]


def test_the_shipped_rule_lifts_a_chunk_of_the_best_chunks_session() -> None:
    pool = [
        _candidate("best", "Caroline: I adopted a dog named Max.", 1.0, session="s1"),
        _candidate("other", "Melanie: We painted the fence.", 0.62, session="s2"),
        _candidate("next", "Caroline: Max loves the park.", 0.6, session="s1"),
        _candidate("lone", "Melanie: Nice weather.", 0.3, session="s3"),
    ]
    out = with_chunk_rank(pool, "What is Caroline's dog called?")
    assert [c.id for c in out] == ["best", "next", "other", "lone"]
    assert [c.relevance for c in out] == [1.0, 0.62, 0.6, 0.3]


def test_gate_re_ranks_only_when_the_option_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engrain import Engine, Settings, Turn
    from engrain.embed import HashEmbedder
    from engrain.recall import pool_rules

    calls: list[int] = []

    def spy(pool: list[Candidate], message: str) -> list[Candidate]:
        calls.append(len(pool))
        return list(pool)

    monkeypatch.setattr(pool_rules, "with_chunk_rank", spy)
    engine = Engine(settings=Settings(data_dir=tmp_path), embedder=HashEmbedder())
    turns = [Turn("Caroline", "I adopted a dog named Max last week.", "D1:1", NOW),
             Turn("Melanie", "That is wonderful, what breed is Max?", "D1:2", NOW)]  # fmt: skip
    engine.ingest_conversation(turns, "u", "session_1", now=NOW)
    engine.explain("What is Caroline's dog called?", "u", token_budget=500, now=NOW)
    assert calls
    calls.clear()
    off = engine.options.update(chunk_rank=False)
    engine.explain("What is Caroline's dog called?", "u", token_budget=500, options=off, now=NOW)
    assert not calls
    engine.close()


def test_the_pool_features_alone_read_no_text() -> None:
    chunks = [
        _candidate("a", "Caroline: We hiked in Spain.", 0.9, lexical=1.0, session="s1"),
        _candidate("b", "Melanie: Spain is lovely.", 0.5, session="s1"),
    ]
    full = features(chunks, "Where in Spain did Caroline hike?")
    pool_only = features(chunks, "Where in Spain did Caroline hike?", frozenset({"session"}))
    for name in FEATURES:
        if name in chunk_rank.POOL_FEATURES:
            assert _column(pool_only, name) == _column(full, name)
        else:
            assert _column(pool_only, name) == [0.0, 0.0]
    assert _column(full, "entities") == [1.0, 1.0]
