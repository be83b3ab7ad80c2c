"""Relevance gating, end to end: classify → budget → candidates → score → select → assemble.

:func:`gate` is a straight pipeline, one call per stage; it reads the store only before
selection and returns everything it decided (:class:`~engrain.recall.results.Gated`), so
``Engine.context`` has the block and ``Engine.explain`` shows why each candidate was or
was not injected.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from engrain.corrections import conflicts_of
from engrain.errors import ValidationError
from engrain.feedback import ANCHORS, Pairs, cooccurrence_bonus
from engrain.model import Kind, Memory, MemoryFields, MemoryType, Vector
from engrain.recall import candidates as cand
from engrain.recall.area import with_area
from engrain.recall.asked_turns import ASKED_TURNS_WEIGHT, with_asked_turns
from engrain.recall.assemble import (
    Format,
    block_tokens,
    group_of,
    header_tokens,
    render,
    section_of,
    section_tokens,
    wrapper_tokens,
)
from engrain.recall.budget import (
    DEPTH_EFFECT,
    Budget,
    Depth,
    assign_budget,
    transcript_budget,
    with_conversation_evidence,
)
from engrain.recall.chunk_rank import (
    CHUNK_POOL,
    CHUNK_RANK,
    deep_enough,
    transcript_led,
    with_chunk_rank,
)
from engrain.recall.classify import (
    DOMAIN_KEYWORDS,
    Classification,
    Complexity,
    Vocabulary,
    classify,
    domains_of,
)
from engrain.recall.excerpt import EXCERPT, ExcerptRule, store_line_vectors, with_excerpts
from engrain.recall.intent_model import applies, embedder_of, refine
from engrain.recall.language import with_language
from engrain.recall.lines import line_floor, line_tokens, shown_line
from engrain.recall.pointed import with_pointed
from engrain.recall.previous import PREVIOUS_WEIGHT, joined_text, joined_vector, reading
from engrain.recall.relevance import LEXICAL_WEIGHT, Candidate, cosine, gather
from engrain.recall.results import Decision, Gated, ScoredMemory
from engrain.recall.score import (
    STATIC_TOP,
    Profile,
    Query,
    gated_weights,
    present_relevance,
    scorer,
)
from engrain.recall.score_batch import gated_columns
from engrain.recall.second_round import SECOND_ROUND_WEIGHT, with_second_round
from engrain.recall.select import Layout, Ranked, select_gated
from engrain.recall.soft_terms import SOFT_TERMS_DEFAULT, with_soft_terms, word_source
from engrain.recall.speakers import (
    SHORT_ANSWER,
    SPEAKER_LINES,
    SPEAKER_WEIGHT,
    with_speaker_lines,
    with_speakers,
)
from engrain.recall.summaries import SESSION_SUMMARIES, with_summaries
from engrain.recall.turns import TURN_WEIGHT, with_turns
from engrain.recall.unnamed import UNNAMED_WEIGHT, blended, named_speakers, without_names
from engrain.recall.when import TIME_WEIGHT, with_time
from engrain.recall.work import Work, with_work
from engrain.store.base import FoundSearch, MemoryFilter, Store
from engrain.store.found import built_all
from engrain.store.reads import Begin, Reads

__all__ = ["LEARNING_KINDS", "Decision", "GateOptions", "Gated", "gate", "line_tokens"]

if TYPE_CHECKING:  # config.py takes its recall defaults from GateOptions: no runtime import
    from engrain.config import Settings


@dataclass(frozen=True)
class GateOptions:
    """Per-call options of the gating pipeline; :meth:`update` gives a changed copy."""

    profile: Profile = Profile.GATED
    format: Format = Format.TAGGED
    depth: Depth = Depth.NORMAL
    prioritize_speed: bool = False
    focus_areas: tuple[str, ...] = ()
    hybrid: bool = True
    lexical_weight: float = LEXICAL_WEIGHT
    pool: int = 50
    min_importance: float = 0.2
    thresholds: str = "auto"
    fusion: str = "blend"
    compact: bool = True  # conversation chunks rendered without filler (recall.compact)
    group_days: bool = True  # tagged: a day's conversation chunks under one header (assemble)
    speaker_weight: float = SPEAKER_WEIGHT  # who is asked about (recall.speakers)
    speaker_lines: bool = SPEAKER_LINES  # chunks as the asked speakers' lines (speakers)
    short_answer: int = SHORT_ANSWER  # ...a line this short with its question (speakers)
    time_weight: float = TIME_WEIGHT  # when it is asked about (recall.when)
    history_evidence: bool = True  # auto budget +50% when a conversation chunk leads (budget)
    lead_budget: bool = True  # ...or from how clearly the best candidate leads (budget)
    turn_weight: float = TURN_WEIGHT  # a conversation chunk found by its best turn (turns)
    excerpt: ExcerptRule = EXCERPT  # conversation chunks as their best lines (excerpt)
    session_summaries: int = SESSION_SUMMARIES  # summaries joining the pool (summaries)
    chunk_rank: bool = CHUNK_RANK  # conversation chunks re-ranked by features (chunk_rank)
    chunk_pool: int = CHUNK_POOL  # the pool's depth when a conversation chunk leads (chunk_rank)
    soft_terms: float | None = SOFT_TERMS_DEFAULT  # chunks by words near the question's
    unnamed: float = UNNAMED_WEIGHT  # a transcript question searched without names (unnamed)
    second_round: float = SECOND_ROUND_WEIGHT  # chunks ranked again by the best's (off)
    asked_turns: float = ASKED_TURNS_WEIGHT  # the tail by the asked speaker's turns (asked_turns)
    work: bool = True  # preferences for the kind of work asked raised (recall.work)
    fragments: bool = True  # pieces of different numbers are no lexical evidence (relevance)
    names: bool = False  # a name the message writes is no lexical evidence (relevance; off)
    language: bool = False  # preferences about a code request's language raised (off)
    present_use: bool = False  # a note about the present current by its last use (score; off)
    stated_span: bool = False  # ...current until the end its own text states (recall.spans)
    previous_weight: float = PREVIOUS_WEIGHT  # the turn before's share of a follow-up's query
    vocabulary: Vocabulary | None = None  # the user's domains → keywords, for classify

    def __post_init__(self) -> None:
        if not 0.0 <= self.previous_weight <= 1.0:  # more would outvote the message itself
            raise ValidationError(
                f"previous_weight must be within [0, 1], not {self.previous_weight}"
            )

    def update(self, **changes: Any) -> GateOptions:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @classmethod
    def from_settings(cls, settings: Settings) -> GateOptions:
        """The options ``settings`` configure: what ``context()`` uses unless a call passes
        its own. ``thresholds`` and ``fusion`` are per-call only and keep their defaults."""
        return cls(
            profile=settings.profile, format=settings.prompt_format, depth=settings.depth,
            prioritize_speed=settings.prioritize_speed, focus_areas=settings.focus_areas,
            hybrid=settings.hybrid, lexical_weight=settings.lexical_weight,
            pool=settings.candidate_pool, min_importance=settings.recall_min_importance,
            vocabulary=settings.domain_vocabulary or None,
        )  # fmt: skip


#: The typed learnings every call scores, relevant or not (the seed: "every learning in
#: your project memory is scored"); they are few. Facts, events, context and summaries
#: (what conversations produce, by the thousand) come from the candidate pool. A store
#: with more than :data:`LEARNINGS_MAX` learnings has its nearest that many scored.
LEARNINGS_MAX = 100
LEARNING_KINDS = (
    Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.ANTIPATTERN, Kind.GOLDEN_PATH,
    Kind.PREFERENCE, Kind.CORRECTION,
)  # fmt: skip


def gate(
    store: Store,
    embed_query: Callable[[str], Vector],
    message: str,
    user_id: str,
    *,
    options: GateOptions,
    now: datetime,
    turn: int = 0,
    token_budget: int | None = None,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    cooccurrence: Pairs | None = None,
    max_budget: int | None = None,
    top_k: int | None = None,
    explain: bool = True,
    previous: str | None = None,
    reads: Reads | None = None,
) -> Gated:
    """Run the gating pipeline for ``message``: classify → budget → candidates → score →
    select → assemble, one call each. ``token_budget`` overrides the automatic budget and
    ``max_budget`` caps it (a small model's tier budget); a trivial message gets nothing
    either way, without touching the store. ``top_k`` caps the number of memories. Without
    ``explain`` the per-candidate decisions are not recorded and selection stops once the
    budget is full (what ``context()`` needs; ``explain()`` records them all). ``previous``,
    the conversation's turn before ``message``, lends it its subject where it has none of
    its own (``recall.previous``): the message is classified as a turn after the first, and
    the pool of one that leans on the turn before is searched with both turns. ``reads``:
    how the reads that need no query vector run (:class:`~engrain.store.reads.Reads`;
    default: the store's way)."""
    clock = _Clock()
    reads = Reads(store) if reads is None else reads
    if previous is not None:
        turn = max(turn, 1)  # there was a turn before: a follow-up can be read as one
    classification = classify(message, turn=turn, vocabulary=options.vocabulary)
    clock.lap("classify")
    flt = cand.recall_filter(
        min_importance=options.min_importance, memory_types=memory_types, project=project,
        include_compressed=include_compressed,
    )  # fmt: skip
    vector, embedder, started = None, embedder_of(embed_query), None
    if classification.complexity is not Complexity.TRIVIAL and applies(embedder):
        # the reads that need no vector start first (on a store that overlaps them) with the
        # rules' budget; the model rarely changes the pool's size, and then they start again
        rules_budget = _budget(classification, options, token_budget, max_budget)
        if rules_budget.tokens > 0:
            started = _start_reads(store, message, user_id, flt, options, rules_budget, reads)
        vector = embed_query(message)  # the pool's query vector: a second opinion on intent
        clock.lap("embed")
        classification = refine(classification, message, vector, embedder)
        clock.lap("intent model")
    budget = _budget(classification, options, token_budget, max_budget)
    weights = gated_weights(classification)
    clock.lap("budget")
    if budget.tokens == 0 or classification.complexity is Complexity.TRIVIAL:
        return Gated(classification, budget, weights, [], 0, "", timings_ms=clock.laps)

    read = None if previous is None else reading(message, classification)
    searched, pool_vector = message, vector
    if previous is not None and read is not None and read.used and options.previous_weight > 0:
        vector = embed_query(message) if vector is None else vector
        searched = joined_text(message, previous)
        pool_vector = joined_vector(vector, embed_query(previous), options.previous_weight)
        if started is not None:  # the lexical matches begun for the message alone
            again = _start_reads(
                store, searched, user_id, flt, options, budget, reads, pinned=False
            )
            started = again._replace(pinned=started.pinned)
        clock.lap("previous turn")
    if read is not None:
        classification = replace(classification, signals=(*classification.signals,
                                                          read.note()))  # fmt: skip
    pool = _candidates(store, embed_query, searched, user_id, flt, options, budget, clock,
                       reads, pool_vector, started)  # fmt: skip
    pool = with_summaries(
        pool,
        store,
        embed_query,
        user_id,
        searched,
        pool_vector,
        flt,
        options.session_summaries,
        options.lexical_weight * options.hybrid,
    )
    pool = with_speakers(pool, message, options.speaker_weight)
    pool = with_time(pool, message, now, options.time_weight)
    pool = with_soft_terms(pool, message, *word_source(embed_query, options.soft_terms))
    pool = with_chunk_rank(pool, message) if options.chunk_rank else pool
    line_vectors = store_line_vectors(store, user_id, embed_query)
    pool = with_asked_turns(pool, message, options.asked_turns, embed_query, line_vectors)
    pool = with_second_round(pool, message, options.second_round)
    classification = with_candidate_domains(classification, message, pool, options.vocabulary)
    works: dict[str, frozenset[Work]] = {}
    other_work: frozenset[str] = frozenset()
    if options.work:
        pool, works, other_work = with_work(pool, message, classification)
    pool, area, raised = with_area(pool, classification, unconcerned=other_work)
    languages: frozenset[str] = frozenset()
    spoken: frozenset[str] = frozenset()
    if options.language:
        pool, languages, spoken = with_language(pool, message, classification, other_work)
    pool, pointed = with_pointed(pool, message)
    if works:
        asked = ", ".join(sorted({w.value for kinds in works.values() for w in kinds}))
        classification = replace(classification, signals=(*classification.signals,
                                                          f"work: {asked}"))  # fmt: skip
    if area:
        classification = replace(
            classification, signals=(*classification.signals, f"area: {', '.join(area)}")
        )
    if spoken:
        spoken_as = f"language: {', '.join(sorted(languages))}"
        classification = replace(classification, signals=(*classification.signals, spoken_as))
    if pointed:
        links = ", ".join(f"{mid} by {by}" for mid, (by, _) in pointed.items())
        classification = replace(classification, signals=(*classification.signals,
                                                          f"pointed to: {links}"))  # fmt: skip
    budget = _evidence_budget(budget, classification, pool, options, token_budget, max_budget)
    clock.lap("candidates")

    query = Query(classification, weights, now, options.focus_areas, options.present_use,
                  options.stated_span)  # fmt: skip
    ranked, components = _score(pool, options, query, cooccurrence, explain=explain,
                                raised=raised, pointed=pointed, works=works, spoken=spoken,
                                other_work=other_work)  # fmt: skip
    partners = _partners(store, user_id, ranked)
    ranked = with_excerpts(ranked, message, options.excerpt, line_vectors, vector)
    ranked = with_speaker_lines(
        ranked, message, options.speaker_lines, short_answer=options.short_answer
    )
    budget, by_lead = _lead_budget(budget, pool, ranked, options, token_budget, max_budget)
    clock.lap("score")

    year, fmt, compact, grouped = now.year, options.format, options.compact, options.group_days
    selected, _, decisions = select_gated(
        ranked, line_tokens=lambda m: line_tokens(m, fmt, year, compact, grouped),
        line_floor=lambda m: line_floor(m, fmt, year, compact, grouped),
        token_budget=budget.tokens, intent=classification.intent,
        threshold_shift=DEPTH_EFFECT[options.depth][1] + classification.threshold_shift,
        apply_threshold=_thresholds_apply(options, token_budget) and not by_lead,
        explain=explain, top_k=top_k,
        layout=_layout(fmt, compact, grouped), partners=partners, build=built_all,
    )  # fmt: skip
    clock.lap("select")
    text, tokens, selected = _fit(selected, fmt, budget.tokens, year, compact, grouped)
    clock.lap("assemble")
    costed = [_costed(r, fmt, year, compact, grouped) for r in ranked] if explain else selected
    return Gated(classification, budget, weights, selected, tokens, text, decisions, costed,
                 components, clock.laps)  # fmt: skip


def _budget(
    classification: Classification,
    options: GateOptions,
    token_budget: int | None,
    max_budget: int | None,
) -> Budget:
    """The explicit budget, else the classification's, capped at ``max_budget``."""
    if token_budget is not None:
        return Budget(token_budget, (f"explicit: {token_budget}",))
    budget = assign_budget(
        classification, depth=options.depth, prioritize_speed=options.prioritize_speed
    )
    if max_budget is not None and budget.tokens > max_budget:
        return Budget(max_budget, (*budget.steps, f"capped at {max_budget} (tier)"))
    return budget


def _evidence_budget(
    budget: Budget,
    classification: Classification,
    pool: Sequence[Candidate],
    options: GateOptions,
    token_budget: int | None,
    max_budget: int | None,
) -> Budget:
    """The automatic budget raised as for a history reference when the message is not
    marked as one but its most relevant candidate is a conversation chunk (a memory with
    turn ids): :func:`~engrain.recall.budget.with_conversation_evidence`. An explicit
    budget, ``history_evidence`` off, or a pool led by anything else leave it as it is."""
    if (
        token_budget is not None
        or not options.history_evidence
        or classification.references_history
        or not pool
        or not max(pool, key=lambda c: c.relevance).memory.provenance.turn_ids
    ):
        return budget
    return with_conversation_evidence(budget, cap=max_budget)


def _lead_budget(
    budget: Budget,
    pool: Sequence[Candidate],
    ranked: Sequence[Ranked],
    options: GateOptions,
    token_budget: int | None,
    max_budget: int | None,
) -> tuple[Budget, bool]:
    """The automatic budget of a question whose most relevant candidate is a conversation
    chunk, from how clearly its best-scored candidate leads
    (:func:`~engrain.recall.budget.transcript_budget`), and ``True``: that budget is filled
    in score order, like an explicit one, without the intent thresholds (they were set for
    typed learnings' scores; a transcript's budget is sized by its evidence instead).
    An explicit budget, ``lead_budget`` off, ``thresholds="always"`` or a pool led by
    anything else: ``budget`` as it is and ``False``."""
    if (
        token_budget is not None
        or not options.lead_budget
        or options.thresholds == "always"
        or not pool
        or not ranked
        or not max(pool, key=lambda c: c.relevance).memory.provenance.turn_ids
    ):
        return budget, False
    led = transcript_budget([r.score for r in ranked], depth=options.depth,
                            prioritize_speed=options.prioritize_speed, cap=max_budget)  # fmt: skip
    return Budget(led.tokens, (f"rules: {budget.tokens}, set aside", *led.steps)), True


class _Started(NamedTuple):
    """The reads that need no query vector, begun for a pool of ``size``."""

    size: int
    lexical: Callable[[], Sequence[tuple[MemoryFields, float]]] | None
    pinned: Callable[[], list[Memory]]


def _pool_size(options: GateOptions, budget: Budget) -> int:
    """How many nearest and lexical matches the pool takes: deep enough to fill the budget
    with chunk-sized memories (~40 tokens each)."""
    return max(options.pool, budget.tokens // 40)


def _start_reads(
    store: Store,
    message: str,
    user_id: str,
    flt: MemoryFilter,
    options: GateOptions,
    budget: Budget,
    reads: Reads,
    *,
    pinned: bool = True,
    size: int | None = None,
) -> _Started:
    """Begin the pool's lexical matches (``size`` deep, default the budget's pool size)
    and (``pinned``) its pinned memories, as ``reads`` runs them (:class:`Reads`: at once
    on a store that serves reads from several threads or with ``overlap``, else when first
    asked for)."""
    size = _pool_size(options, budget) if size is None else size
    search = _lexical(store)
    lexical = (
        reads.start(lambda: search(user_id, message, size, flt))
        if options.hybrid and options.profile is not Profile.STATIC
        else None
    )
    pins = reads.start(lambda: store.query(user_id, flt.update(pinned=True))) if pinned else list
    return _Started(size, lexical, pins)


def _lexical(
    store: Store,
) -> Callable[[str, str, int, MemoryFilter], Sequence[tuple[MemoryFields, float]]]:
    """The store's lexical search, its matches as their fields where it can
    (:class:`~engrain.store.base.FoundSearch`: built only if shown)."""
    return store.lexical_found if isinstance(store, FoundSearch) else store.lexical_search


def _candidates(
    store: Store,
    embed_query: Callable[[str], Vector],
    message: str,
    user_id: str,
    flt: MemoryFilter,
    options: GateOptions,
    budget: Budget,
    clock: _Clock,
    reads: Reads,
    vector: Vector | None = None,
    started: _Started | None = None,
) -> list[Candidate]:
    """The pool: nearest and lexical matches (a pool deep enough to fill the budget with
    chunk-sized memories, ~40 tokens each), every typed learning and every pinned memory.
    The reads that do not need the query vector overlap its computation where they can:
    ``started`` are those begun before the intent model's embedding, used when they were
    begun (the lexical matches again when the model's intent changed the pool's size).
    A pool led by a conversation chunk is gathered again ``options.chunk_pool`` deep when
    the budget's is shallower (:func:`~engrain.recall.chunk_rank.deep_enough`), and its
    nearest neighbours searched again without the speakers' names the question says
    (:func:`_unnamed_vector`)."""
    size = _pool_size(options, budget)
    static = options.profile is Profile.STATIC
    if started is None:
        started = _start_reads(store, message, user_id, flt, options, budget, reads)
    elif started.size != size:
        again = _start_reads(store, message, user_id, flt, options, budget, reads, pinned=False)
        started = again._replace(pinned=started.pinned)
    lexical, pinned = started.lexical, started.pinned
    typed = flt.update(kinds=LEARNING_KINDS)
    if vector is None:
        vector = embed_query(message)
        clock.lap("embed")
    if static:
        return [Candidate(m, 0.0, 0.0, 0.0) for m in store.query(user_id, flt)]
    searches = [(size, flt), (LEARNINGS_MAX, typed)]
    dense, learnings = _nearest(store, user_id, vector, searches, reads.beside)
    query_vector = vector
    include = [*learnings, *((m, cosine(m, query_vector)) for m in pinned())]

    def gathered(
        k: int,
        nearest: Sequence[tuple[MemoryFields, float]],
        matches: Sequence[tuple[MemoryFields, float]] | None,
    ) -> list[Candidate]:
        """The pool of the ``k`` nearest and the ``k`` best lexical ``matches``."""
        nearest = with_turns(store, embed_query, user_id, query_vector, nearest, k, flt,
                             options.turn_weight)  # fmt: skip
        return gather(
            store, user_id, message, query_vector, flt, pool=k, hybrid=options.hybrid,
            lexical_weight=options.lexical_weight, fusion=options.fusion,
            lexical=matches, dense=nearest, include=include, fragments=options.fragments,
            names=options.names,
        )  # fmt: skip

    matches = lexical() if lexical else None
    pool = gathered(size, dense, matches)
    unnamed = _unnamed_vector(pool, message, embed_query, vector, options)
    if deep_enough(pool, size, options.chunk_pool) and unnamed is None:
        return pool
    # a transcript question: as deep whatever the budget, and searched without the names
    depth = max(size, options.chunk_pool)
    if depth > size:
        deeper = _start_reads(
            store, message, user_id, flt, options, budget, Reads(store), pinned=False, size=depth
        ).lexical  # asked for at once: nothing to overlap
        matches = deeper() if deeper else None
    if unnamed is not None:
        query_vector = unnamed
    (dense,) = _nearest(store, user_id, query_vector, [(depth, flt)])
    return gathered(depth, dense, matches)


def _unnamed_vector(
    pool: Sequence[Candidate],
    message: str,
    embed_query: Callable[[str], Vector],
    vector: Vector,
    options: GateOptions,
) -> Vector | None:
    """The search vector of a transcript question that names speakers of its pool: its own
    blended with the question's without their names (:mod:`~engrain.recall.unnamed`);
    None when the rule is off, the pool is not led by a conversation chunk, or no speaker
    is named."""
    if options.unnamed <= 0.0 or not transcript_led(pool):
        return None
    stripped = without_names(message, named_speakers(pool, message))
    if stripped is None:
        return None
    return blended(vector, embed_query(stripped), options.unnamed)


def _nearest(
    store: Store,
    user_id: str,
    vector: Vector,
    searches: Sequence[tuple[int, MemoryFilter]],
    begin: Begin | None = None,
) -> list[list[tuple[MemoryFields, float]]]:
    """``store.search(user_id, vector, k, flt)`` for each ``(k, flt)``: the pool's nearest
    and the learnings' nearest. A store with a ``search_many(user_id, vector, searches)``
    method answers all of them from one product of the query with its matrix (the second
    product is what scoring every learning costs: 2-4 ms at 10,000 memories on a busy
    2-core machine); any other store searches once per filter. The matches are their
    fields where the store can give them (:class:`~engrain.store.base.FoundSearch`), whose
    search may begin its second index's walk with ``begin`` (:meth:`Reads.beside`)."""
    if isinstance(store, FoundSearch):
        return store.search_found(user_id, vector, list(searches), begin)
    many = getattr(store, "search_many", None)
    searched: list[list[tuple[MemoryFields, float]]]
    if callable(many):
        searched = [list(found) for found in many(user_id, vector, list(searches))]
    else:
        searched = [list(store.search(user_id, vector, k, flt)) for k, flt in searches]
    return searched


def with_candidate_domains(
    classification: Classification,
    message: str,
    pool: Sequence[Candidate],
    vocabulary: Vocabulary | None = None,
) -> Classification:
    """``classification`` with the candidates' own domain names that ``message`` uses
    added to its domains (signal ``candidate domains: …``).

    A message is tagged with the built-in domains and the configured vocabulary only, yet
    memories carry the user's domains ("payments", "experiments"): a domain name the user
    gave a memory is a word that tags a message saying it ("the payments webhook", "rerun
    the experiment"), so without any configuration the domain term can match. Matching is
    :func:`~engrain.recall.classify.domains_of`'s for a user domain without keywords (the
    name, singular or plural, simple inflections; "data-quality" also as "data quality").
    """
    known = {*classification.domains, *DOMAIN_KEYWORDS, *(vocabulary or ())}
    named = sorted({d for c in pool for d in c.memory.domains} - known)
    if not named:
        return classification
    spelled = {d: [spaced] if (spaced := _SEPARATORS.sub(" ", d)) != d else [] for d in named}
    found = [d for d in domains_of(message, spelled) if d in spelled]
    if not found:
        return classification
    return replace(
        classification,
        domains=(*classification.domains, *found),
        signals=(*classification.signals, f"candidate domains: {', '.join(found)}"),
    )


_SEPARATORS = re.compile(r"[-_/]+")


def _score(
    pool: Sequence[Candidate],
    options: GateOptions,
    query: Query,
    cooccurrence: Pairs | None,
    *,
    explain: bool,
    raised: frozenset[str] = frozenset(),
    pointed: Mapping[str, tuple[str, float]] | None = None,
    works: Mapping[str, frozenset[Work]] | None = None,
    other_work: frozenset[str] = frozenset(),
    spoken: frozenset[str] = frozenset(),
) -> tuple[list[Ranked], dict[str, dict[str, float]]]:
    """Every candidate scored once by the profile's scorer, best first (the static profile
    keeps its top 10), with (``explain``) each one's components and the factors behind
    them (plus ``area_convention`` 1.0 for a convention raised by ``recall.area``,
    ``pointed`` the relevance a clear match lent a memory, ``recall.pointed``, and
    ``work`` the number of kinds of work asked that a preference governs and
    ``other_work`` 1.0 for one that governs only work not asked, ``recall.work``, and
    ``language`` 1.0 for a preference about the language of a request for code,
    ``recall.language``).
    The learned co-occurrence bonus is with the most relevant candidates (the pool
    comes ordered by relevance), so one pass scores everything. Without ``explain`` the
    gated profile's totals come from :func:`~engrain.recall.score_batch.gated_columns`
    (the same numbers, without the components nobody reads) with each one's present
    relevance (:func:`_ranked`'s, from the same age)."""
    if cooccurrence:  # asked once: the pairs are a mapping read when first looked at
        anchors = [c.id for c in pool[:ANCHORS]]
        bonuses = [cooccurrence_bonus(cooccurrence, c.id, anchors) for c in pool]
    else:
        bonuses = [0.0] * len(pool)
    if not explain and options.profile is Profile.GATED:  # the totals alone, in one batch
        items = [(c.memory, c.relevance, b) for c, b in zip(pool, bonuses, strict=True)]
        totals, present = gated_columns(items, query)
        # best first; equal totals keep the pool's order, as sorted(reverse=True) keeps it
        best = np.argsort(-totals, kind="stable").tolist()
        order = zip(best, totals[best].tolist(), present[best].tolist(), strict=True)
        return [Ranked(pool[i].memory, total, pool[i].similarity, relevance)
                for i, total, relevance in order], {}  # fmt: skip
    score = scorer(options.profile, query)
    scored = [(c, score(c.memory, c.relevance, b)) for c, b in zip(pool, bonuses, strict=True)]
    scored.sort(key=lambda pair: pair[1].total, reverse=True)
    if options.profile is Profile.STATIC:
        scored = scored[:STATIC_TOP]
    ranked = [_ranked(c, s.total, query) for c, s in scored]
    components = {
        c.id: {**s.components, **s.factors, "cosine": c.similarity, "lexical": c.lexical,
               "calibrated_relevance": c.relevance,
               **({"lexical_no_evidence": c.no_evidence} if c.no_evidence else {}),
               **({"area_convention": 1.0} if c.id in raised else {}),
               **({"pointed": pointed[c.id][1]} if pointed and c.id in pointed else {}),
               **({"work": float(len(works[c.id]))} if works and c.id in works else {}),
               **({"other_work": 1.0} if c.id in other_work else {}),
               **({"language": 1.0} if c.id in spoken else {})}
        for c, s in scored
    } if explain else {}  # fmt: skip
    return ranked, components


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


def _layout(fmt: Format, compact: bool = True, grouped: bool = False) -> Layout:
    """What a block in ``fmt`` costs beyond its lines (``grouped`` tagged: a day's header
    once, like a section's heading)."""
    if fmt is Format.TAGGED and grouped:

        def day(memory: MemoryFields) -> tuple[str, int]:
            header = group_of(memory, compact)
            return header, header_tokens(header) if header else 0

        return Layout(wrapper_tokens(), day)
    if fmt is Format.TAGGED:
        return Layout(wrapper_tokens())
    titles: dict[str, int] = {}

    def section(memory: MemoryFields) -> tuple[str, int]:
        title = section_of(memory)
        if title not in titles:
            titles[title] = section_tokens(title)
        return title, titles[title]

    return Layout(wrapper_tokens(), section)


def _fit(
    selected: list[ScoredMemory],
    fmt: Format,
    budget: int,
    year: int,
    compact: bool = True,
    grouped: bool = False,
) -> tuple[str, int, list[ScoredMemory]]:
    """The rendered block, its tokens and what it holds. Selection counted every line,
    newline, heading and the wrapper; should the tokenizer still merge differently across
    lines, the last memories are dropped until the block fits: no block exceeds its budget.
    The block's tokens are :func:`~engrain.recall.assemble.block_tokens` of the lines
    selection counted, exactly ``count_tokens`` of the block without encoding it again,
    and its text is made of those same lines (each looked up once here, not rendered
    again)."""
    costs = {s.memory.id: shown_line(s.memory, fmt, year, compact, grouped) for s in selected}
    while True:
        memories = [s.memory for s in selected]
        tokens = block_tokens(memories, fmt, year=year, compact=compact, grouped=grouped,
                              line=lambda m: costs[m.id])  # fmt: skip
        if tokens <= budget:
            text = render(memories, fmt, year=year, compact=compact, grouped=grouped,
                          line=lambda m: costs[m.id][0])  # fmt: skip
            return text, tokens, selected
        selected = selected[:-1]


def _thresholds_apply(options: GateOptions, explicit_budget: int | None) -> bool:
    """Intent thresholds gate the gated profile's automatic selection. An explicit budget
    is the caller deciding how much memory to inject (the spec's recall): it is filled in
    score order unless ``thresholds="always"``."""
    if options.profile is not Profile.GATED or options.thresholds == "never":
        return False
    return options.thresholds == "always" or explicit_budget is None


def _costed(
    r: Ranked, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> ScoredMemory:
    cost = line_tokens(r.memory, fmt, year, compact, grouped)
    return ScoredMemory(r.memory.built(), r.score, r.similarity, cost)


class _Clock:
    """Per-stage wall-clock laps in milliseconds."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = (now - self._last) * 1000.0
        self._last = now
