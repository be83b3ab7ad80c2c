"""What a block holds that no message asks for (issue 12, session 26, h5): the rules of
``recall.trim``, each off by default — a pin judged by its threshold, no unrelated invariant
for a question asking for no procedure, a line restating one already in the block left out."""

from __future__ import annotations

import numpy as np
import pytest

from engrain import Engine, Kind, Memory
from engrain.errors import EngrainError, ValidationError
from engrain.model import Provenance
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.select import PIN_MIN_RELEVANCE, Ranked, select_gated, threshold_for
from engrain.recall.trim import DEFAULT_TRIM, NO_TRIM, Trim, bare_question, restates

from .conftest import NOW


def _memory(mid: str, kind: Kind, *, pinned: bool = False,
            vector: list[float] | None = None) -> Memory:  # fmt: skip
    return Memory(id=mid, user_id="u", content=mid, memory_type=kind.default_memory_type,
                  kind=kind, created_at=NOW, updated_at=NOW, pinned=pinned,
                  embedding=None if vector is None else np.asarray(vector, dtype=np.float32),
                  provenance=Provenance())  # fmt: skip


def _select(
    ranked: list[Ranked],
    trim: Trim,
    *,
    intent: Intent = Intent.QUESTION,
    budget: int = 2_000,
    thresholds: bool = True,
) -> tuple[list[str], dict[str, str]]:
    selected, _, decisions = select_gated(
        ranked, line_tokens=lambda m: 40, token_budget=budget, intent=intent,
        apply_threshold=thresholds, trim=trim,
    )  # fmt: skip
    return [s.memory.id for s in selected], {d.item.memory.id: d.reason for d in decisions}


def _question(*signals: str, intent: Intent = Intent.QUESTION) -> Classification:
    return Classification(Complexity.SIMPLE, intent, (), 0, False, False, signals)


# -- a pin judged by its threshold ----------------------------------------------------------

#: A decision answering the question, a pinned golden path relevant enough to lead
#: (0.3 ≥ PIN_MIN_RELEVANCE) but under a question's threshold (0.35), and a pinned invariant
#: that clears its own (0.20).
PINS = [
    Ranked(_memory("answer", Kind.DECISION), 0.8, 0.7, 1.0),
    Ranked(_memory("pinned-path", Kind.GOLDEN_PATH, pinned=True), 0.30, 0.2, 0.30),
    Ranked(_memory("pinned-rule", Kind.INVARIANT, pinned=True), 0.45, 0.3, 0.40),
]


def test_the_pins_fixture_sits_where_the_rule_decides() -> None:
    assert PINS[1].relevance >= PIN_MIN_RELEVANCE
    assert PINS[1].score < threshold_for(Kind.GOLDEN_PATH, Intent.QUESTION)
    assert PINS[2].score >= threshold_for(Kind.INVARIANT, Intent.QUESTION)


def test_a_pin_under_its_threshold_leads_only_without_the_rule() -> None:
    chosen, why = _select(PINS, NO_TRIM)
    assert set(chosen[:2]) == {"pinned-path", "pinned-rule"} and why["pinned-path"] == "pinned"
    chosen, why = _select(PINS, Trim(pin_threshold=True))
    assert chosen == ["pinned-rule", "answer"]  # the pin that passes still leads
    assert why["pinned-rule"] == "pinned"
    assert why["pinned-path"] == "score 0.300 below 0.35"


def test_a_pinned_preference_is_judged_on_its_relevance_floor() -> None:
    weak = Ranked(_memory("pref", Kind.PREFERENCE, pinned=True), 0.3, 0.2, 0.30)
    assert _select([weak], NO_TRIM)[0] == ["pref"]
    # a question asks for no work: a preference needs 0.35 there
    assert _select([weak], Trim(pin_threshold=True))[0] == []
    assert _select([weak], Trim(pin_threshold=True), intent=Intent.GENERATION)[0] == ["pref"]


def test_an_explicit_budget_keeps_every_pin_in_front() -> None:
    chosen, _ = _select(PINS, Trim(pin_threshold=True), thresholds=False)
    assert chosen[:2] == ["pinned-path", "pinned-rule"]


# -- no background for a question asking for no procedure --------------------------------------

#: An answer, and an invariant unrelated to the message (relevance under 0.2) passing its
#: threshold on its priors.
BACKGROUND = [
    Ranked(_memory("answer", Kind.FACT), 0.8, 0.7, 1.0),
    Ranked(_memory("unrelated-rule", Kind.INVARIANT), 0.25, 0.05, 0.05),
]


def test_a_bare_question_gets_no_unrelated_invariant() -> None:
    trim = Trim(question_background=False)
    assert _select(BACKGROUND, NO_TRIM)[0] == ["answer", "unrelated-rule"]
    chosen, why = _select(BACKGROUND, trim.for_message(_question()))
    assert chosen == ["answer"]
    assert "gets no background" in why["unrelated-rule"]


@pytest.mark.parametrize(
    ("classification", "kept"),
    [
        (_question(), False),
        (_question("how-to"), True),  # a procedure: the work it asks is constrained
        (_question("procedure"), True),
        (_question(intent=Intent.DEBUGGING), True),
        (_question(intent=Intent.GENERATION), True),
    ],
)
def test_only_a_question_asking_for_no_procedure_loses_its_background(
    classification: Classification, kept: bool
) -> None:
    assert bare_question(classification) is not kept
    trim = Trim(question_background=False).for_message(classification)
    assert trim.background is kept
    assert ("unrelated-rule" in _select(BACKGROUND, trim, intent=classification.intent)[0]) is kept
    # with the rule off every message keeps it
    assert NO_TRIM.for_message(classification).background


# -- a line the block already says -----------------------------------------------------------


def test_a_restatement_of_a_line_already_selected_is_left_out() -> None:
    ranked = [
        Ranked(_memory("pattern", Kind.PATTERN, vector=[1.0, 0.0, 0.0]), 0.8, 0.7, 1.0),
        Ranked(_memory("same-rule", Kind.INVARIANT, vector=[0.9, 0.3, 0.0]), 0.7, 0.6, 0.9),
        Ranked(_memory("other", Kind.DECISION, vector=[0.0, 1.0, 0.0]), 0.6, 0.5, 0.8),
    ]
    cosine = 0.9 / float(np.linalg.norm([0.9, 0.3, 0.0]))  # 0.949
    assert _select(ranked, NO_TRIM)[0] == ["pattern", "same-rule", "other"]
    chosen, why = _select(ranked, Trim(restated=0.9))
    assert chosen == ["pattern", "other"]
    assert why["same-rule"] == "restates pattern, already in the block"
    assert _select(ranked, Trim(restated=round(cosine + 0.01, 2)))[0] == [
        "pattern", "same-rule", "other"]  # fmt: skip


def test_restates_ignores_chunks_and_memories_without_a_vector() -> None:
    a = _memory("a", Kind.FACT, vector=[1.0, 0.0])
    b = _memory("b", Kind.FACT, vector=[1.0, 0.0])
    assert restates(a, [b], 0.8) == "b"
    assert restates(_memory("c", Kind.FACT), [b], 0.8) is None
    chunk = Memory(id="t", user_id="u", content="t", memory_type=Kind.FACT.default_memory_type,
                   kind=Kind.FACT, created_at=NOW, updated_at=NOW,
                   embedding=np.asarray([1.0, 0.0], dtype=np.float32),
                   provenance=Provenance(turn_ids=("t1",)))  # fmt: skip
    assert restates(chunk, [b], 0.8) is None
    assert restates(a, [chunk], 0.8) is None


@pytest.mark.parametrize("level", [0.0, -0.5, 1.5])
def test_a_restatement_level_outside_0_1_is_refused(level: float) -> None:
    with pytest.raises(ValidationError):
        Trim(restated=level)
    assert issubclass(ValidationError, EngrainError)


# -- through the engine ------------------------------------------------------------------------


def test_the_option_reaches_the_selection_of_context_and_explain(engine: Engine) -> None:
    engine.remember("Deploys go out through the blue-green pipeline; never ssh to prod.",
                    user_id="u", kind="golden_path", pinned=True, now=NOW)  # fmt: skip
    engine.remember("The billing service runs on Postgres 16 in eu-west-1.", user_id="u",
                    kind="fact", now=NOW)  # fmt: skip
    message = "which Postgres version does billing run?"
    before = engine.explain(message, "u", now=NOW, options=engine.options.update(trim=NO_TRIM))
    pins_judged = engine.options.update(trim=Trim(pin_threshold=True))
    trimmed = engine.explain(message, "u", now=NOW, options=pins_judged)

    ids = {m.id for m in before.memories}
    kept = {m.id for m in trimmed.memories}
    assert kept <= ids
    for d in trimmed.decisions:
        assert d.reason != "pinned" or d.item.score >= threshold_for(
            d.item.memory.kind, trimmed.classification.intent,
            trimmed.classification.threshold_shift)  # fmt: skip
    context = engine.context(message, "u", now=NOW, options=pins_judged)
    assert {m.id for m in context.memories} == kept


def test_the_default_judges_pins_and_gives_a_bare_question_no_background() -> None:
    assert GateOptions().trim == DEFAULT_TRIM
    assert DEFAULT_TRIM.pin_threshold and not DEFAULT_TRIM.question_background
    assert DEFAULT_TRIM.restated is None  # measured, not adopted
    assert Trim(pin_threshold=False, question_background=True, restated=None) == NO_TRIM
