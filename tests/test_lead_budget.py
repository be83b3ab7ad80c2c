"""The automatic budget of a transcript question, from how clearly its best candidate leads."""

from __future__ import annotations

import math

import pytest

from engrain import Engine, Turn
from engrain.recall.budget import (
    BASE_BUDGET,
    CEILING,
    HISTORY_MULTIPLIER,
    LEAD_RANK,
    TYPICAL_LEAD,
    Depth,
    lead_of,
    transcript_budget,
)
from engrain.recall.classify import Complexity
from engrain.recall.select import threshold_for

from .conftest import NOW

HISTORY = round(BASE_BUDGET[Complexity.SIMPLE] * HISTORY_MULTIPLIER)


def _scores(lead: float) -> list[float]:
    """Ranked scores whose best leads the LEAD_RANK-th best by ``lead``."""
    top = 0.6
    return [top - lead * i / (LEAD_RANK - 1) for i in range(LEAD_RANK)] + [0.1, 0.05]


def test_the_lead_is_the_best_score_over_the_fifth_best() -> None:
    assert lead_of([0.9, 0.5, 0.45, 0.4, 0.3, 0.1]) == pytest.approx(0.6)
    assert lead_of([0.3, 0.9, 0.5]) == pytest.approx(0.6)  # fewer than five: the last one
    assert lead_of([0.4]) == math.inf  # nothing to compete with
    assert lead_of([]) == 0.0


def test_the_budget_grows_as_the_lead_shrinks_between_simple_and_moderate() -> None:
    assert transcript_budget(_scores(TYPICAL_LEAD)).tokens == HISTORY
    assert transcript_budget(_scores(TYPICAL_LEAD / 2)).tokens == 2 * HISTORY
    assert transcript_budget(_scores(TYPICAL_LEAD * 1.5)).tokens == round(HISTORY / 1.5)
    # a clear leader: the simple budget; flat scores: the moderate budget, never beyond
    assert transcript_budget(_scores(0.5)).tokens == BASE_BUDGET[Complexity.SIMPLE]
    assert transcript_budget(_scores(0.01)).tokens == BASE_BUDGET[Complexity.MODERATE]
    assert transcript_budget([0.3] * 8).tokens == BASE_BUDGET[Complexity.MODERATE]
    assert transcript_budget([0.7]).tokens == BASE_BUDGET[Complexity.SIMPLE]


def test_depth_speed_and_caps_scale_the_lead_budget() -> None:
    scores = _scores(TYPICAL_LEAD)
    assert transcript_budget(scores, depth=Depth.RICH).tokens == round(HISTORY * 1.3)
    assert transcript_budget(scores, prioritize_speed=True).tokens == round(HISTORY * 0.5)
    capped = transcript_budget(scores, cap=600)
    assert capped.tokens == 600 and "capped at 600" in capped.steps[-1]
    assert transcript_budget(_scores(0.01), cap=50_000).tokens <= CEILING
    assert f"lead {TYPICAL_LEAD:.3f}" in transcript_budget(scores).steps[0]


def _talk(engine: Engine) -> None:
    lines = [
        ("Caroline", "I went to an LGBTQ support group yesterday, it was so powerful."),
        ("Melanie", "Wonderful! I ran a charity race for mental health last weekend."),
        ("Caroline", "I am researching adoption agencies, a dream to have a family."),
        ("Melanie", "My kids and I went camping by the lake and roasted marshmallows."),
        ("Caroline", "I painted a sunrise over the lake for my new apartment."),
        ("Melanie", "I started pottery classes; I made a bowl with a dog on it."),
        ("Caroline", "My counseling course starts in June, I want to help trans youth."),
        ("Melanie", "We visited the museum of science and saw the dinosaur bones."),
    ]
    for n, (speaker, text) in enumerate(lines):
        turns = [Turn(speaker, text, f"D{n + 1}:1", NOW)]
        engine.ingest_conversation(turns, "u", f"s{n + 1}", now=NOW)


def test_a_transcript_question_is_filled_in_score_order_to_the_lead_budget(
    mem_engine: Engine,
) -> None:
    _talk(mem_engine)
    question = "What did Caroline do at the lake?"
    options = mem_engine.options
    led = mem_engine.explain(question, "u", options=options, now=NOW)
    old = mem_engine.explain(question, "u", options=options.update(lead_budget=False), now=NOW)
    assert led.ranked[0].memory.provenance.turn_ids
    assert led.budget.steps[0].startswith("rules: ")
    assert "transcript evidence" in led.budget.steps[1]
    assert led.budget.tokens == transcript_budget([r.score for r in led.ranked]).tokens
    # no intent threshold: every ranked chunk fits the budget here, so all are selected, in
    # score order, including those the threshold turns away in the old selection
    limit = threshold_for(led.ranked[0].memory.kind, led.classification.intent)
    below = [r.memory.id for r in led.ranked if r.score < limit]
    assert below, "the test needs chunks below the intent threshold"
    assert [m.id for m in led.memories] == [r.memory.id for r in led.ranked]
    assert not set(below) & {m.id for m in old.memories}


def test_explicit_budgets_always_and_learnings_keep_the_old_rules(mem_engine: Engine) -> None:
    _talk(mem_engine)
    question = "What did Caroline do at the lake?"
    options = mem_engine.options
    explicit = mem_engine.explain(question, "u", token_budget=300, options=options, now=NOW)
    assert explicit.budget.tokens == 300
    always = mem_engine.explain(question, "u", options=options.update(thresholds="always"),
                                now=NOW)  # fmt: skip
    old = mem_engine.explain(question, "u", options=options.update(lead_budget=False), now=NOW)
    assert always.budget == old.budget and [m.id for m in always.memories] == [
        m.id for m in old.memories
    ]
    mem_engine.remember("Deploys to production go out on Tuesdays after the review.", "u",
                        "decision", now=NOW)  # fmt: skip
    deploy = "Which day do deploys to production go out?"
    auto = mem_engine.explain(deploy, "u", options=options, now=NOW)
    plain = mem_engine.explain(deploy, "u", options=options.update(lead_budget=False), now=NOW)
    assert not auto.ranked[0].memory.provenance.turn_ids
    assert auto.budget == plain.budget and auto.memories == plain.memories
