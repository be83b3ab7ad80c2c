"""A preview of ``context()``: the block a message would get and why, without any write.

``context()`` counts a use of every memory it injects and records the context for
feedback; a person trying messages in the inspector must change neither. A preview takes
the same decisions from the same inputs (the tier the model calls for, a compiled tier if
it is fresh, else the gating pipeline within that tier's budget) and returns them with the
pipeline's full explanation (:class:`~engrain.recall.results.Gated`, every candidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engrain.model import Memory
from engrain.recall.classify import Complexity
from engrain.recall.results import Gated
from engrain.tiers import TIER_BUDGETS, Tier, TierSet
from engrain.tiers.cache import wrap
from engrain.tokens import count_tokens


@dataclass(frozen=True)
class Preview:
    """What ``context()`` would return: the ``tier`` served (1 DNA summary, 2 field guide,
    3 gated), whether tier 3 would stand in for a tier not compiled yet (``fallback``),
    the exact ``text`` and its ``tokens``, the ``memories`` it holds, the token ``budget``
    it was assembled within, and the gating pipeline's explanation (``gated``: the
    classification, the budget's derivation, every candidate's score and verdict)."""

    tier: int
    fallback: bool
    text: str
    tokens: int
    budget: int
    memories: list[Memory]
    gated: Gated

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"tier": self.tier, "fallback": self.fallback, "text": self.text,
                "tokens": self.tokens, "budget": self.budget,
                "memory_ids": [m.id for m in self.memories],
                "gated": self.gated.to_dict()}  # fmt: skip


def served(tier: Tier, gated: Gated, compiled: TierSet | None) -> Preview:
    """The preview of a message whose model calls for ``tier``: ``gated`` is the pipeline's
    explanation (within the tier's budget for tiers 1 and 2), ``compiled`` the user's
    compiled tiers if they are fresh. As in ``context()``, a trivial message gets nothing
    in tiers 1 and 2; a fresh compiled tier answers as it is; a stale or missing one is
    replaced by tier 3 within its budget."""
    if tier is Tier.DOSSIER:
        return Preview(int(tier), False, gated.text, gated.tokens_used, gated.budget.tokens,
                       gated.memories, gated)  # fmt: skip
    if gated.classification.complexity is Complexity.TRIVIAL:
        return Preview(int(tier), False, "", 0, TIER_BUDGETS[tier], [], gated)
    if compiled is not None:
        part = compiled.tiers[tier]
        block = wrap(part.text)
        memories = [compiled.memories[i] for i in part.memory_ids if i in compiled.memories]
        return Preview(int(tier), False, block, count_tokens(block) if block else 0,
                       TIER_BUDGETS[tier], memories, gated)  # fmt: skip
    return Preview(int(tier), True, gated.text, gated.tokens_used, gated.budget.tokens,
                   gated.memories, gated)  # fmt: skip
