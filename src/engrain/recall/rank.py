"""Score: every candidate of the pool scored once by the profile's scorer.

:func:`rank` takes the :class:`~engrain.recall.stages.Call` and its
:class:`~engrain.recall.stages.Pool` and gives the :class:`~engrain.recall.stages.Ranking`:
the candidates best first (with ``explain`` their components), the conflict partners of
the ranked (read here, before selection), conversation chunks cut to their excerpts and the
asked speakers' lines, and the budget set by how clearly the best leads. Per-call state
only: the lists and dicts it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engrain.corrections import conflicts_of
from engrain.feedback import ANCHORS, Pairs, cooccurrence_bonus
from engrain.recall.budget import Budget, transcript_budget
from engrain.recall.excerpt import with_excerpts
from engrain.recall.options import GateOptions
from engrain.recall.pool import chunk_led
from engrain.recall.relevance import Candidate
from engrain.recall.score import STATIC_TOP, Profile, Query, Scored, present_relevance, scorer
from engrain.recall.score_batch import gated_columns
from engrain.recall.select import Ranked
from engrain.recall.speakers import with_speaker_lines
from engrain.recall.stages import NO_MARKS, Call, Marks, Pool, Ranking
from engrain.recall.tags import message_terms, names_a_tag
from engrain.store.base import Store


def rank(call: Call, pool: Pool) -> Ranking:
    """Every candidate scored once (:func:`_score`), the conflict partners of the ranked
    read (:func:`_partners`), conversation chunks cut to their excerpts and the asked
    speakers' lines, and the budget set by how clearly the best leads (:func:`_lead_budget`)."""
    o, message = call.options, call.message
    query = _query(call, pool)
    ranked, components = _score(pool.candidates, o, query, call.cooccurrence,
                                explain=call.explain, marks=pool.marks)  # fmt: skip
    partners = _partners(call.store, call.user_id, ranked)
    ranked = with_excerpts(ranked, message, o.excerpt, pool.line_vectors, pool.vector)
    ranked = with_speaker_lines(ranked, message, o.speaker_lines, short_answer=o.short_answer)
    budget, by_lead = _lead_budget(call, pool, ranked)
    call.clock.lap("score")
    return Ranking(pool, ranked, components, partners, budget, by_lead)


def _query(call: Call, pool: Pool) -> Query:
    """What the scorer knows of the message; with the tag term on
    (``GateOptions.named_tag`` / ``unnamed_tag``) its terms and whether it names any
    written candidate's tag (``recall.tags``; a conversation chunk's are not written)."""
    o = call.options
    query = Query(pool.classification, pool.weights, call.now, o.focus_areas, o.present_use,
                  o.stated_span)  # fmt: skip
    if not (o.named_tag or o.unnamed_tag):
        return query
    terms = message_terms(call.message)
    tags = {tag for c in pool.candidates if not c.memory.provenance.turn_ids
            for tag in c.memory.domains}  # fmt: skip
    return replace(query, named_tag=o.named_tag, unnamed_tag=o.unnamed_tag, terms=terms,
                   names_tags=names_a_tag(sorted(tags), terms))  # fmt: skip


def _score(
    pool: Sequence[Candidate],
    options: GateOptions,
    query: Query,
    cooccurrence: Pairs | None,
    *,
    explain: bool,
    marks: Marks = NO_MARKS,
) -> tuple[list[Ranked], dict[str, dict[str, float]]]:
    """Every candidate scored once by the profile's scorer, best first (the static profile
    keeps its top 10), with (``explain``) each one's components and the factors behind
    them and what the pool's rules ``marks``ed (:func:`_components`).
    The learned co-occurrence bonus is with the most relevant candidates (the pool
    comes ordered by relevance), so one pass scores everything. Without ``explain`` the
    gated profile's totals come from :func:`~engrain.recall.score_batch.gated_columns`
    (the same numbers, without the components nobody reads) with each one's present
    relevance (:func:`_ranked`'s, from the same age)."""
    bonuses = _bonuses(pool, cooccurrence)
    if not explain and options.profile is Profile.GATED:  # the totals alone, in one batch
        return _batch_ranked(pool, bonuses, query), {}
    score = scorer(options.profile, query)
    scored = [(c, score(c.memory, c.relevance, b)) for c, b in zip(pool, bonuses, strict=True)]
    scored.sort(key=lambda pair: pair[1].total, reverse=True)
    if options.profile is Profile.STATIC:
        scored = scored[:STATIC_TOP]
    ranked = [_ranked(c, s.total, query) for c, s in scored]
    return ranked, {c.id: _components(c, s, marks) for c, s in scored} if explain else {}


def _bonuses(pool: Sequence[Candidate], cooccurrence: Pairs | None) -> list[float]:
    """Each candidate's learned co-occurrence bonus with the pool's most relevant."""
    if not cooccurrence:  # asked once: the pairs are a mapping read when first looked at
        return [0.0] * len(pool)
    anchors = [c.id for c in pool[:ANCHORS]]
    return [cooccurrence_bonus(cooccurrence, c.id, anchors) for c in pool]


def _batch_ranked(
    pool: Sequence[Candidate], bonuses: Sequence[float], query: Query
) -> list[Ranked]:
    """The gated profile's ranking from its totals alone, computed in one batch."""
    items = [(c.memory, c.relevance, b) for c, b in zip(pool, bonuses, strict=True)]
    totals, present = gated_columns(items, query)
    # best first; equal totals keep the pool's order, as sorted(reverse=True) keeps it
    best = np.argsort(-totals, kind="stable").tolist()
    order = zip(best, totals[best].tolist(), present[best].tolist(), strict=True)
    return [Ranked(pool[i].memory, total, pool[i].similarity, relevance)
            for i, total, relevance in order]  # fmt: skip


def _components(c: Candidate, s: Scored, marks: Marks) -> dict[str, float]:
    """What ``explain()`` shows of a candidate's score: its components and factors, its
    cosine, lexical and calibrated relevance, and what the pool's rules marked
    (``area_convention`` 1.0 for a convention raised by ``recall.area``, ``pointed`` the
    relevance a clear match lent a memory, ``recall.pointed``, ``work`` the number of
    kinds of work asked that a preference governs and ``other_work`` 1.0 for one that
    governs only work not asked, ``recall.work``, ``language`` 1.0 for a preference
    about the language of a request for code, ``recall.language``, and ``best_sentence``
    the cosine of a split learning's best sentence or step, ``recall.sentences``)."""
    m = marks
    return {**s.components, **s.factors, "cosine": c.similarity, "lexical": c.lexical,
            "calibrated_relevance": c.relevance,
            **({"lexical_no_evidence": c.no_evidence} if c.no_evidence else {}),
            **({"area_convention": 1.0} if c.id in m.raised else {}),
            **({"pointed": m.pointed[c.id][1]} if c.id in m.pointed else {}),
            **({"work": float(len(m.works[c.id]))} if c.id in m.works else {}),
            **({"other_work": 1.0} if c.id in m.other_work else {}),
            **({"language": 1.0} if c.id in m.spoken else {}),
            **({"best_sentence": m.sentences[c.id]} if c.id in m.sentences else {})}  # fmt: skip


def _lead_budget(call: Call, pool: Pool, ranked: Sequence[Ranked]) -> tuple[Budget, bool]:
    """The automatic budget of a question whose most relevant candidate is a conversation
    chunk, from how clearly its best-scored candidate leads
    (:func:`~engrain.recall.budget.transcript_budget`), and ``True``: that budget is filled
    in score order, like an explicit one, without the intent thresholds (they were set for
    typed learnings' scores; a transcript's budget is sized by its evidence instead).
    An explicit budget, ``lead_budget`` off, ``thresholds="always"`` or a pool led by
    anything else: the pool's budget as it is and ``False``."""
    o, budget = call.options, pool.budget
    if (
        call.token_budget is not None
        or not o.lead_budget
        or o.thresholds == "always"
        or not ranked
        or not chunk_led(pool.candidates)
    ):
        return budget, False
    led = transcript_budget([r.score for r in ranked], depth=o.depth,
                            prioritize_speed=o.prioritize_speed, cap=call.max_budget)  # fmt: skip
    return Budget(led.tokens, (f"rules: {budget.tokens}, set aside", *led.steps)), True


def _ranked(c: Candidate, score: float, query: Query) -> Ranked:
    """A scored candidate for selection, its relevance the one its score saw
    (:func:`~engrain.recall.score.present_relevance`: a stale context's is scaled down), so
    pins, preferences and the fill order judge what the score judged."""
    relevance = present_relevance(c.memory, c.relevance, query.now, by_use=query.present_use,
                                  by_span=query.stated_span)  # fmt: skip
    return Ranked(c.memory, score, c.similarity, relevance)


def _partners(store: Store, user_id: str, ranked: Sequence[Ranked]) -> dict[str, list[Ranked]]:
    """For each ranked memory flagged as contradicting others (``corrections.py``), those
    others, so selection can inject them beside it: read here, before selection, so
    nothing reads the store after it."""
    wanted = {r.memory.id: conflicts_of(r.memory) for r in ranked}
    wanted = {mid: ids for mid, ids in wanted.items() if ids}
    if not wanted:
        return {}
    known = {r.memory.id: r for r in ranked}
    missing = [i for ids in wanted.values() for i in ids if i not in known]
    for memory in store.get(user_id, list(dict.fromkeys(missing))) if missing else []:
        if not memory.muted and memory.superseded_by is None:
            known[memory.id] = Ranked(memory, 0.0, 0.0, 0.0)
    return {mid: [known[i] for i in ids if i in known] for mid, ids in wanted.items()}
