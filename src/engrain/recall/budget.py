"""Token budget assignment (relevance gating, step 2), with a record of how it was derived."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from engrain.recall.classify import Classification, Complexity

#: Memory budget per complexity level.
BASE_BUDGET: Mapping[Complexity, int] = {
    Complexity.TRIVIAL: 0,
    Complexity.SIMPLE: 500,
    Complexity.MODERATE: 2_000,
    Complexity.COMPLEX: 5_000,
    Complexity.DEEP: 8_000,
}
HISTORY_MULTIPLIER = 1.50  # +50% when the message references history
LONG_CONVERSATION_MULTIPLIER = 1.25  # +25% past turn 10
LONG_CONVERSATION_TURN = 10
SPEED_MULTIPLIER = 0.50  # -50% with "prioritize speed"
CEILING = 10_000  # beyond this, context becomes noise


class Depth(StrEnum):
    """The memory-depth lens: a project-level setting."""

    LIGHT = "light"
    NORMAL = "normal"
    RICH = "rich"


#: Depth → (budget multiplier, threshold shift).
DEPTH_EFFECT: Mapping[Depth, tuple[float, float]] = {
    Depth.LIGHT: (0.7, +0.10),
    Depth.NORMAL: (1.0, 0.0),
    Depth.RICH: (1.3, -0.10),
}


@dataclass(frozen=True)
class Budget:
    """The assigned budget and the steps that produced it (for ``explain``)."""

    tokens: int
    steps: tuple[str, ...]


#: A budget modifier: whether it applies, its factor, and its label in the budget's steps.
_Modifier = tuple[bool, float, str]


def _lenses(prioritize_speed: bool, depth: Depth) -> tuple[_Modifier, _Modifier]:
    """The project's lenses every budget goes through: "prioritize speed" and depth."""
    return (
        (prioritize_speed, SPEED_MULTIPLIER, "prioritize speed -50%"),
        (depth is not Depth.NORMAL, DEPTH_EFFECT[depth][0], f"depth {depth.value}"),
    )


def _scaled(value: float, steps: list[str], modifiers: Iterable[_Modifier]) -> float:
    """``value`` times each applying modifier's factor, each step recorded in ``steps``."""
    for applies, factor, label in modifiers:
        if applies:
            value *= factor
            steps.append(f"{label}: ×{factor:g} → {round(value)}")
    return value


def assign_budget(
    classification: Classification,
    *,
    depth: Depth = Depth.NORMAL,
    prioritize_speed: bool = False,
) -> Budget:
    """The memory token budget for a classified message.

    ``base × 1.5 (history) × 1.25 (turn > 10) × 0.5 (speed) × depth``, capped at 10,000.
    Trivial messages get 0 whatever the modifiers: they skip memory entirely.
    """
    base = BASE_BUDGET[classification.complexity]
    steps = [f"{classification.complexity.value}: {base}"]
    if base == 0:
        return Budget(0, tuple(steps))
    value = _scaled(float(base), steps, (
        (classification.references_history, HISTORY_MULTIPLIER, "history reference +50%"),
        (classification.turn > LONG_CONVERSATION_TURN, LONG_CONVERSATION_MULTIPLIER,
         "turn > 10 +25%"),
        *_lenses(prioritize_speed, depth),
    ))  # fmt: skip
    if value > CEILING:
        steps.append(f"ceiling: {CEILING}")
        value = CEILING
    return Budget(round(value), tuple(steps))


def with_conversation_evidence(budget: Budget, *, cap: int | None = None) -> Budget:
    """``budget`` raised by the history multiplier (+50%) when the message did not say it
    refers to history but its best evidence is a conversation transcript (the gate's best
    candidate is a conversation chunk): a question about what someone once said refers to
    history whatever its wording ("When did Caroline go to the support group?"), and a
    transcript is several times wordier than a learning, so the doc's 500 tokens hold about
    six chunks. Capped at ``cap`` (a tier's budget) and at :data:`CEILING`; unchanged when
    that leaves nothing to add."""
    value = min(round(budget.tokens * HISTORY_MULTIPLIER), CEILING)
    if cap is not None:
        value = min(value, cap)
    if value <= budget.tokens:
        return budget
    step = f"conversation evidence (history) +50%: ×{HISTORY_MULTIPLIER:g} → {value}"
    return Budget(value, (*budget.steps, step))


# -- the automatic budget of a question answered from a transcript -----------------------------

#: A transcript question's *lead* is its best candidate's score over the score of the
#: candidate this many places down (the 5th best): how clearly one candidate leads.
LEAD_RANK = 5
#: The lead at which a transcript question gets the history budget (simple 500 × 1.5 =
#: 750 tokens); a lead half as wide doubles it. Tuned on LoCoMo's half A (the largest value
#: whose mean spend stays at most 750 tokens there; docs/decisions.md), reported on half B.
TYPICAL_LEAD = 0.15


def lead_of(scores: Sequence[float]) -> float:
    """How clearly the best of ``scores`` leads: the best minus the :data:`LEAD_RANK`-th
    best (the last one when there are fewer); 0 for fewer than two scores."""
    if len(scores) < 2:
        return 0.0 if not scores else float("inf")
    top = heapq.nlargest(LEAD_RANK, scores)
    return top[0] - top[-1]


def transcript_budget(
    scores: Sequence[float],
    *,
    depth: Depth = Depth.NORMAL,
    prioritize_speed: bool = False,
    cap: int | None = None,
) -> Budget:
    """The automatic budget of a question whose best evidence is a conversation transcript,
    from how clearly its best candidate leads (``scores``: the ranked candidates' scores).

    The history budget (``500 × 1.5``) at the typical lead (:data:`TYPICAL_LEAD`), scaled
    by ``typical / lead`` and kept between the simple and the moderate budgets (500 and
    2,000): when one candidate clearly leads the answer is in the first few chunks and more
    would be noise; when the scores are flat, any of many chunks may hold it (a list, two
    facts joined, a vague question), so the budget buys more of them. The classification's
    complexity is not used: it measures the work a request asks, not how much of a
    transcript holds an answer (LoCoMo half A: "moderate" and "complex" questions needed
    no more tokens than "simple" ones, yet got 3,000 and 7,500). ``depth`` and
    ``prioritize_speed`` scale it as they scale every budget; capped at ``cap`` (a tier's
    budget) and :data:`CEILING`."""
    low, high = BASE_BUDGET[Complexity.SIMPLE], BASE_BUDGET[Complexity.MODERATE]
    history = BASE_BUDGET[Complexity.SIMPLE] * HISTORY_MULTIPLIER
    lead = lead_of(scores)
    value = high if lead <= 0 else history * TYPICAL_LEAD / lead
    value = min(high, max(low, value))
    steps = [f"transcript evidence, lead {lead:.3f}: {history:g} × {TYPICAL_LEAD:g}/lead "
             f"in [{low}, {high}] → {round(value)}"]  # fmt: skip
    value = _scaled(value, steps, _lenses(prioritize_speed, depth))
    limit = min(CEILING, cap) if cap is not None else CEILING
    if value > limit:
        steps.append(f"capped at {limit}")
        value = limit
    return Budget(round(value), tuple(steps))
