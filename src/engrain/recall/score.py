"""Scoring profiles (relevance gating, step 3). Three profiles, one pipeline (DESIGN.md):

* ``gated`` — the relevance-gating score: intent-weighted semantic similarity, per-type
  recency, domain match, usage, co-occurrence and type boosts, plus focus areas.
* ``composite`` — the Phase 3 formula exactly: 0.40 relevance + 0.25 recency + 0.20
  usefulness + 0.10 confidence + 0.05 access frequency.
* ``static`` — ADR-002's query-free ranking: recency, log(access count + 1), confidence.

Each returns the total and its named components, so ``explain`` can show them; the gate
makes one call per candidate through :func:`scorer`, a mapping from profile to scorer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from engrain.model import Kind, MemoryFields
from engrain.recall.classify import Classification, Intent
from engrain.recall.spans import Span, span_scale, stated_end
from engrain.recall.tags import names_a_tag


class Profile(StrEnum):
    """The scoring profile, a setting."""

    GATED = "gated"
    COMPOSITE = "composite"
    STATIC = "static"


@dataclass(frozen=True)
class Scored:
    """A score, the components it is the sum of, and the factors behind them (shown by
    ``explain``, not added)."""

    total: float
    components: Mapping[str, float]
    factors: Mapping[str, float] = field(default_factory=dict)


def age_days(when: datetime | None, now: datetime) -> float | None:
    """Days from ``when`` to ``now`` (never negative), or ``None`` if unknown."""
    if when is None:
        return None
    return max(0.0, (now - when).total_seconds() / 86_400.0)


# -- gated -----------------------------------------------------------------------------------

#: Per-kind recency half-life in days; ``None`` = never decays. The first five are the
#: tiered-context table; the rest are engrain's choices for ADR-002's kinds (DESIGN.md).
HALF_LIFE_DAYS: Mapping[Kind, float | None] = {
    Kind.INVARIANT: None,
    Kind.DECISION: 365.0,
    Kind.PATTERN: 90.0,
    Kind.GOLDEN_PATH: 30.0,
    Kind.ANTIPATTERN: 14.0,
    Kind.PREFERENCE: 365.0,
    Kind.FACT: 365.0,
    Kind.CORRECTION: 365.0,
    Kind.SUMMARY: 90.0,
    Kind.EVENT: 365.0,
    Kind.CONTEXT: 14.0,
}


def decay(kind: Kind, age: float | None) -> float:
    """``0.5 ** (age / half_life)`` for the kind; 1.0 for invariants and unknown ages."""
    half_life = HALF_LIFE_DAYS[kind]
    if half_life is None or age is None:
        return 1.0
    return float(0.5 ** (age / half_life))


#: The four weighted components, in order.
COMPONENTS = ("semantic", "recency", "domain", "usage")

#: Balanced base weights ("question" uses semantic 0.55, recency 0.10).
BALANCED: Mapping[str, float] = {"semantic": 0.55, "recency": 0.10, "domain": 0.25, "usage": 0.10}
#: Intent → multiplier on the recency weight (debugging +35%, continuation +30%).
INTENT_RECENCY: Mapping[Intent, float] = {Intent.DEBUGGING: 1.35, Intent.CONTINUATION: 1.30}

#: Context-signal weight shifts, applied before clamping and renormalising.
SHIFT_DEEP_CONVERSATION: Mapping[str, float] = {"recency": +0.10, "semantic": -0.10}
SHIFT_CODE: Mapping[str, float] = {"domain": +0.08, "usage": +0.02, "semantic": -0.10}
SHIFT_HISTORY: Mapping[str, float] = {"semantic": +0.10, "recency": -0.05, "domain": -0.05}

DOMAIN_SCALE = 0.2  # domainScore = 0.2 × overlap / max(query domains, item domains)
USAGE_PLATEAU = 20  # uses at which the log curve reaches its cap
USAGE_CAP = 0.15
COOCCURRENCE_CAP = 0.10
FOCUS_BONUS = 0.05

#: Type boosts and the intent multipliers that modify them.
TYPE_BOOST: Mapping[Kind, float] = {
    Kind.INVARIANT: 0.25,
    Kind.GOLDEN_PATH: 0.15,
    Kind.PATTERN: 0.10,
    Kind.DECISION: 0.10,
    Kind.ANTIPATTERN: 0.05,
}
INTENT_TYPE_MULTIPLIER: Mapping[tuple[Intent, Kind], float] = {
    (Intent.DEBUGGING, Kind.GOLDEN_PATH): 1.5,
    (Intent.GENERATION, Kind.GOLDEN_PATH): 1.5,
    (Intent.GENERATION, Kind.PATTERN): 2.0,
    (Intent.ANALYSIS, Kind.DECISION): 2.0,
    (Intent.DEBUGGING, Kind.DECISION): 0.5,
    (Intent.DEBUGGING, Kind.ANTIPATTERN): 2.0,
}


def gated_weights(classification: Classification) -> dict[str, float]:
    """The intent's base weights shifted by conversation depth, code context and history
    references, clamped to [0, 1] and renormalised to sum to 1."""
    weights = dict(BALANCED)
    weights["recency"] *= INTENT_RECENCY.get(classification.intent, 1.0)
    shifts = []
    if classification.deep_conversation:
        shifts.append(SHIFT_DEEP_CONVERSATION)
    if classification.has_code:
        shifts.append(SHIFT_CODE)
    if classification.references_history:
        shifts.append(SHIFT_HISTORY)
    for shift in shifts:
        for name, delta in shift.items():
            weights[name] += delta
    clamped = {name: min(1.0, max(0.0, w)) for name, w in weights.items()}
    total = sum(clamped.values()) or 1.0
    return {name: clamped[name] / total for name in COMPONENTS}


def domain_match(query: tuple[str, ...], item: tuple[str, ...]) -> float:
    """``0.2 × overlap / max(|query domains|, |item domains|)``; 0 when either is empty."""
    if not query or not item:
        return 0.0
    overlap = len(set(query) & set(item))
    return DOMAIN_SCALE * overlap / max(len(query), len(item))


def usage_score(access_count: int) -> float:
    """A log curve of the use count that reaches 1.0 at about 20 uses and stays there."""
    return min(1.0, math.log1p(max(0, access_count)) / math.log1p(USAGE_PLATEAU))


def type_boost(kind: Kind, intent: Intent) -> float:
    """The kind's base boost times the intent's multiplier for it."""
    return TYPE_BOOST.get(kind, 0.0) * INTENT_TYPE_MULTIPLIER.get((intent, kind), 1.0)


#: The relevance at which a memory earns its whole type boost; below it the boost shrinks in
#: proportion. Calibrated relevance reaches 1.0 for a query's best evidence and stays under
#: ~0.2 for an unrelated memory (``recall.relevance``), so 0.5 is "clearly about this".
BOOST_FULL_RELEVANCE = 0.5


#: What a fully decayed memory keeps of its type boost: age halves a boost at most, so a
#: relevant old golden path is still lifted (relevance alone keeps irrelevant ones out).
BOOST_AGE_FLOOR = 0.5


def boost_scale(relevance: float, recency: float) -> float:
    """The share of its type boost a memory earns: ``min(1, relevance / 0.5)`` times
    ``0.5 + 0.5 × decay``. A boost lifts a relevant memory; it cannot carry an irrelevant
    one (relevance near 0) over a threshold, which a flat +0.25 against thresholds of
    0.15-0.40 did, and age takes up to half of it."""
    age = BOOST_AGE_FLOOR + (1.0 - BOOST_AGE_FLOOR) * recency
    return age * min(1.0, max(0.0, relevance) / BOOST_FULL_RELEVANCE)


#: Kinds about the present ("current context"): their relevance halves every
#: ``PRESENT_HALF_LIFE_DAYS`` of age, so "we are halfway through moving off Heroku",
#: written a year ago, no longer passes on its wording (a stale context misleads) while a
#: two-month-old "in beta for 12 customers" still does. The recency term's 14-day
#: half-life is too short for this: it would drop every context older than a few weeks.
PRESENT_KINDS = frozenset({Kind.CONTEXT})
PRESENT_HALF_LIFE_DAYS = 90.0


def use_recency(memory: MemoryFields, now: datetime, by_use: bool = False) -> float | None:
    """With ``by_use`` (``GateOptions.present_use``, off by default), the recency a memory
    about the present has from its last use (its kind's :func:`decay` of the days since);
    ``None`` without ``by_use``, for other kinds, or if it was never used. A use is evidence
    that the note still held when it was used: "Change windows: LRH Sunday 01:00-04:00 …",
    written nine months ago and used two days ago, has 0.91; "Code freeze for 0.12 until 30
    September", last used in September, has nothing."""
    if not by_use or memory.kind not in PRESENT_KINDS:
        return None
    used = age_days(memory.last_accessed_at, now)
    return None if used is None else decay(memory.kind, used)


def note_span(memory: MemoryFields, by_span: bool = False) -> Span | None:
    """With ``by_span`` (``GateOptions.stated_span``), the end a note about the present
    states in its own words (:func:`~engrain.recall.spans.stated_end`, resolved against the
    time it was written); ``None`` without ``by_span``, for other kinds, or if it states none."""
    if not by_span or memory.kind not in PRESENT_KINDS:
        return None
    return stated_end(memory.content, memory.when)


def present_scale(
    kind: Kind,
    age: float | None,
    recency: float | None = None,
    span: Span | None = None,
    now: datetime | None = None,
) -> float:
    """``0.5 ** (age / 90)`` for kinds about the present, else (or age unknown) 1.0; never
    less than ``recency``, the note's recency from its last use (:func:`use_recency`): a
    note used lately is current, a use long ago adds nothing to its written age. A ``span``
    the note states (:func:`note_span`) decides instead, at ``now``: 1.0 until its end,
    then the kind's decay from the end, never above the written scale
    (:func:`~engrain.recall.spans.span_scale`); a use does not keep a note current past the
    end it states."""
    if kind not in PRESENT_KINDS or age is None:
        return 1.0
    written = float(0.5 ** (age / PRESENT_HALF_LIFE_DAYS))
    if span is not None and now is not None:
        return span_scale(span, now, written, HALF_LIFE_DAYS[kind] or PRESENT_HALF_LIFE_DAYS)
    return written if recency is None or recency <= written else recency


def present_relevance(
    memory: MemoryFields,
    relevance: float,
    now: datetime,
    *,
    by_use: bool = False,
    by_span: bool = False,
) -> float:
    """``relevance`` as the gated score sees it: scaled by :func:`present_scale` for a kind
    about the present (a stale context is less relevant than its wording; ``by_use``: a note
    used lately is current; ``by_span``: a note current until the end it states), else as
    given."""
    if memory.kind not in PRESENT_KINDS:
        return relevance
    age = age_days(memory.when, now)
    used, span = use_recency(memory, now, by_use), note_span(memory, by_span)
    return relevance * present_scale(memory.kind, age, used, span, now)


def score_gated(
    memory: MemoryFields,
    relevance: float,
    classification: Classification,
    weights: Mapping[str, float],
    now: datetime,
    *,
    cooccurrence: float = 0.0,
    focus_areas: tuple[str, ...] = (),
    present_use: bool = False,
    stated_span: bool = False,
    named_tag: float = 0.0,
    unnamed_tag: float = 0.0,
    terms: frozenset[str] = frozenset(),
    names_tags: bool = False,
) -> Scored:
    """The relevance-gating score of one memory, clamped to [0, 1]. The type boost is the
    table's, scaled by :func:`boost_scale` (relevance and age bound what it adds); the
    relevance of a kind about the present is scaled by :func:`present_scale` (with
    ``present_use``, never under its recency from its last use: :func:`use_recency`; with
    ``stated_span``, by the end the note states: :func:`note_span`). The ``tag`` term
    (:func:`tag_term`, shown only when ``named_tag`` or ``unnamed_tag`` is set): with
    ``named_tag``, a memory one of whose own tags the message's ``terms`` name gets that
    much more; with ``unnamed_tag``, one whose tags it does not name loses that much when
    the message names some other candidate's tag (``names_tags``). A conversation chunk
    (a memory with turns) gets 0: its tags are the keyword table's reading of its own
    words, which its relevance already reads, not a writer's filing.

    ``relevance`` is the semantic similarity in [0, 1] (the engine passes its hybrid
    relevance, see ``recall.relevance``); ``cooccurrence`` the learned bonus in [0, 1].
    """
    age = age_days(memory.when, now)
    recency = decay(memory.kind, age)
    used = use_recency(memory, now, present_use)
    span = note_span(memory, stated_span)
    present = present_scale(memory.kind, age, used, span, now)
    semantic = min(1.0, max(0.0, relevance)) * present
    domain = domain_match(classification.domains, memory.domains)
    usage = min(USAGE_CAP, weights["usage"] * usage_score(memory.access_count))
    boost = type_boost(memory.kind, classification.intent)
    scale = boost_scale(semantic, recency)
    parts = {
        "semantic": weights["semantic"] * semantic,
        "recency": weights["recency"] * recency,
        "domain": weights["domain"] * domain,
        "usage": usage,
        "cooccurrence": COOCCURRENCE_CAP * min(1.0, max(0.0, cooccurrence)),
        "type_boost": boost * scale,
        "focus": FOCUS_BONUS if focus_areas and set(focus_areas) & set(memory.domains) else 0.0,
    }
    if named_tag or unnamed_tag:  # added last, so totals without it keep their every bit
        chunk = bool(memory.provenance.turn_ids)  # a conversation chunk's tags: not written
        tags = tag_term(memory.domains, terms, named_tag, unnamed_tag, names_tags)
        parts["tag"] = 0.0 if chunk else tags
    factors = {"decay": recency, "boost_table": boost, "boost_scale": scale}
    if memory.kind in PRESENT_KINDS:  # the relevance selection orders by (present_relevance)
        factors["present_scale"] = present
    if used is not None:  # a note about the present judged by its last use too
        factors["use_recency"] = used
    if span is not None:  # ...or by the end it states: days to it (negative: since it)
        factors["span_end_days"] = (span.end - now).total_seconds() / 86_400.0
    # one addition at a time, in order, as ``score_batch``'s columns add (the ``sum`` of
    # Python 3.12+ compensates, which would differ from them in the last bit)
    total = 0.0
    for part in parts.values():
        total += part
    return Scored(min(1.0, max(0.0, total)), parts, factors)


def tag_term(
    tags: tuple[str, ...],
    terms: frozenset[str],
    named: float,
    unnamed: float,
    names_tags: bool,
) -> float:
    """``named`` when the message's ``terms`` name one of ``tags``; ``-unnamed`` when they
    name none of them but the message names some other candidate's tag (``names_tags``: it
    is about something the store's writers filed under another tag); else 0."""
    if names_a_tag(tags, terms):
        return named
    return -unnamed if names_tags else 0.0


# -- composite (Phase 3) -----------------------------------------------------------------------

WEIGHT_RELEVANCE = 0.40
WEIGHT_RECENCY = 0.25
WEIGHT_USEFULNESS = 0.20
WEIGHT_CONFIDENCE = 0.10
WEIGHT_FREQUENCY = 0.05
RECENCY_DECAY_LAMBDA = 0.05  # per day: a 14-day half-life (ln 2 / 14 ≈ 0.0495)
ACCESS_FREQUENCY_CAP = 50.0
UNKNOWN_AGE_RECENCY = 0.5

_WEIGHT_SUM = (
    WEIGHT_RELEVANCE + WEIGHT_RECENCY + WEIGHT_USEFULNESS + WEIGHT_CONFIDENCE + WEIGHT_FREQUENCY
)
if abs(_WEIGHT_SUM - 1.0) >= 1e-9:  # fails import if someone edits one weight alone
    raise ImportError("composite scoring weights must sum to 1.0")


def composite_recency(created_at: datetime | None, now: datetime) -> float:
    """``exp(-0.05 × age_days)``; 0.5 (neutral) when the age is unknown."""
    age = age_days(created_at, now)
    return UNKNOWN_AGE_RECENCY if age is None else math.exp(-RECENCY_DECAY_LAMBDA * age)


def frequency_score(count: int) -> float:
    """``min(count / 50, 1.0)``."""
    return min(max(0, count) / ACCESS_FREQUENCY_CAP, 1.0)


def score_composite(memory: MemoryFields, relevance: float, now: datetime) -> Scored:
    """The Phase 3 composite score, exactly (ADR-0040 in docs/adr)."""
    parts = {
        "relevance": WEIGHT_RELEVANCE * min(1.0, max(0.0, relevance)),
        "recency": WEIGHT_RECENCY * composite_recency(memory.created_at, now),
        "usefulness": WEIGHT_USEFULNESS * memory.usefulness,
        "confidence": WEIGHT_CONFIDENCE * memory.confidence,  # 0.8 when unset (model.py)
        "frequency": WEIGHT_FREQUENCY * frequency_score(memory.access_count),
    }
    return Scored(round(sum(parts.values()), 6), parts)


# -- static (ADR-002) --------------------------------------------------------------------------

STATIC_RECENCY_WEIGHT = 0.5
STATIC_ACCESS_WEIGHT = 0.2
STATIC_CONFIDENCE_WEIGHT = 0.3
STATIC_HALF_LIFE_DAYS = 30.0
STATIC_TOP = 10


def score_static(memory: MemoryFields, now: datetime) -> Scored:
    """ADR-002: ``0.5 × recency + 0.2 × log(access_count + 1) + 0.3 × confidence``, recency
    halving every 30 days since the memory was last written. Query-free."""
    age = age_days(memory.updated_at, now) or 0.0
    parts = {
        "recency": STATIC_RECENCY_WEIGHT * 0.5 ** (age / STATIC_HALF_LIFE_DAYS),
        "access": STATIC_ACCESS_WEIGHT * math.log(memory.access_count + 1),
        "confidence": STATIC_CONFIDENCE_WEIGHT * memory.confidence,
    }
    return Scored(sum(parts.values()), parts)


# -- one scorer per profile ----------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """What a scorer knows about the message: its classification, the weights derived from
    it, the moment of the call and the focus areas."""

    classification: Classification
    weights: Mapping[str, float]
    now: datetime
    focus_areas: tuple[str, ...] = ()
    present_use: bool = False  # a note about the present current by its last use (off)
    stated_span: bool = False  # a note about the present current until the end it states
    named_tag: float = 0.0  # added to a memory one of whose tags the message names (off)
    unnamed_tag: float = 0.0  # ...taken from one whose tags it does not name (off)
    terms: frozenset[str] = frozenset()  # the message's terms (``recall.tags``)
    names_tags: bool = False  # the message names some candidate's tag


#: A profile's score of one memory from its relevance and its co-occurrence bonus.
Scorer = Callable[[MemoryFields, float, float], Scored]


def _gated(query: Query) -> Scorer:
    def score(memory: MemoryFields, relevance: float, cooccurrence: float) -> Scored:
        return score_gated(
            memory, relevance, query.classification, query.weights, query.now,
            cooccurrence=cooccurrence, focus_areas=query.focus_areas,
            present_use=query.present_use, stated_span=query.stated_span,
            named_tag=query.named_tag, unnamed_tag=query.unnamed_tag, terms=query.terms,
            names_tags=query.names_tags,
        )  # fmt: skip

    return score


def _composite(query: Query) -> Scorer:
    def score(memory: MemoryFields, relevance: float, cooccurrence: float) -> Scored:
        return score_composite(memory, relevance, query.now)

    return score


def _static(query: Query) -> Scorer:
    def score(memory: MemoryFields, relevance: float, cooccurrence: float) -> Scored:
        return score_static(memory, query.now)

    return score


SCORERS: Mapping[Profile, Callable[[Query], Scorer]] = {
    Profile.GATED: _gated,
    Profile.COMPOSITE: _composite,
    Profile.STATIC: _static,
}


def scorer(profile: Profile, query: Query) -> Scorer:
    """The scoring function of ``profile`` for ``query``."""
    return SCORERS[profile](query)
