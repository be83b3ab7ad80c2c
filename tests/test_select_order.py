"""What selection lets pass and the order it fills a budget in (issue 12): the score decides
what passes, and when the budget cannot hold everything that passes, the most relevant
passing memory goes first (``recall.select.fill_order``); a stale context's relevance is the
one its score saw (``recall.score.present_relevance``); a typed learning needs the relevance
a preference needs unless it is an invariant of the request's area
(``recall.select.LEARNING_MIN_RELEVANCE``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory, MemoryType
from engrain.recall import score as sc
from engrain.recall.classify import Intent
from engrain.recall.gate import LEARNING_KINDS, area_invariants
from engrain.recall.select import (
    FLOORED_KINDS,
    LEARNING_MIN_RELEVANCE,
    PROCEDURAL_MIN_RELEVANCE,
    Ranked,
    fill_order,
    select_gated,
    threshold_for,
)

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


# -- a typed learning needs the relevance a preference needs ----------------------------------

RETRY_MSG = "Write a helper that retries the invoice export three times"
INVOICE_FACT = "Invoice exports are written to the exports bucket, one file per account"
UNRELATED_RULE = "Never run a schema migration from a notebook"
FAINT_RULE = "Never retry a request that already charged the customer"
AREA_RULE = "Every file written to a bucket carries the account id in its key"


def _rules_engine(tmp_path: Path) -> tuple[Engine, dict[str, str]]:
    engine = _engine(tmp_path, [RETRY_MSG, "What is in the exports bucket?"], {
        INVOICE_FACT: 0.6, UNRELATED_RULE: 0.02, FAINT_RULE: 0.15, AREA_RULE: 0.02,
    })  # fmt: skip
    when = NOW - timedelta(days=300)
    ids = {
        "fact": engine.remember(INVOICE_FACT, "ada", "fact", domains=["exports"],
                                now=when).memory_id or "",
        "unrelated": engine.remember(UNRELATED_RULE, "ada", "invariant", domains=["database"],
                                     access_count=60, now=when).memory_id or "",
        "faint": engine.remember(FAINT_RULE, "ada", "invariant", domains=["payments"],
                                 access_count=60, now=when).memory_id or "",
        "area": engine.remember(AREA_RULE, "ada", "invariant", domains=["exports"],
                                access_count=60, now=when).memory_id or "",
    }  # fmt: skip
    return engine, ids


def test_an_invariant_unrelated_to_the_message_does_not_pass_on_its_priors(
    tmp_path: Path,
) -> None:
    engine, ids = _rules_engine(tmp_path)
    gated = engine.explain("What is in the exports bucket?", "ada", now=NOW)
    verdict = {d.item.memory.id: d for d in gated.decisions}
    limit = threshold_for(Kind.INVARIANT, gated.classification.intent)
    for name in ("unrelated", "faint"):
        decision = verdict[ids[name]]
        # undecayed and much used, it clears its threshold at relevance ~0 ...
        assert decision.item.score >= limit
        # ... but nothing about it concerns the message
        assert not decision.selected
        assert decision.reason.endswith(f"below {LEARNING_MIN_RELEVANCE:.2f}")
        assert "relevance" in decision.reason
    assert verdict[ids["fact"]].selected


def test_an_invariant_of_the_area_a_request_changes_passes_whatever_its_words(
    tmp_path: Path,
) -> None:
    engine, ids = _rules_engine(tmp_path)
    gated = engine.explain(RETRY_MSG, "ada", now=NOW)
    assert "area: exports" in gated.classification.signals
    verdict = {d.item.memory.id: d for d in gated.decisions}
    assert gated.components[ids["area"]]["calibrated_relevance"] < LEARNING_MIN_RELEVANCE
    assert verdict[ids["area"]].selected
    assert verdict[ids["area"]].reason == "selected, an invariant of the request's area"
    assert not verdict[ids["unrelated"]].selected  # a rule of another part of the project


def test_an_explicit_budget_has_no_relevance_floor(tmp_path: Path) -> None:
    # the caller's own budget is filled in score order without thresholds (the spec's recall)
    engine, ids = _rules_engine(tmp_path)
    gated = engine.explain("What is in the exports bucket?", "ada", token_budget=2_000, now=NOW)
    assert {ids["unrelated"], ids["faint"]} <= {m.id for m in gated.memories}


def test_the_floored_kinds_are_the_typed_learnings_but_preferences() -> None:
    # preferences have the same floor in their own test (PROCEDURAL_MIN_RELEVANCE)
    assert FLOORED_KINDS | {Kind.PREFERENCE} == set(LEARNING_KINDS)
    assert Kind.PREFERENCE not in FLOORED_KINDS
    assert LEARNING_MIN_RELEVANCE == PROCEDURAL_MIN_RELEVANCE


def test_area_invariants_are_the_invariants_with_a_domain_of_the_area() -> None:
    def ranked(mid: str, kind: Kind, *domains: str) -> Ranked:
        memory = Memory(id=mid, user_id="u", content=mid, memory_type=MemoryType.SEMANTIC,
                        kind=kind, created_at=NOW, updated_at=NOW, domains=domains)  # fmt: skip
        return Ranked(memory, 0.3, 0.0, 0.0)

    pool = [ranked("in", Kind.INVARIANT, "exports", "api"), ranked("out", Kind.INVARIANT, "db"),
            ranked("pattern", Kind.PATTERN, "exports")]  # fmt: skip
    assert area_invariants(pool, ("exports",)) == {"in"}
    assert area_invariants(pool, ()) == frozenset()
