"""What recall produces: scored memories, the spec's ``RecallResult``, the gating pipeline's
decisions (:class:`Gated`, :class:`Decision`) and the :class:`Context` a caller receives.

These types sit below the stages that produce them (``select``, ``gate``, ``spec``) and
above the data model, so imports point one way: ``model`` → ``results`` → stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engrain.model import Memory
from engrain.recall.budget import Budget
from engrain.recall.classify import Classification


@dataclass(frozen=True)
class ScoredMemory:
    """A memory with the score recall ranked it by and its token count."""

    memory: Memory
    score: float
    similarity: float
    tokens: int


@dataclass(frozen=True)
class RecallResult:
    """The spec's ``RecallResult(memories, total_tokens, budget_used)``, plus the scores."""

    memories: list[Memory]
    total_tokens: int
    budget_used: float
    scored: list[ScoredMemory] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """Why a candidate was or was not injected (for ``explain``)."""

    item: ScoredMemory
    selected: bool
    reason: str


@dataclass(frozen=True)
class Gated:
    """What the pipeline decided for one message. ``tokens_used`` is the rendered block's
    size, wrapper included; ``ranked`` holds every candidate best first when explaining
    (``explain()``), only the selection otherwise (``context()`` does not cost the lines
    it does not consider); ``components`` (explaining only) each candidate's score terms
    and the factors behind them: decay, boost_table, boost_scale, cosine, lexical,
    lexical_no_evidence (the lexical side dropped: the shared terms are no evidence of a
    topic, ``recall.relevance``) and calibrated_relevance."""

    classification: Classification
    budget: Budget
    weights: Mapping[str, float]
    selected: list[ScoredMemory]
    tokens_used: int
    text: str
    decisions: list[Decision] = field(default_factory=list)
    ranked: list[ScoredMemory] = field(default_factory=list)
    components: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    timings_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def memories(self) -> list[Memory]:
        """The injected memories, in rendering order."""
        return [s.memory for s in self.selected]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready explanation: classification, budget derivation, weights, and every
        candidate's score components with its verdict."""
        c = self.classification
        return {
            "classification": {
                "complexity": c.complexity.value, "intent": c.intent.value,
                "domains": list(c.domains), "turn": c.turn, "has_code": c.has_code,
                "references_history": c.references_history, "signals": list(c.signals),
            },
            "budget": {"tokens": self.budget.tokens, "steps": list(self.budget.steps)},
            "weights": dict(self.weights),
            "tokens_used": self.tokens_used,
            "candidates": [
                {
                    "id": d.item.memory.id, "content": d.item.memory.content,
                    "kind": d.item.memory.kind.value, "score": round(d.item.score, 6),
                    "similarity": round(d.item.similarity, 6), "tokens": d.item.tokens,
                    "components": {k: round(v, 6) for k, v in
                                   self.components.get(d.item.memory.id, {}).items()},
                    "selected": d.selected, "reason": d.reason,
                }
                for d in self.decisions
            ],
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }  # fmt: skip


@dataclass(frozen=True)
class Context:
    """A rendered memory block ready for a prompt, with what produced it.

    ``gated`` holds the relevance-gating decisions (classification, budget, per-candidate
    scores and reasons); ``recall`` the selection in the spec's RecallResult shape. ``tier``
    is the tier served (1 DNA summary, 2 field guide, 3 gated pipeline); ``fallback`` is
    true when tier 1 or 2 was asked for but not compiled yet, so tier 3 answered within
    the asked tier's budget while the tiers compile in the background."""

    id: str
    text: str
    recall: RecallResult
    tokens: int
    elapsed_ms: float
    gated: Gated | None = None
    tier: int = 3
    fallback: bool = False

    @property
    def context_id(self) -> str:
        """:attr:`id` by the name the HTTP API, MCP and ``engrain context --json`` give it:
        what :meth:`~engrain.Engine.feedback` takes as ``context_id``."""
        return self.id

    @property
    def memories(self) -> list[Memory]:
        """The memories the block holds, in the order rendered."""
        return self.recall.memories
