"""Selection: the spec's token budget enforcement (2.6) and relevance gating's threshold
greedy fill (step 4). Procedural memories always lead."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from engrain.model import Kind, ScoredMemory
from engrain.recall.classify import Intent


def enforce_budget(
    first: Sequence[ScoredMemory],
    ranked: Sequence[ScoredMemory],
    *,
    token_budget: int,
    top_k: int,
) -> tuple[list[ScoredMemory], int]:
    """Walk ``first`` (procedural memories) then ``ranked``, adding each memory whose
    tokens still fit in ``token_budget``, until ``top_k`` are selected. Returns the
    selection and the tokens it uses. A memory already taken is not taken twice."""
    selected: list[ScoredMemory] = []
    seen: set[str] = set()
    used = 0
    for item in (*first, *ranked):
        if len(selected) >= top_k:
            break
        if item.memory.id in seen:
            continue
        if used + item.tokens <= token_budget:
            selected.append(item)
            seen.add(item.memory.id)
            used += item.tokens
    return selected, used


# -- relevance gating (step 4): thresholds, pins, greedy fill -------------------------------

#: Intent → (general threshold, invariant threshold).
THRESHOLDS: Mapping[Intent, tuple[float, float]] = {
    Intent.DEBUGGING: (0.25, 0.15),
    Intent.CONTINUATION: (0.30, 0.18),
    Intent.QUESTION: (0.35, 0.20),
    Intent.ANALYSIS: (0.35, 0.20),
    Intent.DISCUSSION: (0.35, 0.20),
    Intent.GENERATION: (0.40, 0.20),
    Intent.GREETING: (0.50, 0.30),
}


def threshold_for(kind: Kind, intent: Intent, shift: float = 0.0) -> float:
    """The minimum score for an item of ``kind`` under ``intent``, shifted by memory depth
    (+0.10 light, -0.10 rich), never below 0."""
    general, invariant = THRESHOLDS[intent]
    base = invariant if kind is Kind.INVARIANT else general
    return max(0.0, base + shift)


@dataclass(frozen=True)
class Decision:
    """Why a candidate was or was not injected (for ``explain``)."""

    item: ScoredMemory
    selected: bool
    reason: str


def select_gated(
    first: Iterable[ScoredMemory],
    ranked: Sequence[ScoredMemory],
    *,
    token_budget: int,
    intent: Intent,
    threshold_shift: float = 0.0,
    apply_threshold: bool = True,
    explain: bool = True,
) -> tuple[list[ScoredMemory], int, list[Decision]]:
    """Greedy fill in score order: procedural memories (``first``) lead; then each
    candidate at or above its intent's threshold (pinned items bypass it) is added while
    its tokens fit. Returns the selection, tokens used, and (with ``explain``) a decision per
    candidate; without it the walk stops as soon as the budget is full, and ``first`` may be
    a lazy iterable, built only as far as the walk goes."""
    selected: list[ScoredMemory] = []
    decisions: list[Decision] = []
    seen: set[str] = set()
    used = 0
    for leading, items in ((True, first), (False, ranked)):
        for item in items:
            if not explain and used >= token_budget:
                return selected, used, decisions
            memory = item.memory
            if memory.id in seen:
                continue
            seen.add(memory.id)
            if not leading:
                limit = threshold_for(memory.kind, intent, threshold_shift)
                if apply_threshold and not memory.pinned and item.score < limit:
                    if explain:
                        decisions.append(
                            Decision(item, False, f"score {item.score:.3f} below {limit:.2f}")
                        )
                    continue
            if used + item.tokens > token_budget:
                if explain:
                    decisions.append(Decision(
                        item, False, f"{item.tokens} tokens do not fit ({used}/{token_budget})"
                    ))  # fmt: skip
                continue
            selected.append(item)
            used += item.tokens
            if explain:
                why = "pinned" if memory.pinned else "procedural" if leading else "selected"
                decisions.append(Decision(item, True, why))
    return selected, used, decisions
