"""When: a question naming a time favours the chunks of that time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.relevance import Candidate
from engrain.recall.when import Window, windows, with_time

from .conftest import score_of_turn

NOW = datetime(2023, 10, 20, 12, 0, tzinfo=UTC)


def _day(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What did Gina find on 1 February, 2023?", [(_day(2023, 1, 31), _day(2023, 2, 2))]),
        ("What did she show on October 13, 2023?", [(_day(2023, 10, 12), _day(2023, 10, 14))]),
        ("What did Mel paint in July 2023?", [(_day(2023, 7, 1), _day(2023, 8, 1))]),
        ("What did she do in December, 2022?", [(_day(2022, 12, 1), _day(2023, 1, 1))]),
        ("When did Melanie go camping in June?", [(_day(2023, 6, 1), _day(2023, 7, 1))]),
        ("What happened in November?", [(_day(2022, 11, 1), _day(2022, 12, 1))]),
        ("How often did she swim in 2022?", [(_day(2022, 1, 1), _day(2023, 1, 1))]),
        ("Where did John go last year?", []),
        ("What is her cat called?", []),
        ("What may she do?", []),
    ],
)
def test_time_expressions_resolve_to_windows(
    question: str, expected: list[tuple[datetime, datetime]]
) -> None:
    assert [(w.start, w.end) for w in windows(question, NOW)] == expected


def test_a_window_holds_what_is_told_shortly_after_it() -> None:
    june = Window(_day(2023, 6, 1), _day(2023, 7, 1))
    assert june.holds(_day(2023, 6, 15))
    assert june.holds(_day(2023, 7, 10))  # "last week we went camping"
    assert not june.holds(_day(2023, 7, 20))
    assert not june.holds(_day(2023, 5, 31))


def _candidate(mid: str, at: datetime | None, relevance: float, turns: bool = True) -> Candidate:
    memory = Memory(
        id=mid, user_id="u", content=f"{mid}: text", memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT, created_at=NOW, updated_at=NOW, event_at=at,
        provenance=Provenance(turn_ids=(f"{mid}:1",) if turns else ()),
    )  # fmt: skip
    return Candidate(memory, relevance, 0.0, relevance)


def test_chunks_of_the_asked_time_keep_their_relevance_and_others_lose_some() -> None:
    pool = [
        _candidate("may", _day(2023, 5, 10), 1.0),
        _candidate("july", _day(2023, 7, 5), 0.9),
        _candidate("undated", None, 0.85),
        _candidate("note", _day(2023, 1, 1), 0.8, turns=False),
    ]
    out = with_time(pool, "What did Mel paint in July 2023?", NOW, 0.3)
    assert [(c.id, round(c.relevance, 3)) for c in out] == [
        ("july", 0.9),
        ("undated", 0.85),
        ("note", 0.8),
        ("may", 0.7),
    ]
    assert with_time(pool, "What did Mel paint?", NOW, 0.3) == pool
    assert with_time(pool, "What did Mel paint in July 2023?", NOW, 0.0) == pool


def test_the_gate_applies_the_signal_and_the_option_turns_it_off(mem_engine: Engine) -> None:
    may, july = _day(2023, 5, 8), _day(2023, 7, 3)
    mem_engine.ingest_conversation(
        [Turn("Mel", "I painted a lake with the kids.", "D1:1", may)], "u", "s1", now=may
    )
    mem_engine.ingest_conversation(
        [Turn("Mel", "We painted a sunset with the kids.", "D2:1", july)], "u", "s2", now=july
    )
    options = mem_engine.options
    question = "What did Mel paint with the kids in July 2023?"
    on = mem_engine.explain(question, "u", token_budget=500, options=options, now=NOW)
    off = mem_engine.explain(question, "u", token_budget=500, now=NOW,
                             options=options.update(time_weight=0.0))  # fmt: skip

    assert score_of_turn(on, "D1:1") < score_of_turn(off, "D1:1")
    assert score_of_turn(on, "D2:1") == pytest.approx(score_of_turn(off, "D2:1"))


@pytest.mark.parametrize(
    ("message", "now"),
    [("what did we do in march?", datetime(1, 1, 1, tzinfo=UTC)),
     ("in december", datetime(9999, 12, 31, tzinfo=UTC)),
     ("march 0000 or december 9999", datetime(2020, 1, 1, tzinfo=UTC)),
     ("on 31 december, 9999", datetime(2020, 1, 1, tzinfo=UTC)),
     ("in 0000", datetime(2020, 1, 1, tzinfo=UTC))],
)  # fmt: skip
def test_dates_datetime_cannot_hold_name_no_window(message: str, now: datetime) -> None:
    assert windows(message, now) == []


def test_a_window_answers_for_the_first_and_last_datetimes() -> None:
    (window,) = windows("in May 2023", datetime(2024, 1, 1, tzinfo=UTC))
    assert not window.holds(datetime(1, 1, 1, tzinfo=UTC))
    assert not window.holds(datetime(9999, 12, 31, tzinfo=UTC))
