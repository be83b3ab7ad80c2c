"""The gated profile's totals for a whole pool at once: ``score_gated(...).total`` exactly,
without the components and factors ``explain()`` shows.

``context()`` needs only each candidate's total, and a complex message at 100,000 memories
scores 300-400 candidates (a 7,500-token debugging call: docs/scale.md, session 17). Here
what depends only on the query and the memory's kind, its domains or its use count is
computed once per call, each candidate's few fields are read once into columns, and the
arithmetic runs on NumPy columns instead of one Python expression (seven function calls, a
tuple and a ``sum``) per candidate: docs/scale.md, "Session 18 … (h1)".

Every total is the same sum, of the same terms, in the same order, as
:func:`~engrain.recall.score.score_gated`'s, each term by the same IEEE operations, so the
float is the same to the last bit: additions, multiplications and divisions are correctly
rounded in NumPy as in Python; a clamp ``min(1.0, max(0.0, x))`` is written as Python's
(:func:`_at_least`, :func:`_at_most`: the first argument unless the second is strictly
greater or less, so ``-0.0`` and NaN clamp as Python clamps them); the decays
(``0.5 ** x``) are Python's own power, one per candidate, since NumPy's ``power`` may use
other routines (SVML on AVX-512) that differ from the C library's in the last bit; the sum
of the seven terms is sequential, as ``score_gated`` adds them (one at a time, not
Python 3.12's compensated ``sum``). The constants and the
per-kind, per-domain and per-use terms come from ``score.py``'s own functions and tables,
which stay the one definition of the formulas. Equality with ``score_gated`` is tested bit
for bit on random memories, relevances and queries (``tests/test_score_batch.py``).

:func:`gated_columns` gives each total with the relevance selection judges the candidate by
(:func:`~engrain.recall.score.present_relevance`), from the same age (with
``Query.present_use``, never under a note's recency from its last use:
:func:`~engrain.recall.score.use_recency`; with ``Query.stated_span``, by the end the note
states: :func:`~engrain.recall.score.note_span`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engrain.model import Kind, MemoryFields
from engrain.recall.score import (
    BOOST_AGE_FLOOR,
    BOOST_FULL_RELEVANCE,
    COOCCURRENCE_CAP,
    FOCUS_BONUS,
    HALF_LIFE_DAYS,
    PRESENT_HALF_LIFE_DAYS,
    PRESENT_KINDS,
    USAGE_CAP,
    Query,
    age_days,
    domain_match,
    note_span,
    present_scale,
    tag_term,
    type_boost,
    usage_score,
)
from engrain.store.columns import micros
from engrain.store.found import when_micros

Column = npt.NDArray[np.float64]

#: One pool's items: ``(memory, relevance, co-occurrence bonus)``.
Item = tuple[MemoryFields, float, float]


def gated_totals(items: Sequence[Item], query: Query) -> list[float]:
    """``score_gated(memory, relevance, query.classification, query.weights, query.now,
    cooccurrence=bonus, focus_areas=query.focus_areas).total`` for each ``(memory,
    relevance, bonus)`` of ``items``, in order."""
    totals: list[float] = gated_columns(items, query)[0].tolist()
    return totals


def gated_scores(items: Sequence[Item], query: Query) -> list[tuple[float, float]]:
    """For each ``(memory, relevance, bonus)`` of ``items``, in order: its
    :func:`gated_totals` total and ``present_relevance(memory, relevance, query.now)``."""
    totals, present = gated_columns(items, query)
    return list(zip(totals.tolist(), present.tolist(), strict=True))


def gated_columns(items: Sequence[Item], query: Query) -> tuple[Column, Column]:
    """:func:`gated_scores` as two columns, the totals and the present relevances, in the
    order of ``items``."""
    kinds: list[Kind] = [memory.kind for memory, _, _ in items]
    domain, focused, usage, ages = _read(items, query)
    recency = np.array([_decay(HALF_LIFE_DAYS[k], a) for k, a in zip(kinds, ages, strict=True)])
    scale = np.array(_present_scales(items, kinds, ages, query))
    relevance = np.array([r for _, r, _ in items], dtype=np.float64)
    bonus = np.array([b for _, _, b in items], dtype=np.float64)
    semantic = _at_most(1.0, _at_least(0.0, relevance)) * scale
    boosts: dict[Kind, float] = {}
    for kind in kinds:
        if kind not in boosts:
            boosts[kind] = type_boost(kind, query.classification.intent)
    boost = np.array([boosts[k] for k in kinds], dtype=np.float64)
    # score.boost_scale(semantic, recency)
    boosted = (BOOST_AGE_FLOOR + (1.0 - BOOST_AGE_FLOOR) * recency) * _at_most(
        1.0, _at_least(0.0, semantic) / BOOST_FULL_RELEVANCE
    )
    weights = query.weights
    total = weights["semantic"] * semantic + weights["recency"] * recency
    total += np.array(domain, dtype=np.float64)
    total += np.array(usage, dtype=np.float64)
    total += COOCCURRENCE_CAP * _at_most(1.0, _at_least(0.0, bonus))
    total += boost * boosted
    total += np.array(focused, dtype=np.float64)
    if query.named_tag or query.unnamed_tag:  # score_gated's "tag", added last as there
        total += np.array(_tags(items, query), dtype=np.float64)
    return _at_most(1.0, _at_least(0.0, total)), relevance * scale


def _tags(items: Sequence[Item], query: Query) -> list[float]:
    """Each item's ``score.tag_term`` (computed once per distinct tags), 0 for a
    conversation chunk (``score_gated``'s rule)."""
    by_domains: dict[tuple[str, ...], float] = {}
    out = []
    for memory, _, _ in items:
        if memory.provenance.turn_ids:
            out.append(0.0)
            continue
        domains = memory.domains
        term = by_domains.get(domains)
        if term is None:
            term = by_domains[domains] = tag_term(
                domains, query.terms, query.named_tag, query.unnamed_tag, query.names_tags
            )
        out.append(term)
    return out


def _read(
    items: Sequence[Item], query: Query
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Each item's domain term, focus bonus, usage term and age in days, read in one pass
    (the terms computed once per distinct domains and use count)."""
    classification, now, weights = query.classification, query.now, query.weights
    focus = set(query.focus_areas)
    by_domains: dict[tuple[str, ...], tuple[float, float]] = {}
    usages: dict[int, float] = {}
    n = len(items)
    ages: list[float] = []
    # a row found gives its time as the column's microseconds (no datetime made): its age
    # is then the same float, as timedelta.total_seconds() is the microseconds / 10**6
    aware = now.tzinfo is not None
    whens = when_micros([memory for memory, _, _ in items]) if aware else [None] * n
    now_us = micros(now)
    domain, focused, usage = [0.0] * n, [0.0] * n, [0.0] * n
    for i, (memory, _, _) in enumerate(items):
        domains = memory.domains
        terms = by_domains.get(domains)
        if terms is None:
            terms = by_domains[domains] = (
                weights["domain"] * domain_match(classification.domains, domains),
                FOCUS_BONUS if focus and focus & set(domains) else 0.0,
            )
        domain[i], focused[i] = terms
        uses = memory.access_count
        used = usages.get(uses)
        if used is None:
            used = usages[uses] = min(USAGE_CAP, weights["usage"] * usage_score(uses))
        usage[i] = used
        when = whens[i]
        if when is None:
            days = (now - memory.when).total_seconds() / 86_400.0  # score.age_days
        else:
            days = (now_us - when) / 1_000_000 / 86_400.0
        ages.append(days if days > 0.0 else 0.0)
    return domain, focused, usage, ages


def _present_scales(
    items: Sequence[Item], kinds: Sequence[Kind], ages: Sequence[float], query: Query
) -> list[float]:
    """Each item's ``score.present_scale``: a note about the present by its age (with
    ``present_use`` never under its recency from its last use, with ``stated_span`` by the
    end it states), 1.0 for any other kind."""
    now = query.now
    scales = [0.5 ** (a / PRESENT_HALF_LIFE_DAYS) if k in PRESENT_KINDS else 1.0
              for k, a in zip(kinds, ages, strict=True)]  # fmt: skip
    if query.present_use:  # score.present_scale: never under the recency from the last use
        for i in [i for i, k in enumerate(kinds) if k in PRESENT_KINDS]:
            used = age_days(items[i][0].last_accessed_at, now)
            if used is not None:
                scales[i] = max(scales[i], _decay(HALF_LIFE_DAYS[kinds[i]], used))
    if query.stated_span:  # score.present_scale: the end a note states decides
        for i in [i for i, k in enumerate(kinds) if k in PRESENT_KINDS]:
            span = note_span(items[i][0], True)
            if span is not None:
                scales[i] = present_scale(kinds[i], ages[i], None, span, now)
    return scales


def _decay(half_life: float | None, age: float) -> float:
    """``score.decay`` of a kind of ``half_life`` at ``age`` days (Python's power)."""
    return 1.0 if half_life is None else 0.5 ** (age / half_life)


def _at_least(floor: float, values: Column) -> Column:
    """``max(floor, v)`` for each ``v``, as Python gives it (``floor`` unless ``v`` is
    greater: ``-0.0`` against ``0.0`` and NaN give ``floor``)."""
    return np.where(values > floor, values, floor)


def _at_most(ceiling: float, values: Column) -> Column:
    """``min(ceiling, v)`` for each ``v``, as Python gives it (``ceiling`` unless ``v`` is
    less)."""
    return np.where(values < ceiling, values, ceiling)
