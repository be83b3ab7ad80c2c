"""Relevance gating through the engine: budgets, thresholds, pins, mutes, formats, explain."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from engrain import Engine
from engrain.recall.assemble import Format
from engrain.recall.budget import Depth
from engrain.recall.gate import GateOptions
from engrain.recall.score import Profile

from .conftest import NOW


def _project(engine: Engine) -> dict[str, str]:
    items = {
        "inv": ("Never log personal data such as emails or card numbers", "invariant"),
        "pat": ("Database access goes through the repository classes in app/repos", "pattern"),
        "dec": ("We chose PostgreSQL over MongoDB for the billing database", "decision"),
        "anti": ("Do not catch bare exceptions in the payment workers", "antipattern"),
        "gold": ("To add an API route: create the handler, add auth middleware, add tests",
                 "golden_path"),
        "fact": ("The staging database runs on port 5433", "fact"),
        "cat": ("Ada's cat Turing sleeps in the server closet", "fact"),
    }  # fmt: skip
    return {
        name: engine.remember(text, "ada", kind, now=NOW - timedelta(days=5)).memory_id or ""
        for name, (text, kind) in items.items()
    }


def test_trivial_messages_skip_memory_entirely(engine: Engine) -> None:
    _project(engine)
    ctx = engine.context("thanks!", "ada", now=NOW)
    assert ctx.text == "" and ctx.gated is not None
    assert ctx.gated.budget.tokens == 0
    assert "embed" not in ctx.gated.timings_ms  # the query was never embedded


def test_automatic_budget_follows_complexity(engine: Engine) -> None:
    _project(engine)
    simple = engine.explain("which port does staging use?", "ada", now=NOW)
    deep = engine.explain("Review the overall architecture of the billing system", "ada", now=NOW)
    assert simple.budget.tokens == 500
    assert deep.budget.tokens == 8_000


def test_thresholds_keep_weak_matches_out(engine: Engine) -> None:
    ids = _project(engine)
    gated = engine.explain("which port does the staging database use?", "ada", now=NOW)
    assert ids["fact"] in {m.id for m in gated.memories}
    verdict = {d.item.memory.id: d for d in gated.decisions}
    assert not verdict[ids["cat"]].selected
    assert "below" in verdict[ids["cat"]].reason


def test_a_relevant_pin_bypasses_the_threshold_and_muted_is_never_scored(
    engine: Engine,
) -> None:
    ids = _project(engine)
    engine.pin(ids["fact"], "ada")
    engine.mute(ids["dec"], "ada")
    strict = GateOptions(depth=Depth.LIGHT)  # +0.10 on every threshold
    gated = engine.explain("which port does the staging database use?", "ada", now=NOW,
                           options=strict)  # fmt: skip
    verdict = {d.item.memory.id: d for d in gated.decisions}
    assert verdict[ids["fact"]].selected and verdict[ids["fact"]].reason == "pinned"
    assert gated.memories[0].id == ids["fact"]  # pins lead
    assert ids["dec"] not in verdict


def test_an_off_topic_pin_is_not_injected(engine: Engine) -> None:
    ids = _project(engine)
    engine.pin(ids["cat"], "ada")
    gated = engine.explain("which port does the staging database use?", "ada", now=NOW)
    verdict = {d.item.memory.id: d for d in gated.decisions}
    assert ids["cat"] not in {m.id for m in gated.memories}
    assert "below" in verdict[ids["cat"]].reason


def test_pinned_still_respects_the_budget(engine: Engine) -> None:
    ids = _project(engine)
    engine.pin(ids["cat"], "ada")
    gated = engine.explain("staging database port", "ada", token_budget=5, now=NOW)
    assert gated.tokens_used <= 5
    assert ids["cat"] not in {m.id for m in gated.memories}


def test_relevant_procedural_first_then_score_order(engine: Engine) -> None:
    _project(engine)
    pref = engine.remember("For the staging database I prefer the port in the answer first",
                           "ada", "preference", now=NOW)  # fmt: skip
    other = engine.remember("I prefer short answers with code first", "ada", "preference",
                            now=NOW)  # fmt: skip
    gated = engine.explain("which port does the staging database use?", "ada", now=NOW)
    assert gated.memories[0].id == pref.memory_id
    assert other.memory_id not in {m.id for m in gated.memories}
    scores = [s.score for s in gated.selected[1:]]
    assert scores == sorted(scores, reverse=True)


def test_explicit_budget_is_never_exceeded(engine: Engine) -> None:
    _project(engine)
    for budget in (0, 20, 60, 200):
        ctx = engine.context("database billing port api routes", "ada", token_budget=budget,
                             now=NOW)  # fmt: skip
        assert ctx.recall.total_tokens <= budget


def test_sections_format_puts_invariants_first(engine: Engine) -> None:
    _project(engine)
    options = GateOptions(format=Format.SECTIONS, depth=Depth.RICH)
    ctx = engine.context("Write a new API route that stores card payments in the database",
                         "ada", token_budget=2000, options=options, now=NOW)  # fmt: skip
    text = ctx.text
    assert text.startswith("<memory>\n## Active Invariants\n- Never log personal data")
    assert "(learned: Jan 10)" in text  # the document's label; the year only if not now's
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Active Invariants"


def test_generation_intent_boosts_patterns(engine: Engine) -> None:
    ids = _project(engine)
    gated = engine.explain("Write a repository class for invoices", "ada", now=NOW)
    pattern = gated.components[ids["pat"]]
    assert pattern["boost_table"] == pytest.approx(0.20)
    assert pattern["type_boost"] == pytest.approx(0.20 * pattern["boost_scale"])
    debugging = engine.explain("Fix the crash in the payment workers", "ada", now=NOW)
    assert debugging.components[ids["anti"]]["boost_table"] == pytest.approx(0.10)


def test_profiles_rank_differently(engine: Engine) -> None:
    _project(engine)
    query = "staging database port"
    static = engine.explain(query, "ada", token_budget=2000, now=NOW,
                            options=GateOptions(profile=Profile.STATIC))  # fmt: skip
    composite = engine.explain(query, "ada", token_budget=2000, now=NOW,
                               options=GateOptions(profile=Profile.COMPOSITE))  # fmt: skip
    evidence = {"cosine", "lexical", "calibrated_relevance"}  # what relevance is made of
    assert set(static.components[static.ranked[0].memory.id]) == {
        "recency", "access", "confidence"} | evidence  # fmt: skip
    assert set(composite.components[composite.ranked[0].memory.id]) == {
        "relevance", "recency", "usefulness", "confidence", "frequency"} | evidence  # fmt: skip


def test_context_counts_access_but_explain_does_not(engine: Engine) -> None:
    ids = _project(engine)
    engine.explain("staging database port", "ada", now=NOW)
    assert engine.get(ids["fact"], "ada").access_count == 0
    engine.context("staging database port", "ada", now=NOW)
    assert engine.get(ids["fact"], "ada").access_count == 1


def test_explain_is_json_ready(engine: Engine) -> None:
    _project(engine)
    report = engine.explain("which port does the staging database use?", "ada", now=NOW).to_dict()
    json.dumps(report)
    assert report["classification"]["intent"] == "question"
    assert report["budget"]["steps"] == ["simple: 500"]
    assert {"selected", "reason", "components", "score"} <= set(report["candidates"][0])


def test_memories_are_tagged_with_domains_at_ingestion(engine: Engine) -> None:
    ids = _project(engine)
    assert engine.get(ids["dec"], "ada").domains == ("database", "billing")


def test_explicit_budget_fills_in_score_order_unless_told_to_gate(engine: Engine) -> None:
    ids = _project(engine)
    query = "which port does the staging database use?"
    filled = engine.explain(query, "ada", token_budget=2000, now=NOW)
    assert ids["cat"] in {m.id for m in filled.memories}  # weak, but the caller asked for room
    gated = engine.explain(query, "ada", token_budget=2000, now=NOW,
                           options=GateOptions(thresholds="always"))  # fmt: skip
    assert ids["cat"] not in {m.id for m in gated.memories}
    assert ids["fact"] in {m.id for m in gated.memories}
