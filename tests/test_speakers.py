"""Who is asked about: a question naming a speaker favours the chunks that speaker wrote."""

from __future__ import annotations

import pytest

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.relevance import Candidate
from engrain.recall.speakers import named, speaker_shares, with_speakers

from .conftest import NOW, score_of_turn


def _candidate(mid: str, content: str, relevance: float, turns: bool = True) -> Candidate:
    memory = Memory(
        id=mid, user_id="u", content=content, memory_type=MemoryType.EPISODIC, kind=Kind.EVENT,
        created_at=NOW, updated_at=NOW,
        provenance=Provenance(turn_ids=(f"{mid}:1",) if turns else ()),
    )  # fmt: skip
    return Candidate(memory, relevance, 0.0, relevance)


def test_shares_are_the_text_each_speaker_wrote() -> None:
    shares = dict(speaker_shares("Caroline: abcdefgh\nMelanie: ab"))
    assert shares == pytest.approx({"caroline": 0.8, "melanie": 0.2})
    assert speaker_shares("no speaker lines here") == ()


def test_a_name_counts_as_a_word_or_whole() -> None:
    assert named("What did Caroline's mentor say?", "caroline")
    assert named("when did joanna ayers move", "joanna ayers")
    assert not named("What did Carolina say?", "caroline")


def test_the_named_speakers_chunks_rise_and_others_fall() -> None:
    pool = [
        _candidate("other", "Melanie: I went camping at the beach.\nCaroline: Cool!", 1.0),
        _candidate("own", "Caroline: I researched adoption agencies last week.", 0.9),
        _candidate("text", "a note without speakers", 0.8, turns=False),
    ]  # fmt: skip
    out = with_speakers(pool, "What did Caroline research?", 0.3)
    assert [c.id for c in out] == ["own", "text", "other"]
    assert out[0].relevance == pytest.approx(0.9)
    assert out[1].relevance == pytest.approx(0.8)
    assert 0.7 < out[2].relevance < 0.75  # 1.0 × (0.7 + 0.3 × share of "Cool!")


def test_nothing_changes_without_a_single_named_speaker_or_weight() -> None:
    pool = [
        _candidate("a", "Melanie: I went camping.\nCaroline: Cool!", 1.0),
        _candidate("b", "Caroline: I researched adoption agencies.", 0.9),
    ]
    for message, weight in (("What did they research?", 0.3),
                            ("What did Caroline and Melanie do?", 0.3),
                            ("What did Caroline research?", 0.0)):  # fmt: skip
        out = with_speakers(pool, message, weight)
        assert [(c.id, c.relevance) for c in out] == [("a", 1.0), ("b", 0.9)]


def test_the_gate_applies_the_signal_and_the_option_turns_it_off(mem_engine: Engine) -> None:
    turns = [
        Turn("Caroline", "I joined a pottery class and made a blue bowl.", "D1:1", NOW),
        Turn("Melanie", "My pottery class made a huge clay bowl for the school fair.", "D2:1", NOW),
    ]
    mem_engine.ingest_conversation(turns[:1], "u", "s1", now=NOW)
    mem_engine.ingest_conversation(turns[1:], "u", "s2", now=NOW)
    options = mem_engine.options
    question = "What bowl did Melanie make in pottery class?"
    on = mem_engine.explain(question, "u", token_budget=500, options=options, now=NOW)
    off = mem_engine.explain(question, "u", token_budget=500, now=NOW,
                             options=options.update(speaker_weight=0.0))  # fmt: skip

    assert score_of_turn(on, "D1:1") < score_of_turn(off, "D1:1")
    assert score_of_turn(on, "D2:1") == pytest.approx(score_of_turn(off, "D2:1"))
