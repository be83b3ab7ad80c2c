"""A note about the present current until the end it states (``GateOptions.stated_span``;
``recall/spans.py``; docs/decisions.md, "Session 23 … (h7)"): the end each phrase shape
states, resolved against the time the note was written, value by value; the present scale it
gives; the score's factors; and end to end, a note "until" a date ahead injected and one that
"ended" on a date past not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.score import note_span, present_relevance, present_scale, score_gated
from engrain.recall.spans import Span, span_scale, stated_end
from engrain.store import MemoryStore

from .conftest import NOW, make_settings
from .test_gate_rules import PlannedEmbedder  # messages along axis 0, planned cosines


def _at(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "written", "end"),
    [
        # an end word before a day, a month or a bare month
        (
            "Code freeze for 0.12 until 30 September 2025: only fixes merge.",
            "2025-08-25",
            "2025-10-01",
        ),
        (
            "Maya is on parental leave from 2025-12-01 to the end of March 2026. Until then Jonas "
            "is release manager.",
            "2025-11-24",
            "2026-04-01",
        ),
        ("Mirela is on parental leave from 2026-01-05 to 2026-04-30.", "2026-01-05", "2026-05-01"),
        (
            "Preparing release 1.9.0 for 2026-01-28: SCD41 self-calibration off.",
            "2026-01-07",
            "2026-01-29",
        ),
        ("Go-live planned February 23, 2026 for Northgate.", "2026-01-05", "2026-02-24"),
        ("Working on 2.5, targeted for mid-February 2026.", "2026-01-06", "2026-03-01"),
        ("The GA4 load is switched off at the end of March 2026.", "2025-12-08", "2026-04-01"),
        ("The code freeze for the LRH interface ended 2025-12-20.", "2025-12-01", "2025-12-21"),
        # a month without a year: its next occurrence from the month written (year rollover)
        ("The session events still go through Kafka until February.", "2025-12-01", "2026-03-01"),
        ("The session events still go through Kafka until February.", "2026-02-10", "2026-03-01"),
        ("The session events still go through Kafka until February.", "2026-03-05", "2027-03-01"),
        (
            "TFT training is paused until the new GPU quota arrives in February.",
            "2025-12-21",
            "2026-03-01",
        ),
        # a range's second date
        (
            "Change freeze at all sites during LRH's Epic upgrade, October 1-15, 2024.",
            "2024-09-23",
            "2024-10-16",
        ),
        (
            "January-February 2026 pricing experiment: 20% see the yearly plan at $29.99.",
            "2025-12-29",
            "2026-03-01",
        ),
        (
            "Current focus (Dec 2025 - Feb 2026): 0.15 stops serving v1alpha1.",
            "2025-12-01",
            "2026-03-01",
        ),
        # "until then": the date before it; "the week of": a week from it
        (
            "Rev B boards arrive the week of 16 June 2025; until then the rack runs rev A.",
            "2025-06-02",
            "2025-06-23",
        ),
        # a period named: a quarter, a month in parentheses, this / next week, month, quarter
        (
            "The platform team moves all EKS clusters to Karpenter in Q1 2026.",
            "2026-01-05",
            "2026-04-01",
        ),
        ("The Q4 goal is WAPE below 20.", "2025-11-10", "2026-01-01"),
        ("The Q1 goal is WAPE below 20.", "2025-11-10", "2026-04-01"),
        (
            "This sprint (January 2026) I am moving the dunning emails to Celery beat.",
            "2026-01-03",
            "2026-02-01",
        ),
        (
            "In progress (Rosa, January 2026): moving the singular tests.",
            "2026-01-06",
            "2026-02-01",
        ),
        ("We are migrating off W&B this month.", "2025-09-07", "2025-10-01"),
        ("We are migrating off W&B this month.", "2025-12-20", "2026-01-01"),
        ("Deploys pause this week.", "2026-01-15", "2026-01-19"),  # a Thursday: Monday next
        ("The on-call swap happens next week.", "2026-01-15", "2026-01-26"),
        ("Budget reviews this quarter.", "2025-11-10", "2026-01-01"),
        ("Budget reviews next quarter.", "2025-11-10", "2026-04-01"),
        # several ends: the latest
        (
            "Season 5 launches 2026-02-10 with client 1.10.0; content lock is 2026-01-27 and the "
            "submissions are due 2026-01-20.",
            "2026-01-05",
            "2026-02-11",
        ),
    ],
)
def test_the_end_a_note_states(text: str, written: str, end: str) -> None:
    span = stated_end(text, _at(written))
    assert span is not None
    assert span.end == _at(end)


@pytest.mark.parametrize(
    "text",
    [
        "Redshift was switched off in September 2024; distkey configs are leftovers.",  # event
        "Pilot: 40 rev-B sensors in the Wroclaw office since November 2025.",  # a start
        "Maya is on parental leave from 2025-12-01.",  # a start only
        "Incident 2025-11-03: a failover promoted a replica 180 MB behind.",  # an event
        "Apple rejected build 3.1.0 on 2026-01-08 under guideline 3.1.2.",  # an event
        "This sprint I am moving the dunning emails to Celery beat.",  # a sprint's length
        "Polling every 500 ms stays until it is merged.",  # no date
        "The serve test is flaky on windows-2022 only.",  # a name, not a year
        "We may ship the fix by Friday.",  # "may" a word; weekdays are not read
        "Decisions are reviewed in march order.",  # a lower-case month alone is a word
    ],
)
def test_no_end_is_read_where_none_is_stated(text: str) -> None:
    assert stated_end(text, _at("2026-01-05")) is None


def test_the_phrase_that_stated_it() -> None:
    text = "TFT training is paused until the new GPU quota arrives in February."
    span = stated_end(text, _at("2025-12-21"))
    assert span == Span(_at("2026-03-01"), "until the new GPU quota arrives in February")


@pytest.mark.parametrize(
    ("end", "written", "scale"),
    [
        ("2026-04-01", 0.2, 1.0),  # ahead: current, however old the note
        ("2026-01-15T12:00", 0.9, 0.9),  # the end itself: no days past, the written scale
        ("2026-01-01T12:00", 0.9, 0.5),  # 14 days past: the context's half-life
        ("2026-01-01T12:00", 0.3, 0.3),  # never above the written scale
        ("2025-10-01T12:00", 0.9, 0.5 ** (106 / 14)),
    ],
)
def test_the_present_scale_from_a_stated_end(end: str, written: float, scale: float) -> None:
    span = Span(_at(end), "until …")
    assert span_scale(span, NOW, written, 14.0) == pytest.approx(scale)


def test_without_a_span_the_written_scale() -> None:
    assert span_scale(None, NOW, 0.42, 14.0) == 0.42


def _memory(kind: Kind, content: str, written_days: float, used_days: float | None = None
            ) -> Memory:  # fmt: skip
    written = NOW - timedelta(days=written_days)
    return Memory(
        id="m", user_id="u", content=content, memory_type=kind.default_memory_type,
        kind=kind, created_at=written, updated_at=written, access_count=5,
        last_accessed_at=None if used_days is None else NOW - timedelta(days=used_days),
    )  # fmt: skip


LEAVE = "Maya is on parental leave to the end of March 2026; Jonas releases until then."
FREEZE = "Code freeze for 0.12 until 30 September 2025: only fixes merge."


def test_the_span_is_read_only_for_notes_about_the_present_and_with_the_option() -> None:
    assert note_span(_memory(Kind.CONTEXT, LEAVE, 52), True) is not None
    assert note_span(_memory(Kind.CONTEXT, LEAVE, 52), False) is None
    assert note_span(_memory(Kind.FACT, LEAVE, 52), True) is None
    assert present_scale(Kind.FACT, 52.0, None, Span(_at("2025-01-01"), "x"), NOW) == 1.0


def _classification() -> Classification:
    return Classification(complexity=Complexity.SIMPLE, intent=Intent.QUESTION, domains=(),
                          turn=0, has_code=False, references_history=False, signals=())  # fmt: skip


WEIGHTS = {"semantic": 0.55, "recency": 0.10, "domain": 0.25, "usage": 0.10}


def test_the_score_of_a_note_current_until_its_end() -> None:
    note = _memory(Kind.CONTEXT, LEAVE, 52)
    off = score_gated(note, 0.4, _classification(), WEIGHTS, NOW)
    on = score_gated(note, 0.4, _classification(), WEIGHTS, NOW, stated_span=True)
    assert off.factors["present_scale"] == pytest.approx(0.5 ** (52 / 90))
    assert "span_end_days" not in off.factors
    assert on.factors["present_scale"] == 1.0
    assert on.factors["span_end_days"] == pytest.approx(75.5)  # to April 1, 00:00
    assert on.components["semantic"] == pytest.approx(0.55 * 0.4)
    assert on.components["recency"] == off.components["recency"]  # the written recency
    assert on.total > off.total
    assert present_relevance(note, 0.4, NOW, by_span=True) == pytest.approx(0.4)


def test_the_score_of_a_note_past_its_end_even_if_used_lately() -> None:
    note = _memory(Kind.CONTEXT, FREEZE, 20, used_days=1)  # a freeze ended 106.5 days ago
    stale = 0.5 ** (106.5 / 14)
    on = score_gated(note, 0.8, _classification(), WEIGHTS, NOW, stated_span=True)
    both = score_gated(note, 0.8, _classification(), WEIGHTS, NOW, stated_span=True,
                       present_use=True)  # fmt: skip
    assert on.factors["present_scale"] == pytest.approx(stale)
    assert on.factors["span_end_days"] == pytest.approx(-106.5)
    assert both.factors["present_scale"] == pytest.approx(stale)  # a use does not revive it
    assert present_relevance(note, 0.8, NOW, by_use=True, by_span=True) == pytest.approx(
        0.8 * stale
    )


# -- end to end: a note "until" a date ahead injected, one that "ended" not --------------------

MESSAGE = "Who pushes the release tags for the LRH interface deploy?"
CURRENT = "Until 2026-03-31 Jonas pushes the LRH interface release tags while Maya is away."
ENDED = "The code freeze for the LRH interface deploy ended 2025-12-20; Kenji pushes tags."


def _project(tmp_path: Path) -> Engine:
    embedder = PlannedEmbedder([MESSAGE], {CURRENT: 0.7, ENDED: 0.7})
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=embedder)
    rows = {"current": (CURRENT, 200), "ended": (ENDED, 40)}
    records = []
    for name, (text, days) in rows.items():
        written = (NOW - timedelta(days=days)).isoformat()
        records.append({"type": "memory", "id": name, "user_id": "ada", "content": text,
                        "kind": "context", "memory_type": Kind.CONTEXT.default_memory_type.value,
                        "created_at": written, "updated_at": written, "access_count": 3,
                        "domains": ["deployment"]})  # fmt: skip
    engine.import_records(records, now=NOW)
    return engine


def test_a_note_until_a_date_ahead_is_injected_and_one_that_ended_is_not(tmp_path: Path) -> None:
    engine = _project(tmp_path)
    options = GateOptions(stated_span=True)
    gated = engine.explain(MESSAGE, "ada", options=options, now=NOW)
    chosen = {m.id for m in gated.memories}
    assert "current" in chosen  # 200 days old, but its leave runs to March 31
    assert "ended" not in chosen  # 40 days old, its freeze over 26 days ago
    assert gated.components["current"]["present_scale"] == 1.0
    assert gated.components["current"]["span_end_days"] == pytest.approx(75.5)
    assert gated.components["ended"]["span_end_days"] == pytest.approx(-25.5)
    got = engine.context(MESSAGE, "ada", options=options, now=NOW)
    assert [m.id for m in got.memories] == [m.id for m in gated.memories]


def test_without_the_option_age_alone_decides(tmp_path: Path) -> None:
    engine = _project(tmp_path)
    gated = engine.explain(MESSAGE, "ada", options=GateOptions(stated_span=False), now=NOW)
    chosen = {m.id for m in gated.memories}
    assert "current" not in chosen  # 200 days: scale 0.21
    assert "ended" in chosen  # 40 days: scale 0.73
    assert "span_end_days" not in gated.components["current"]
