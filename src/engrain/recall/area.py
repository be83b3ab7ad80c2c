"""The area of a request (relevance gating, between candidates and scoring).

A request to write code needs the conventions of the part of the project it touches: how
endpoints are laid out, how tests build their data, how metrics are named. Those memories
rarely share words or meaning with the request ("Let customers download a year of invoices
as a zip" never says "endpoint"), so embeddings and BM25 rank them near zero. The memories
that do match the request name its area: the domains of the best matches ("api",
"payments") are the part of the project being changed. For a generation request, every
convention of that area — its patterns, golden paths, preferences and corrections (a
correction says how something is done now, replacing how it was done) — is raised to the
relevance of a memory "clearly about this" (:data:`CONVENTION_RELEVANCE`); nothing else
changes. When nothing matches the request clearly (no best match, so no area from the
matches), the parts of the project the request names itself are its area: a domain the
user gave memories ("payments", "plugins") said in the message ("lose a payment if a
worker dies", "write a plugin that …") places it as clearly as a clear match would. An
analysis ("explain why some customers get charged three times") asks how or why a part
of the project behaves as it does, and its conventions are how it behaves (the Stripe
client's idempotency keys and retries), so it gets its area too. A question asking
how to do something ("what's the safe way to add an index to a 40M-row table?") asks for
the project's procedure, so it gets its area's golden paths ("Adding a migration: …"). No
other request is affected: a question about a fact wants its one fact, a bug report its
symptoms' matches, and a discussion or a follow-up gained nothing from an area on the
evaluation's tuning half.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from engrain.model import Kind
from engrain.recall.classify import Classification, Intent
from engrain.recall.relevance import Candidate

#: A candidate at least this close to the request's best match names the request's area
#: (relevance is calibrated so the best match of a request that has one is 1.0).
AREA_RELEVANCE = 0.9
#: The relevance an area's convention is raised to: the boost's "clearly about this" level
#: (``score.BOOST_FULL_RELEVANCE``), so the convention competes as a relevant memory does.
CONVENTION_RELEVANCE = 0.5
#: How the project is done: the kinds a change must follow. A correction is one: it says how
#: something is done now, replacing the way it was done ("sentry-expo is deprecated: use
#: @sentry/react-native"), so a request in its area must follow it as it follows a pattern.
CONVENTION_KINDS = frozenset({Kind.PATTERN, Kind.GOLDEN_PATH, Kind.PREFERENCE, Kind.CORRECTION})
#: The intents that change the project or explain how a part of it behaves.
AREA_INTENTS = frozenset({Intent.GENERATION, Intent.ANALYSIS})
#: The signals of a question asking how to do something (``classify``): it asks for the
#: project's procedure, so it gets the golden paths of its area.
HOW_TO_SIGNALS = frozenset({"how-to", "procedure"})


def area_of(pool: Sequence[Candidate]) -> tuple[str, ...]:
    """The domains of the candidates within :data:`AREA_RELEVANCE` of the best match, in
    order of first appearance; empty when nothing matches clearly."""
    found: dict[str, None] = {}
    for candidate in pool:
        if candidate.relevance >= AREA_RELEVANCE:
            found.update(dict.fromkeys(candidate.memory.domains))
    return tuple(found)


def named_area(pool: Sequence[Candidate], classification: Classification) -> tuple[str, ...]:
    """The message's domains (``classification.domains``, in order) that a candidate's
    memory carries: the parts of the project the message names itself ("write a plugin
    that …" names ``plugins``), its area when nothing matches it clearly."""
    carried = {d for candidate in pool for d in candidate.memory.domains}
    return tuple(d for d in dict.fromkeys(classification.domains) if d in carried)


def area_kinds(classification: Classification) -> frozenset[Kind]:
    """The kinds of the request's area raised to :data:`CONVENTION_RELEVANCE`: every
    convention for a generation or an analysis, the golden paths for a question asking how
    to do something (a procedure), none otherwise."""
    if classification.intent in AREA_INTENTS:
        return CONVENTION_KINDS
    if classification.intent is Intent.QUESTION and HOW_TO_SIGNALS.intersection(
        classification.signals
    ):
        return frozenset({Kind.GOLDEN_PATH})
    return frozenset()


def with_area(
    pool: Sequence[Candidate],
    classification: Classification,
    unconcerned: Collection[str] = frozenset(),
) -> tuple[list[Candidate], tuple[str, ...], frozenset[str]]:
    """``pool`` with the conventions of the request's area raised to
    :data:`CONVENTION_RELEVANCE`, the area, and the ids of the raised candidates. Only a
    request of :data:`AREA_INTENTS` (or a how-to question) has an area; for any other the
    pool comes back unchanged. The area is :func:`area_of` the pool, or when nothing
    matches clearly :func:`named_area`: the project's parts the message names."""
    kinds = area_kinds(classification)
    if not kinds:
        return list(pool), (), frozenset()
    area = area_of(pool) or named_area(pool, classification)
    if not area:
        return list(pool), (), frozenset()
    inside = set(area)
    out: list[Candidate] = []
    raised: set[str] = set()
    for candidate in pool:
        memory = candidate.memory
        if (
            memory.kind in kinds
            and memory.id not in unconcerned
            and candidate.relevance < CONVENTION_RELEVANCE
            and inside.intersection(memory.domains)
        ):
            candidate = replace(candidate, relevance=CONVENTION_RELEVANCE)
            raised.add(memory.id)
        out.append(candidate)
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out, area, frozenset(raised)
