"""Every seed table of relevance gating, tiered context and Phase 3, value by value."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.recall import score as sc
from engrain.recall.budget import (
    BASE_BUDGET,
    CEILING,
    DEPTH_EFFECT,
    Depth,
    assign_budget,
)
from engrain.recall.classify import Classification, Complexity, Intent, classify
from engrain.recall.select import THRESHOLDS, threshold_for

from .conftest import NOW


def _cls(
    complexity: Complexity = Complexity.MODERATE,
    intent: Intent = Intent.QUESTION,
    *,
    turn: int = 0,
    code: bool = False,
    history: bool = False,
    domains: tuple[str, ...] = (),
) -> Classification:
    return Classification(complexity, intent, domains, turn, code, history, ())


def _memory(kind: Kind = Kind.FACT, **changes: object) -> Memory:
    base = Memory(
        id="m", user_id="u", content="x", memory_type=MemoryType.SEMANTIC, kind=kind,
        created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    return base.evolve(**changes)


# -- budgets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("complexity", "tokens"),
    [
        (Complexity.TRIVIAL, 0),
        (Complexity.SIMPLE, 500),
        (Complexity.MODERATE, 2_000),
        (Complexity.COMPLEX, 5_000),
        (Complexity.DEEP, 8_000),
    ],
)
def test_base_budget_per_complexity(complexity: Complexity, tokens: int) -> None:
    assert BASE_BUDGET[complexity] == tokens
    assert assign_budget(_cls(complexity)).tokens == tokens


def test_budget_modifiers() -> None:
    assert assign_budget(_cls(Complexity.MODERATE, history=True)).tokens == 3_000  # +50%
    assert assign_budget(_cls(Complexity.MODERATE, turn=11)).tokens == 2_500  # +25% past 10
    assert assign_budget(_cls(Complexity.MODERATE, turn=10)).tokens == 2_000  # not at 10
    assert assign_budget(_cls(Complexity.MODERATE), prioritize_speed=True).tokens == 1_000
    combined = assign_budget(_cls(Complexity.SIMPLE, history=True, turn=12), prioritize_speed=True)
    assert combined.tokens == round(500 * 1.5 * 1.25 * 0.5)


def test_budget_ceiling_is_10000() -> None:
    assert CEILING == 10_000
    deep = assign_budget(_cls(Complexity.DEEP, history=True, turn=20))  # 8000 × 1.5 × 1.25
    assert deep.tokens == 10_000
    assert "ceiling: 10000" in deep.steps


@pytest.mark.parametrize(
    ("depth", "multiplier", "shift", "tokens"),
    [(Depth.LIGHT, 0.7, 0.10, 1_400), (Depth.NORMAL, 1.0, 0.0, 2_000),
     (Depth.RICH, 1.3, -0.10, 2_600)],
)  # fmt: skip
def test_memory_depth(depth: Depth, multiplier: float, shift: float, tokens: int) -> None:
    assert DEPTH_EFFECT[depth] == (multiplier, shift)
    assert assign_budget(_cls(), depth=depth).tokens == tokens


def test_trivial_stays_zero_whatever_the_modifiers() -> None:
    budget = assign_budget(_cls(Complexity.TRIVIAL, history=True, turn=30), depth=Depth.RICH)
    assert budget.tokens == 0


# -- thresholds -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intent", "general", "invariant"),
    [
        (Intent.DEBUGGING, 0.25, 0.15),
        (Intent.CONTINUATION, 0.30, 0.18),
        (Intent.QUESTION, 0.35, 0.20),
        (Intent.ANALYSIS, 0.35, 0.20),
        (Intent.DISCUSSION, 0.35, 0.20),
        (Intent.GENERATION, 0.40, 0.20),
        (Intent.GREETING, 0.50, 0.30),
    ],
)
def test_intent_thresholds(intent: Intent, general: float, invariant: float) -> None:
    assert THRESHOLDS[intent] == (general, invariant)
    assert threshold_for(Kind.PATTERN, intent) == general
    assert threshold_for(Kind.INVARIANT, intent) == invariant
    assert threshold_for(Kind.PATTERN, intent, 0.10) == pytest.approx(general + 0.10)
    assert threshold_for(Kind.INVARIANT, intent, -0.10) == pytest.approx(max(0, invariant - 0.1))


# -- weights ----------------------------------------------------------------------------------


def test_question_profile_uses_semantic_055_recency_010() -> None:
    w = sc.gated_weights(_cls())
    assert w["semantic"] == pytest.approx(0.55)
    assert w["recency"] == pytest.approx(0.10)
    assert sum(w.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(("intent", "factor"), [(Intent.DEBUGGING, 1.35),
                                                (Intent.CONTINUATION, 1.30)])  # fmt: skip
def test_recency_boost_by_intent(intent: Intent, factor: float) -> None:
    assert sc.INTENT_RECENCY[intent] == factor
    w = sc.gated_weights(_cls(intent=intent))
    raw = dict(sc.BALANCED, recency=0.10 * factor)
    assert w["recency"] == pytest.approx(raw["recency"] / sum(raw.values()))
    assert sum(w.values()) == pytest.approx(1.0)


def test_weight_shift_tables() -> None:
    assert sc.SHIFT_DEEP_CONVERSATION == {"recency": +0.10, "semantic": -0.10}
    assert sc.SHIFT_CODE == {"domain": +0.08, "usage": +0.02, "semantic": -0.10}
    assert sc.SHIFT_HISTORY == {"semantic": +0.10, "recency": -0.05, "domain": -0.05}


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ({"turn": 11}, {"semantic": 0.45, "recency": 0.20, "domain": 0.25, "usage": 0.10}),
        ({"code": True}, {"semantic": 0.45, "recency": 0.10, "domain": 0.33, "usage": 0.12}),
        ({"history": True}, {"semantic": 0.65, "recency": 0.05, "domain": 0.20, "usage": 0.10}),
    ],
)
def test_weight_shifts_applied(signals: dict[str, object], expected: dict[str, float]) -> None:
    w = sc.gated_weights(_cls(**signals))  # type: ignore[arg-type]
    assert w == pytest.approx(expected)


def test_weights_clamped_and_renormalised() -> None:
    # all three shifts plus debugging: recency 0.135+0.10-0.05, semantic 0.55-0.10-0.10+0.10
    w = sc.gated_weights(_cls(intent=Intent.DEBUGGING, turn=11, code=True, history=True))
    raw = {"semantic": 0.45, "recency": 0.185, "domain": 0.28, "usage": 0.12}
    total = sum(raw.values())
    assert w == pytest.approx({k: v / total for k, v in raw.items()})
    assert all(0 <= v <= 1 for v in w.values())


# -- components -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "half_life"),
    [(Kind.INVARIANT, None), (Kind.DECISION, 365.0), (Kind.PATTERN, 90.0),
     (Kind.GOLDEN_PATH, 30.0), (Kind.ANTIPATTERN, 14.0)],
)  # fmt: skip
def test_half_lives(kind: Kind, half_life: float | None) -> None:
    assert sc.HALF_LIFE_DAYS[kind] == half_life
    if half_life is None:
        assert sc.decay(kind, 3 * 365.0) == 1.0  # an invariant from 3 years ago
    else:
        assert sc.decay(kind, half_life) == pytest.approx(0.5)
        assert sc.decay(kind, 2 * half_life) == pytest.approx(0.25)


def test_domain_match_is_proportional() -> None:
    assert sc.domain_match(("database", "security"), ("database", "security")) == 0.2
    assert sc.domain_match(("database", "security"), ("database",)) == pytest.approx(0.1)
    assert sc.domain_match(("database",), ("database", "security", "api")) == pytest.approx(0.2 / 3)
    assert sc.domain_match((), ("database",)) == 0.0


def test_usage_log_curve_plateaus_near_20_and_caps() -> None:
    assert sc.usage_score(0) == 0.0
    assert sc.usage_score(20) == pytest.approx(1.0)
    assert sc.usage_score(200) == 1.0
    assert sc.usage_score(5) < sc.usage_score(10) < sc.usage_score(19) < 1.0
    w = {"semantic": 0.0, "recency": 0.0, "domain": 0.0, "usage": 1.0}
    heavy = sc.score_gated(_memory(Kind.FACT, access_count=500), 0.0, _cls(), w, NOW)
    assert heavy.components["usage"] == sc.USAGE_CAP == 0.15


@pytest.mark.parametrize(
    ("kind", "boost"),
    [(Kind.INVARIANT, 0.25), (Kind.GOLDEN_PATH, 0.15), (Kind.PATTERN, 0.10),
     (Kind.DECISION, 0.10), (Kind.ANTIPATTERN, 0.05), (Kind.FACT, 0.0)],
)  # fmt: skip
def test_type_boosts(kind: Kind, boost: float) -> None:
    assert sc.type_boost(kind, Intent.QUESTION) == boost


@pytest.mark.parametrize(
    ("intent", "kind", "boost"),
    [
        (Intent.DEBUGGING, Kind.GOLDEN_PATH, 0.225),
        (Intent.GENERATION, Kind.GOLDEN_PATH, 0.225),
        (Intent.GENERATION, Kind.PATTERN, 0.20),
        (Intent.ANALYSIS, Kind.DECISION, 0.20),
        (Intent.DEBUGGING, Kind.DECISION, 0.05),
        (Intent.DEBUGGING, Kind.ANTIPATTERN, 0.10),
        (Intent.DEBUGGING, Kind.INVARIANT, 0.25),  # stable across intents
        (Intent.GENERATION, Kind.INVARIANT, 0.25),
    ],
)
def test_intent_type_multipliers(intent: Intent, kind: Kind, boost: float) -> None:
    assert sc.type_boost(kind, intent) == pytest.approx(boost)


def test_cooccurrence_and_focus_bonuses() -> None:
    w = sc.gated_weights(_cls())
    plain = sc.score_gated(_memory(domains=("api",)), 0.5, _cls(), w, NOW)
    co = sc.score_gated(_memory(domains=("api",)), 0.5, _cls(), w, NOW, cooccurrence=5.0)
    focus = sc.score_gated(_memory(domains=("api",)), 0.5, _cls(), w, NOW, focus_areas=("api",))
    assert co.total - plain.total == pytest.approx(0.10)  # capped at +0.10
    assert focus.total - plain.total == pytest.approx(0.05)


def test_gated_score_is_clamped_to_one() -> None:
    w = sc.gated_weights(_cls())
    top = sc.score_gated(_memory(Kind.INVARIANT, access_count=100), 1.0, _cls(), w, NOW,
                         cooccurrence=1.0)  # fmt: skip
    assert top.total == 1.0


def test_gated_score_composition() -> None:
    w = sc.gated_weights(_cls(domains=("database",)))
    memory = _memory(Kind.PATTERN, domains=("database",), updated_at=NOW - timedelta(days=90))
    result = sc.score_gated(memory, 0.8, _cls(domains=("database",)), w, NOW)
    # the pattern's +0.10 boost is scaled by its age (0.5 + 0.5 × decay, decay 0.5 at one
    # half-life) and relevance (full from 0.5 up)
    expected = 0.55 * 0.8 + 0.10 * 0.5 + 0.25 * 0.2 + 0.0 + 0.10 * 0.75
    assert result.total == pytest.approx(expected)
    assert result.factors == {"decay": 0.5, "boost_table": 0.10, "boost_scale": 0.75}


# -- composite (Phase 3) -------------------------------------------------------------------------


def test_scorer_weights_sum_to_one() -> None:
    assert (sc.WEIGHT_RELEVANCE, sc.WEIGHT_RECENCY, sc.WEIGHT_USEFULNESS, sc.WEIGHT_CONFIDENCE,
            sc.WEIGHT_FREQUENCY) == (0.40, 0.25, 0.20, 0.10, 0.05)  # fmt: skip
    total = (sc.WEIGHT_RELEVANCE + sc.WEIGHT_RECENCY + sc.WEIGHT_USEFULNESS
             + sc.WEIGHT_CONFIDENCE + sc.WEIGHT_FREQUENCY)  # fmt: skip
    assert abs(total - 1.0) < 1e-9


def test_relevance_does_not_dominate() -> None:
    """The documented finding (docs/adr/ADR-0040): relevance alone (0.40) loses to all the
    other signals at their maximum (0.60)."""
    old = NOW - timedelta(days=100_000)
    relevant = _memory(created_at=old, usefulness=0.0, confidence=0.0, access_count=0)
    popular = _memory(created_at=NOW, usefulness=1.0, confidence=1.0, access_count=50)
    a = sc.score_composite(relevant, 1.0, NOW)
    b = sc.score_composite(popular, 0.0, NOW)
    assert a.total == pytest.approx(0.40)
    assert b.total == pytest.approx(0.60)
    assert b.total > a.total


def test_recency_decay_14_day_half_life() -> None:
    assert sc.RECENCY_DECAY_LAMBDA == 0.05
    assert sc.composite_recency(NOW - timedelta(days=14), NOW) == pytest.approx(0.5, abs=0.01)
    assert sc.composite_recency(NOW, NOW) == 1.0


def test_frequency_caps_at_50() -> None:
    assert sc.frequency_score(100) == 1.0
    assert sc.frequency_score(25) == 0.5


def test_unknown_memory_age_neutral() -> None:
    assert sc.composite_recency(None, NOW) == 0.5


def test_scores_sorted_descending(mem_engine) -> None:  # type: ignore[no-untyped-def]
    from engrain.recall.gate import GateOptions

    notes = [
        "Staging deploys run from the main branch every hour",
        "A rollback of the pipeline takes two minutes with the revert job",
        "Canary checks watch error rates for ten minutes after each deploy",
        "Release notes are generated from merged pull request titles",
        "Build caching cut the deploy pipeline from 14 to 6 minutes",
        "Secret rotation happens quarterly and needs a pipeline restart",
    ]
    for i, note in enumerate(notes):
        mem_engine.remember(note, "ada", now=NOW - timedelta(days=3 * i))
    gated = mem_engine.explain("deploy pipeline jobs", "ada", token_budget=5000, now=NOW,
                               options=GateOptions(profile=sc.Profile.COMPOSITE))  # fmt: skip
    scores = [s.score for s in gated.ranked]
    assert len(scores) == 6 and scores == sorted(scores, reverse=True)


def test_composite_default_usefulness_and_confidence() -> None:
    memory = _memory()
    assert memory.usefulness == 0.5
    result = sc.score_composite(memory, 0.0, NOW)
    assert result.components["usefulness"] == pytest.approx(0.10)


# -- static (ADR-002) ----------------------------------------------------------------------------


def test_static_score_uses_log_access_count() -> None:
    a = sc.score_static(_memory(access_count=50), NOW).components["access"]
    b = sc.score_static(_memory(access_count=100), NOW).components["access"]
    assert a == pytest.approx(0.2 * math.log(51))
    assert b - a < 0.2  # 100 uses score only marginally higher than 50
    assert sc.STATIC_TOP == 10


# -- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "complexity", "intent"),
    [
        ("hi", Complexity.TRIVIAL, Intent.GREETING),
        ("thanks!", Complexity.TRIVIAL, Intent.GREETING),
        ("What port does this run on?", Complexity.SIMPLE, Intent.QUESTION),
        ("Write a function to validate email", Complexity.MODERATE, Intent.GENERATION),
        ("Why is this test failing?", Complexity.COMPLEX, Intent.DEBUGGING),
        ("Debug this error", Complexity.COMPLEX, Intent.DEBUGGING),
        ("Review this system design", Complexity.DEEP, Intent.ANALYSIS),
        ("Quick question: what's the port?", Complexity.SIMPLE, Intent.QUESTION),
        ("Help me understand the full auth flow", Complexity.DEEP, Intent.ANALYSIS),
    ],
)
def test_classification_examples_from_the_document(
    message: str, complexity: Complexity, intent: Intent
) -> None:
    result = classify(message)
    assert (result.complexity, result.intent) == (complexity, intent)


def test_classification_signals() -> None:
    assert classify("as we discussed, which database did we pick?").references_history
    assert classify("Fix this:\n```python\nx = 1\n```").has_code
    assert classify("and what about the cache?", turn=8).intent is Intent.CONTINUATION
    assert classify("tune the postgres index for the login query").domains == ("database", "auth")


@pytest.mark.parametrize(
    ("kind", "half_life"),
    [(Kind.PREFERENCE, 365.0), (Kind.FACT, 365.0), (Kind.CORRECTION, 365.0),
     (Kind.EVENT, 365.0), (Kind.SUMMARY, 90.0), (Kind.CONTEXT, 14.0)],
)  # fmt: skip
def test_half_lives_of_the_other_kinds(kind: Kind, half_life: float) -> None:
    assert sc.HALF_LIFE_DAYS[kind] == half_life
    assert sc.decay(kind, half_life) == pytest.approx(0.5)
