"""A kind its intent does not lift, held to the balanced intents' threshold (issue 12,
session 27, h2): ``GateOptions.unlifted_threshold``, off by default."""

from __future__ import annotations

from engrain import Engine, Kind, Memory
from engrain.model import Provenance
from engrain.recall.classify import Intent
from engrain.recall.gate import GateOptions
from engrain.recall.score import INTENT_TYPE_MULTIPLIER
from engrain.recall.select import (
    BALANCED_INTENT,
    THRESHOLDS,
    Ranked,
    select_gated,
    threshold_for,
    unlifted_threshold,
)

from .conftest import NOW


def _memory(mid: str, kind: Kind) -> Memory:
    return Memory(
        id=mid,
        user_id="u",
        content=mid,
        memory_type=kind.default_memory_type,
        kind=kind,
        created_at=NOW,
        updated_at=NOW,
        provenance=Provenance(),
    )


def _chosen(
    ranked: list[Ranked], intent: Intent, by_lift: bool
) -> tuple[list[str], dict[str, str]]:
    selected, _, decisions = select_gated(
        ranked, line_tokens=lambda m: 40, token_budget=2_000, intent=intent, by_lift=by_lift
    )
    return [s.memory.id for s in selected], {d.item.memory.id: d.reason for d in decisions}


def test_only_the_kinds_a_lifting_intent_does_not_lift_get_the_balanced_threshold() -> None:
    balanced = THRESHOLDS[BALANCED_INTENT][0]
    # the seed's tables as the rule reads them: a request for code asks 0.40 and lifts
    # patterns and golden paths
    assert THRESHOLDS[Intent.GENERATION][0] == 0.40 and balanced == 0.35
    assert INTENT_TYPE_MULTIPLIER[(Intent.GENERATION, Kind.PATTERN)] > 1.0
    assert INTENT_TYPE_MULTIPLIER[(Intent.GENERATION, Kind.GOLDEN_PATH)] > 1.0
    for kind in (Kind.DECISION, Kind.FACT, Kind.ANTIPATTERN, Kind.CORRECTION, Kind.CONTEXT):
        assert threshold_for(kind, Intent.GENERATION) == 0.40
        assert threshold_for(kind, Intent.GENERATION, by_lift=True) == balanced
    for kind in (Kind.PATTERN, Kind.GOLDEN_PATH, Kind.INVARIANT):  # lifted, or its own row
        assert threshold_for(kind, Intent.GENERATION, by_lift=True) == threshold_for(
            kind, Intent.GENERATION
        )
    # never raised: an intent under the balanced bar keeps its own; one that lifts nothing
    # (a greeting) keeps its own, however high
    assert unlifted_threshold(Kind.FACT, Intent.DEBUGGING, 0.25) == 0.25
    assert threshold_for(Kind.FACT, Intent.GREETING, by_lift=True) == THRESHOLDS[Intent.GREETING][0]
    # the depth's shift applies after the rule
    assert threshold_for(Kind.DECISION, Intent.GENERATION, -0.05, by_lift=True) == balanced - 0.05


def test_a_request_for_code_takes_a_decision_a_question_would() -> None:
    ranked = [
        Ranked(_memory("convention", Kind.PATTERN), 0.55, 0.5, 0.5),
        Ranked(_memory("decision", Kind.DECISION), 0.38, 0.4, 0.4),
        Ranked(_memory("pattern-under", Kind.PATTERN), 0.38, 0.4, 0.4),
    ]
    chosen, why = _chosen(ranked, Intent.GENERATION, by_lift=False)
    assert chosen == ["convention"] and why["decision"] == "score 0.380 below 0.40"
    chosen, why = _chosen(ranked, Intent.GENERATION, by_lift=True)
    assert chosen == ["convention", "decision"]
    assert why["pattern-under"] == "score 0.380 below 0.40"  # a lifted kind keeps the seed's bar
    # a question was never held higher: the option changes nothing there
    assert _chosen(ranked, Intent.QUESTION, by_lift=True) == _chosen(
        ranked, Intent.QUESTION, by_lift=False
    )


def test_an_explicit_budget_fills_as_before() -> None:
    ranked = [Ranked(_memory("decision", Kind.DECISION), 0.1, 0.1, 0.1)]
    for by_lift in (False, True):
        selected, _, _ = select_gated(
            ranked,
            line_tokens=lambda m: 40,
            token_budget=500,
            intent=Intent.GENERATION,
            apply_threshold=False,
            by_lift=by_lift,
        )
        assert [s.memory.id for s in selected] == ["decision"]


def test_the_option_is_off_by_default_and_reaches_context_and_explain(engine: Engine) -> None:
    assert GateOptions().unlifted_threshold is False
    engine.remember(
        "Pagination uses opaque cursors, never page numbers, in every list endpoint.",
        user_id="u",
        kind="decision",
        now=NOW,
    )
    engine.remember(
        "List endpoints return at most 100 items per page.", user_id="u", kind="fact", now=NOW
    )
    message = "Write the list endpoint for invoices with pagination"
    on = engine.options.update(unlifted_threshold=True)
    before = engine.explain(message, "u", now=NOW)
    after = engine.explain(message, "u", now=NOW, options=on)
    assert after.classification.intent is Intent.GENERATION
    for gated in (before, after):
        for d in gated.decisions:
            if d.reason.startswith("score "):
                limit = float(d.reason.rsplit(" ", 1)[1])
                assert limit == threshold_for(
                    d.item.memory.kind,
                    Intent.GENERATION,
                    gated.classification.threshold_shift,
                    by_lift=gated is after,
                )
    assert {m.id for m in before.memories} <= {m.id for m in after.memories}
    assert {m.id for m in engine.context(message, "u", now=NOW, options=on).memories} == {
        m.id for m in after.memories
    }
