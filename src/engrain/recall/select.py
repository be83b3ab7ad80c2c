"""Step 5 of recall (spec 2.6): token budget enforcement, procedural memories first."""

from __future__ import annotations

from collections.abc import Sequence

from engrain.model import ScoredMemory


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
