"""Tiered context: pre-compiled memory for small and medium context windows.

``registry`` picks the tier from a model's context window; ``prepare`` promotes, dedups and
decay-filters the items; ``compile`` writes tier 1 (DNA summary) and tier 2 (field guide);
``cache`` stores them per user and project and rebuilds them off-thread when stale.
"""

from engrain.tiers.cache import TierCache, TierSet
from engrain.tiers.compile import CompiledTier, compile_dna, compile_field_guide
from engrain.tiers.prepare import (
    DECAY_FLOOR,
    DEDUP_SIMILARITY,
    PROMOTION_USES,
    canonical,
    eligible,
    promote_high_usage,
)
from engrain.tiers.registry import (
    MODEL_WINDOWS,
    TIER_BUDGETS,
    Tier,
    choose_tier,
    context_window,
    normalise_model,
)

__all__ = [
    "DECAY_FLOOR", "DEDUP_SIMILARITY", "MODEL_WINDOWS", "PROMOTION_USES", "TIER_BUDGETS",
    "CompiledTier", "Tier", "TierCache", "TierSet", "canonical", "choose_tier",
    "compile_dna", "compile_field_guide", "context_window", "eligible", "normalise_model",
    "promote_high_usage",
]  # fmt: skip
