"""The automatic budget of a question whose best evidence is a conversation transcript."""

from __future__ import annotations

from engrain import Engine, Turn
from engrain.recall.budget import CEILING, HISTORY_MULTIPLIER, Budget, with_conversation_evidence

from .conftest import NOW


def test_the_budget_rises_by_the_history_multiplier_within_its_caps() -> None:
    raised = with_conversation_evidence(Budget(500, ("simple: 500",)))
    assert raised.tokens == round(500 * HISTORY_MULTIPLIER) == 750
    assert raised.steps[0] == "simple: 500" and "conversation evidence" in raised.steps[-1]
    assert with_conversation_evidence(Budget(500, ()), cap=600).tokens == 600
    assert with_conversation_evidence(Budget(500, ()), cap=400).tokens == 500  # never lowered
    assert with_conversation_evidence(Budget(8000, ()), cap=None).tokens == CEILING


def _talk(engine: Engine) -> None:
    turns = [
        Turn("Caroline", "I went to an LGBTQ support group yesterday, so powerful.", "D1:1", NOW),
        Turn("Melanie", "Wonderful! I ran a charity race for mental health.", "D1:2", NOW),
    ]  # fmt: skip
    engine.ingest_conversation(turns, "u", "s1", now=NOW)


def test_a_question_led_by_a_conversation_chunk_gets_the_history_budget(
    mem_engine: Engine,
) -> None:
    _talk(mem_engine)
    question = "When did Caroline go to the LGBTQ support group?"
    options = mem_engine.options.update(lead_budget=False)  # the lead's budget: test_lead_budget
    auto = mem_engine.explain(question, "u", options=options, now=NOW)
    plain = mem_engine.explain(question, "u", options=options.update(history_evidence=False),
                               now=NOW)  # fmt: skip
    assert auto.memories and auto.memories[0].provenance.turn_ids
    assert auto.budget.tokens == round(plain.budget.tokens * HISTORY_MULTIPLIER)
    assert "conversation evidence" in auto.budget.steps[-1]
    # an explicit budget is the caller's: left alone
    explicit = mem_engine.explain(question, "u", token_budget=300, options=options, now=NOW)
    assert explicit.budget.tokens == 300


def test_a_question_led_by_a_learning_keeps_its_budget(mem_engine: Engine) -> None:
    _talk(mem_engine)
    mem_engine.remember("Deploys to production go out on Tuesdays after the review.", "u",
                        "decision", now=NOW)  # fmt: skip
    question = "Which day do deploys to production go out?"
    options = mem_engine.options
    auto = mem_engine.explain(question, "u", options=options, now=NOW)
    plain = mem_engine.explain(question, "u", options=options.update(history_evidence=False),
                               now=NOW)  # fmt: skip
    assert auto.ranked and not auto.ranked[0].memory.provenance.turn_ids
    assert auto.budget == plain.budget


def test_the_locomo_ablations_turn_each_new_signal_off() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import locomo

    names = {v.name: v.options for v in locomo.variants("gated")}
    assert names["no-group"]["group_days"] is False
    assert names["no-history"]["history_evidence"] is False
    assert names["no-lead"]["lead_budget"] is False
    before = names["none-new"]
    assert before["group_days"] is False and before["history_evidence"] is False
    assert before["lead_budget"] is False
    assert "group_days" not in names["engrain"] and "history_evidence" not in names["engrain"]
    assert "lead_budget" not in names["engrain"]
