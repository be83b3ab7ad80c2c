"""The order selection fills a budget in (issue 12): the score decides what passes, and when
the budget cannot hold everything that passes, the most relevant passing memory goes first
(``recall.select.fill_order``); a stale context's relevance is the one its score saw
(``recall.score.present_relevance``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Kind, Memory, MemoryType
from engrain.recall import score as sc
from engrain.recall.classify import Intent
from engrain.recall.select import Ranked, fill_order, select_gated

from .conftest import NOW
from .test_gate_rules import _engine


def _memory(mid: str, kind: Kind, *, pinned: bool = False) -> Memory:
    return Memory(id=mid, user_id="u", content=mid, memory_type=kind.default_memory_type,
                  kind=kind, created_at=NOW, updated_at=NOW, pinned=pinned)  # fmt: skip


#: A simple question's candidates, as sensor's "what's the SCD41's I2C bus on rev B?" had
#: them: three invariants that share a word or two with it (relevance 0.32-0.41) score over
#: the correction that answers it (0.66) on their boost, undecayed recency and use.
TOKENS = {"inv-a": 70, "inv-b": 83, "inv-c": 73, "answer": 130}
RANKED = [
    Ranked(_memory("inv-a", Kind.INVARIANT), 0.628, 0.32, 0.41),
    Ranked(_memory("inv-b", Kind.INVARIANT), 0.611, 0.38, 0.39),
    Ranked(_memory("inv-c", Kind.INVARIANT), 0.536, 0.29, 0.32),
    Ranked(_memory("answer", Kind.CORRECTION), 0.529, 0.53, 0.66),
]


def _select(budget: int, *, thresholds: bool = True) -> list[str]:
    selected, _, _ = select_gated(
        RANKED, line_tokens=lambda m: TOKENS[m.id], token_budget=budget,
        intent=Intent.QUESTION, apply_threshold=thresholds,
    )  # fmt: skip
    return [s.memory.id for s in selected]


def test_when_the_budget_cannot_hold_every_passing_memory_the_most_relevant_goes_first() -> None:
    assert all(r.score >= 0.35 for r in RANKED)  # every one passes its threshold
    chosen = _select(300)
    assert chosen[0] == "answer" and "answer" in chosen
    assert chosen == ["answer", "inv-a", "inv-b"]  # then by relevance while they fit


def test_a_budget_that_holds_every_passing_memory_selects_the_same_whatever_the_order() -> None:
    assert set(_select(1_000)) == set(TOKENS)
    assert set(_select(1_000, thresholds=False)) == set(TOKENS)


def test_an_explicit_budget_without_thresholds_keeps_the_score_order() -> None:
    # the caller's own budget (recall, LoCoMo's fixed budgets) is filled in score order
    assert _select(300, thresholds=False) == ["inv-a", "inv-b", "inv-c"]


def test_fill_order_puts_pins_first_each_group_most_relevant_first() -> None:
    pins = [Ranked(_memory("p1", Kind.FACT, pinned=True), 0.9, 0.3, 0.3),
            Ranked(_memory("p2", Kind.FACT, pinned=True), 0.5, 0.6, 0.7)]  # fmt: skip
    order = [r.memory.id for r in fill_order(pins, RANKED, by_relevance=True)]
    assert order == ["p2", "p1", "answer", "inv-a", "inv-b", "inv-c"]
    kept = [r.memory.id for r in fill_order(pins, RANKED, by_relevance=False)]
    assert kept == ["p1", "p2", "inv-a", "inv-b", "inv-c", "answer"]


def test_equal_relevance_keeps_the_score_order() -> None:
    tied = [Ranked(_memory("high", Kind.INVARIANT), 0.7, 0.4, 0.5),
            Ranked(_memory("low", Kind.FACT), 0.4, 0.4, 0.5)]  # fmt: skip
    assert [r.memory.id for r in fill_order([], tied, by_relevance=True)] == ["high", "low"]


def test_relevance_equal_to_six_places_keeps_the_score_order() -> None:
    # a store and its exported copy: the same vectors at other rows of the matrix give a
    # cosine that differs in the seventh digit (roundtrip.py, session 25)
    noisy = [Ranked(_memory("newer", Kind.FACT), 0.71723662, 0.5, 0.99999995),
             Ranked(_memory("older", Kind.FACT), 0.71722917, 0.5, 1.0)]  # fmt: skip
    assert [r.memory.id for r in fill_order([], noisy, by_relevance=True)] == ["newer", "older"]
    apart = [Ranked(_memory("newer", Kind.FACT), 0.71723662, 0.5, 0.999998),
             Ranked(_memory("older", Kind.FACT), 0.71722917, 0.5, 1.0)]  # fmt: skip
    assert [r.memory.id for r in fill_order([], apart, by_relevance=True)] == ["older", "newer"]


def test_present_relevance_scales_only_kinds_about_the_present() -> None:
    def mem(kind: Kind, days: int) -> Memory:
        when = NOW - timedelta(days=days)
        return Memory(id="m", user_id="u", content="x", memory_type=MemoryType.WORKING,
                      kind=kind, created_at=when, updated_at=when)  # fmt: skip

    assert sc.present_relevance(mem(Kind.CONTEXT, 0), 0.8, NOW) == pytest.approx(0.8)
    assert sc.present_relevance(mem(Kind.CONTEXT, 90), 0.8, NOW) == pytest.approx(0.4)
    assert sc.present_relevance(mem(Kind.FACT, 900), 0.8, NOW) == pytest.approx(0.8)


STATUS_MSG = "Where are we with the database migration?"
STALE_STATUS = "We are halfway through moving the database off Heroku"
FRESH_STATUS = "We are halfway through moving the database to the new cluster"


def test_a_stale_pinned_context_does_not_lead_as_a_relevant_pin(tmp_path: Path) -> None:
    engine = _engine(tmp_path, [STATUS_MSG], {STALE_STATUS: 0.6, FRESH_STATUS: 0.6})
    stale = engine.remember(STALE_STATUS, "ada", "context", pinned=True,
                            now=NOW - timedelta(days=365)).memory_id  # fmt: skip
    fresh = engine.remember(FRESH_STATUS, "ada", "context", pinned=True,
                            now=NOW - timedelta(days=1)).memory_id  # fmt: skip
    gated = engine.explain(STATUS_MSG, "ada", now=NOW)
    verdict = {d.item.memory.id: d for d in gated.decisions}
    assert verdict[fresh or ""].selected and verdict[fresh or ""].reason == "pinned"
    assert verdict[stale or ""].reason != "pinned"  # its relevance is a year's decay of it
    assert gated.components[stale or ""]["calibrated_relevance"] > 0.9  # its wording matches
    assert gated.components[stale or ""]["present_scale"] < 0.1  # explain() shows the scale
    assert gated.components[fresh or ""]["present_scale"] > 0.99
