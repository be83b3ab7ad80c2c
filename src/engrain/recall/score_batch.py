"""The gated profile's totals for a whole pool at once: ``score_gated(...).total`` exactly,
without the components and factors ``explain()`` shows.

``context()`` needs only each candidate's total, and at 10,000 memories a complex message
scores 300 or more candidates: building two dicts and a :class:`~engrain.recall.score.Scored`
per candidate, and recomputing what depends only on the query and the memory's kind, its
domains or its use count, was most of the scoring stage. Here those are computed once per
call and each total is the same sum, of the same terms, in the same order, as
:func:`~engrain.recall.score.score_gated`'s; every term comes from ``score.py``'s own
functions and constants, which stay the one definition of the formulas. Equality with
``score_gated`` is tested on random memories, relevances and queries
(``tests/test_score_batch.py``).

:func:`gated_scores` gives each total with the relevance selection judges the candidate by
(:func:`~engrain.recall.score.present_relevance`), from the same age: the gate made both per
candidate, each with a call of its own and the second recomputing the age (~390 candidates
a big call at 100,000 memories, docs/scale.md "Session 14").
"""

from __future__ import annotations

from collections.abc import Iterable

from engrain.model import Kind, MemoryFields
from engrain.recall.score import (
    COOCCURRENCE_CAP,
    FOCUS_BONUS,
    USAGE_CAP,
    Query,
    age_days,
    boost_scale,
    decay,
    domain_match,
    present_scale,
    type_boost,
    usage_score,
)


def gated_totals(items: Iterable[tuple[MemoryFields, float, float]], query: Query) -> list[float]:
    """``score_gated(memory, relevance, query.classification, query.weights, query.now,
    cooccurrence=bonus, focus_areas=query.focus_areas).total`` for each ``(memory,
    relevance, bonus)`` of ``items``, in order."""
    return [total for total, _ in gated_scores(items, query)]


def gated_scores(
    items: Iterable[tuple[MemoryFields, float, float]], query: Query
) -> list[tuple[float, float]]:
    """For each ``(memory, relevance, bonus)`` of ``items``, in order: its
    :func:`gated_totals` total and ``present_relevance(memory, relevance, query.now)``."""
    classification, now = query.classification, query.now
    weights = query.weights
    w_semantic, w_recency, w_domain = weights["semantic"], weights["recency"], weights["domain"]
    w_usage = weights["usage"]
    focus = set(query.focus_areas)
    boosts: dict[Kind, float] = {}
    by_domains: dict[tuple[str, ...], tuple[float, float]] = {}
    usages: dict[int, float] = {}
    totals: list[tuple[float, float]] = []
    for memory, relevance, cooccurrence in items:
        kind = memory.kind
        boost = boosts.get(kind)
        if boost is None:
            boost = boosts[kind] = type_boost(kind, classification.intent)
        domains = memory.domains
        terms = by_domains.get(domains)
        if terms is None:
            terms = by_domains[domains] = (
                w_domain * domain_match(classification.domains, domains),
                FOCUS_BONUS if focus and focus & set(domains) else 0.0,
            )
        uses = memory.access_count
        usage = usages.get(uses)
        if usage is None:
            usage = usages[uses] = min(USAGE_CAP, w_usage * usage_score(uses))
        age = age_days(memory.when, now)
        scale = present_scale(kind, age)
        semantic = min(1.0, max(0.0, relevance)) * scale
        # present_relevance: times 1.0 (any float unchanged) for a kind not about the present
        present = relevance * scale
        recency = decay(kind, age)
        parts = (
            w_semantic * semantic,
            w_recency * recency,
            terms[0],
            usage,
            COOCCURRENCE_CAP * min(1.0, max(0.0, cooccurrence)),
            boost * boost_scale(semantic, recency),
            terms[1],
        )
        totals.append((min(1.0, max(0.0, sum(parts))), present))
    return totals
