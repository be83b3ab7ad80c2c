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
from engrain.recall.excerpt import (
    EXCERPT,
    ExcerptRule,
    LineVectors,
    store_line_vectors,
    with_excerpts,
)
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
    Scored,
    gated_weights,
    present_relevance,
    scorer,
)
from engrain.recall.score_batch import gated_columns
from engrain.recall.second_round import SECOND_ROUND_WEIGHT, with_second_round
from engrain.recall.select import Layout, Ranked, select_gated
from engrain.recall.sentences import (
    SENTENCE_WEIGHT,
    best_pieces,
    sentence_index,
    with_sentences,
)
from engrain.recall.soft_terms import SOFT_TERMS_DEFAULT, with_soft_terms, word_source
from engrain.recall.speakers import (
    SHORT_ANSWER,
    SPEAKER_LINES,
    SPEAKER_WEIGHT,
    with_speaker_lines,
    with_speakers,
)
from engrain.recall.summaries import SESSION_SUMMARIES, with_summaries
from engrain.recall.trim import DEFAULT_TRIM, Trim
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
    sentence_weight: float = SENTENCE_WEIGHT  # a learning found by its best sentence (off)
    previous_weight: float = PREVIOUS_WEIGHT  # the turn before's share of a follow-up's query
    vocabulary: Vocabulary | None = None  # the user's domains → keywords, for classify
    trim: Trim = DEFAULT_TRIM  # lines no message asks for left out (recall.trim)

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
    call = _Call(
        store, embed_query, message, user_id, options, now,
        cand.recall_filter(min_importance=options.min_importance, memory_types=memory_types,
                           project=project, include_compressed=include_compressed),
        Reads(store) if reads is None else reads, token_budget, max_budget, top_k, explain,
        previous, cooccurrence, _Clock(),
    )  # fmt: skip
    # there was a turn before: a follow-up can be read as one
    understood = _understand(call, turn if previous is None else max(turn, 1))
    if understood.budget.tokens == 0 or understood.classification.complexity is Complexity.TRIVIAL:
        return Gated(understood.classification, understood.budget, understood.weights, [], 0, "",
                     timings_ms=call.clock.laps)  # fmt: skip
    pool = _pool(call, _follow_up(call, understood))
    return _assemble(call, _select(call, _rank(call, pool)))


# -- the call and what each stage hands the next --------------------------------------------


class _Call(NamedTuple):
    """One call's inputs, as every stage reads them (``flt``: the recall filter the
    arguments make; ``clock``: the stages' laps)."""

    store: Store
    embed_query: Callable[[str], Vector]
    message: str
    user_id: str
    options: GateOptions
    now: datetime
    flt: MemoryFilter
    reads: Reads
    token_budget: int | None
    max_budget: int | None
    top_k: int | None
    explain: bool
    previous: str | None
    cooccurrence: Pairs | None
    clock: _Clock


class _Understood(NamedTuple):
    """classify → budget: the message's classification, budget and weights; ``vector`` the
    message's query vector when computed, and what the pool is searched with (``searched``
    and ``search_vector``: the message's own, or with a follow-up's turn before) with the
    reads ``started`` for it."""

    classification: Classification
    budget: Budget
    weights: dict[str, float]
    vector: Vector | None
    searched: str
    search_vector: Vector | None
    started: _Started | None


class Marks(NamedTuple):
    """What the pool's rules marked, for the scores' components and the signals: the kinds
    of work each procedural memory governs and those governing only work not asked
    (``recall.work``), the message's area and the conventions raised in it
    (``recall.area``), the languages of a request for code and the preferences raised for
    them (``recall.language``), and the memories a clear match pointed to
    (``recall.pointed``: id → its pointer and its new relevance), and each split
    learning's best sentence's cosine (``recall.sentences``, with ``sentence_weight``)."""

    works: Mapping[str, frozenset[Work]] = {}
    other_work: frozenset[str] = frozenset()
    area: tuple[str, ...] = ()
    raised: frozenset[str] = frozenset()
    languages: frozenset[str] = frozenset()
    spoken: frozenset[str] = frozenset()
    pointed: Mapping[str, tuple[str, float]] = {}
    sentences: Mapping[str, float] = {}


NO_MARKS = Marks()


class _Pool(NamedTuple):
    """candidates: the pool and what its rules decided; the classification (with the
    candidates' domains and the rules' signals) and the budget (raised by the pool's
    evidence) the later stages use."""

    candidates: list[Candidate]
    classification: Classification
    budget: Budget
    weights: dict[str, float]
    vector: Vector | None
    line_vectors: LineVectors | None
    marks: Marks
    searched: str
    search_vector: Vector | None


class _Ranking(NamedTuple):
    """score: the candidates best first, their components (``explain``), the conflict
    partners of the ranked, and the budget set by how clearly the best leads (``by_lead``:
    filled in score order)."""

    pool: _Pool
    ranked: list[Ranked]
    components: dict[str, dict[str, float]]
    partners: dict[str, list[Ranked]]
    budget: Budget
    by_lead: bool


class _Selection(NamedTuple):
    """select: the memories selected and, with ``explain``, a decision per candidate."""

    ranking: _Ranking
    selected: list[ScoredMemory]
    decisions: list[Decision]


# -- classify → budget --------------------------------------------------------------------


def _understand(call: _Call, turn: int) -> _Understood:
    """The message classified (refined by the intent model where it applies) and its budget
    and weights. The reads that need no vector start first (on a store that overlaps them)
    with the rules' budget; the model rarely changes the pool's size, and then they start
    again (:func:`_candidates`)."""
    options, clock, message = call.options, call.clock, call.message
    classification = classify(message, turn=turn, vocabulary=options.vocabulary)
    clock.lap("classify")
    vector, embedder, started = None, embedder_of(call.embed_query), None
    if classification.complexity is not Complexity.TRIVIAL and applies(embedder):
        rules_budget = _budget(call, classification)
        if rules_budget.tokens > 0:
            started = _start_reads(call, message, rules_budget)
        vector = call.embed_query(message)  # the pool's query vector: a second opinion on intent
        clock.lap("embed")
        classification = refine(classification, message, vector, embedder)
        clock.lap("intent model")
    budget = _budget(call, classification)
    weights = gated_weights(classification)
    clock.lap("budget")
    return _Understood(classification, budget, weights, vector, message, vector, started)


def _budget(call: _Call, classification: Classification) -> Budget:
    """The explicit budget, else the classification's, capped at ``max_budget``."""
    if call.token_budget is not None:
        return Budget(call.token_budget, (f"explicit: {call.token_budget}",))
    budget = assign_budget(
        classification, depth=call.options.depth, prioritize_speed=call.options.prioritize_speed
    )
    if call.max_budget is not None and budget.tokens > call.max_budget:
        return Budget(call.max_budget, (*budget.steps, f"capped at {call.max_budget} (tier)"))
    return budget


def _follow_up(call: _Call, understood: _Understood) -> _Understood:
    """With the turn before (``previous``): a message that leans on it searched with both
    turns, their words and their query vectors blended (``recall.previous``), its lexical
    matches begun again for them; and the classification's signal saying whether the turn
    before was used, and why. Without it: ``understood`` as it is."""
    if call.previous is None:
        return understood
    classification, vector = understood.classification, understood.vector
    started = understood.started
    read = reading(call.message, classification)
    searched, search_vector = understood.searched, understood.search_vector
    if read.used and call.options.previous_weight > 0:
        vector = call.embed_query(call.message) if vector is None else vector
        searched = joined_text(call.message, call.previous)
        search_vector = joined_vector(
            vector, call.embed_query(call.previous), call.options.previous_weight
        )
        if started is not None:  # the lexical matches begun for the message alone
            again = _start_reads(call, searched, understood.budget, pinned=False)
            started = again._replace(pinned=started.pinned)
        call.clock.lap("previous turn")
    classification = replace(classification, signals=(*classification.signals, read.note()))
    return understood._replace(classification=classification, vector=vector, searched=searched,
                               search_vector=search_vector, started=started)  # fmt: skip


# -- candidates ------------------------------------------------------------------------------


def _pool(call: _Call, understood: _Understood) -> _Pool:
    """The pool (:func:`_candidates`) through each of :data:`POOL_RULES` in order, the
    rules' signals added, and the budget raised by its evidence (:func:`_evidence_budget`)."""
    u = understood
    pool = _Pool(_candidates(call, u), u.classification, u.budget, u.weights, u.vector, None,
                 NO_MARKS, u.searched, u.search_vector)  # fmt: skip
    for rule in POOL_RULES:
        pool = rule(call, pool)
    pool = pool._replace(classification=_signalled(pool.classification, pool.marks))
    pool = pool._replace(budget=_evidence_budget(call, pool))
    call.clock.lap("candidates")
    return pool


def _candidates(call: _Call, understood: _Understood) -> list[Candidate]:
    """The pool: nearest and lexical matches (a pool deep enough to fill the budget with
    chunk-sized memories, ~40 tokens each), every typed learning and every pinned memory.
    The reads that do not need the query vector overlap its computation where they can:
    ``understood.started`` are those begun before the intent model's embedding, used when
    they were begun (the lexical matches again when the model's intent changed the pool's
    size). A pool led by a conversation chunk is gathered again (:func:`_transcript_pool`)."""
    store, options, text, budget = call.store, call.options, understood.searched, understood.budget
    size = _pool_size(options, budget)
    started = understood.started
    if started is None:
        started = _start_reads(call, text, budget)
    elif started.size != size:
        again = _start_reads(call, text, budget, pinned=False)
        started = again._replace(pinned=started.pinned)
    vector = understood.search_vector
    if vector is None:
        vector = call.embed_query(text)
        call.clock.lap("embed")
    if options.profile is Profile.STATIC:
        return [Candidate(m, 0.0, 0.0, 0.0) for m in store.query(call.user_id, call.flt)]
    searches = [(size, call.flt), (LEARNINGS_MAX, call.flt.update(kinds=LEARNING_KINDS))]
    dense, learnings = _nearest(store, call.user_id, vector, searches, call.reads.beside)
    dense, learnings = _by_sentences(call, vector, dense, learnings)
    include = [*learnings, *((m, cosine(m, vector)) for m in started.pinned())]
    matches = started.lexical() if started.lexical else None
    pool = _gathered(call, text, vector, size, dense, matches, include)
    unnamed = _unnamed_vector(pool, text, call.embed_query, vector, options)
    if deep_enough(pool, size, options.chunk_pool) and unnamed is None:
        return pool
    vector = vector if unnamed is None else unnamed
    return _transcript_pool(call, understood, vector, size, matches, include)


def _by_sentences(
    call: _Call,
    vector: Vector,
    dense: list[tuple[MemoryFields, float]],
    learnings: list[tuple[MemoryFields, float]],
) -> tuple[list[tuple[MemoryFields, float]], list[tuple[MemoryFields, float]]]:
    """The nearest and the learnings with each typed learning's similarity raised towards
    its best sentence's or step's (``recall.sentences``); as they are when
    ``sentence_weight`` is 0."""
    weight = call.options.sentence_weight
    index = sentence_index(call.store, call.user_id, call.embed_query, weight)
    if index is None:
        return dense, learnings
    dense, learnings = with_sentences(index, vector, [dense, learnings], weight)
    call.clock.lap("sentences")
    return dense, learnings


def _transcript_pool(
    call: _Call,
    understood: _Understood,
    vector: Vector,
    size: int,
    matches: Sequence[tuple[MemoryFields, float]] | None,
    include: list[tuple[MemoryFields, float]],
) -> list[Candidate]:
    """The pool of a transcript question: ``options.chunk_pool`` deep when the budget's
    ``size`` is shallower (:func:`~engrain.recall.chunk_rank.deep_enough`), its nearest
    neighbours searched with ``vector`` (without the speakers' names the question says,
    :func:`_unnamed_vector`, when it names some)."""
    depth = max(size, call.options.chunk_pool)
    if depth > size:  # asked for at once: nothing to overlap
        deeper = _start_reads(call, understood.searched, understood.budget, pinned=False,
                              size=depth, reads=Reads(call.store)).lexical  # fmt: skip
        matches = deeper() if deeper else None
    (dense,) = _nearest(call.store, call.user_id, vector, [(depth, call.flt)])
    return _gathered(call, understood.searched, vector, depth, dense, matches, include)


def _gathered(
    call: _Call,
    text: str,
    vector: Vector,
    k: int,
    nearest: Sequence[tuple[MemoryFields, float]],
    matches: Sequence[tuple[MemoryFields, float]] | None,
    include: list[tuple[MemoryFields, float]],
) -> list[Candidate]:
    """The pool of the ``k`` ``nearest`` (with the chunks found by their best turns,
    ``recall.turns``) and the ``k`` best lexical ``matches``, ``include`` joining them."""
    o = call.options
    nearest = with_turns(call.store, call.embed_query, call.user_id, vector, nearest, k,
                         call.flt, o.turn_weight)  # fmt: skip
    return gather(
        call.store, call.user_id, text, vector, call.flt, pool=k, hybrid=o.hybrid,
        lexical_weight=o.lexical_weight, fusion=o.fusion, lexical=matches, dense=nearest,
        include=include, fragments=o.fragments, names=o.names,
    )  # fmt: skip


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
    call: _Call,
    text: str,
    budget: Budget,
    *,
    pinned: bool = True,
    size: int | None = None,
    reads: Reads | None = None,
) -> _Started:
    """Begin the pool's lexical matches of ``text`` (``size`` deep, default the budget's
    pool size) and (``pinned``) its pinned memories, as ``reads`` (default the call's) runs
    them (:class:`Reads`: at once on a store that serves reads from several threads or with
    ``overlap``, else when first asked for)."""
    store, user_id, flt, options = call.store, call.user_id, call.flt, call.options
    reads = call.reads if reads is None else reads
    size = _pool_size(options, budget) if size is None else size
    search = _lexical(store)
    lexical = (
        reads.start(lambda: search(user_id, text, size, flt))
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


# -- the pool's rules, in order: each takes the pool and returns it ------------------------


def _summaries(call: _Call, pool: _Pool) -> _Pool:
    """Session summaries join the pool (``recall.summaries``)."""
    o = call.options
    found = with_summaries(pool.candidates, call.store, call.embed_query, call.user_id,
                           pool.searched, pool.search_vector, call.flt, o.session_summaries,
                           o.lexical_weight * o.hybrid)  # fmt: skip
    return pool._replace(candidates=found)


def _speakers(call: _Call, pool: _Pool) -> _Pool:
    """Who is asked about (``recall.speakers``)."""
    found = with_speakers(pool.candidates, call.message, call.options.speaker_weight)
    return pool._replace(candidates=found)


def _time(call: _Call, pool: _Pool) -> _Pool:
    """When it is asked about (``recall.when``)."""
    found = with_time(pool.candidates, call.message, call.now, call.options.time_weight)
    return pool._replace(candidates=found)


def _soft_terms(call: _Call, pool: _Pool) -> _Pool:
    """Chunks by words near the question's (``recall.soft_terms``)."""
    words = word_source(call.embed_query, call.options.soft_terms)
    return pool._replace(candidates=with_soft_terms(pool.candidates, call.message, *words))


def _chunk_rank(call: _Call, pool: _Pool) -> _Pool:
    """Conversation chunks re-ranked by their features (``recall.chunk_rank``)."""
    if not call.options.chunk_rank:
        return pool
    return pool._replace(candidates=with_chunk_rank(pool.candidates, call.message))


def _line_vectors(call: _Call, pool: _Pool) -> _Pool:
    """The line vectors of the user's conversation chunks (``recall.excerpt``), for the
    asked speaker's turns and the excerpts."""
    return pool._replace(line_vectors=store_line_vectors(call.store, call.user_id,
                                                         call.embed_query))  # fmt: skip


def _asked_turns(call: _Call, pool: _Pool) -> _Pool:
    """The tail by the asked speaker's turns (``recall.asked_turns``)."""
    found = with_asked_turns(pool.candidates, call.message, call.options.asked_turns,
                             call.embed_query, pool.line_vectors)  # fmt: skip
    return pool._replace(candidates=found)


def _second_round(call: _Call, pool: _Pool) -> _Pool:
    """Chunks ranked again by the best's (``recall.second_round``)."""
    found = with_second_round(pool.candidates, call.message, call.options.second_round)
    return pool._replace(candidates=found)


def _candidate_domains(call: _Call, pool: _Pool) -> _Pool:
    """The candidates' own domain names the message uses (:func:`with_candidate_domains`)."""
    classification = with_candidate_domains(
        pool.classification, call.message, pool.candidates, call.options.vocabulary
    )
    return pool._replace(classification=classification)


def _work(call: _Call, pool: _Pool) -> _Pool:
    """Preferences for the kind of work asked raised (``recall.work``)."""
    if not call.options.work:
        return pool
    found, works, other_work = with_work(pool.candidates, call.message, pool.classification)
    marks = pool.marks._replace(works=works, other_work=other_work)
    return pool._replace(candidates=found, marks=marks)


def _area(call: _Call, pool: _Pool) -> _Pool:
    """The conventions of the message's area raised (``recall.area``)."""
    marks = pool.marks
    found, area, raised = with_area(pool.candidates, pool.classification,
                                    unconcerned=marks.other_work)  # fmt: skip
    return pool._replace(candidates=found, marks=marks._replace(area=area, raised=raised))


def _language(call: _Call, pool: _Pool) -> _Pool:
    """Preferences about a code request's language raised (``recall.language``)."""
    if not call.options.language:
        return pool
    marks = pool.marks
    found, languages, spoken = with_language(pool.candidates, call.message,
                                             pool.classification, marks.other_work)  # fmt: skip
    marks = marks._replace(languages=languages, spoken=spoken)
    return pool._replace(candidates=found, marks=marks)


def _sentences(call: _Call, pool: _Pool) -> _Pool:
    """Each split learning's best sentence's cosine marked for ``explain()``
    (``recall.sentences``; the similarities were raised in :func:`_by_sentences`)."""
    o = call.options
    index = sentence_index(call.store, call.user_id, call.embed_query, o.sentence_weight)
    if not call.explain or index is None:
        return pool
    vector = pool.search_vector
    if vector is None:  # the pool's vector, as _candidates computed it (no intent model)
        vector = call.embed_query(pool.searched)
    found = best_pieces(index, vector, [c.memory for c in pool.candidates])
    return pool._replace(marks=pool.marks._replace(sentences=found))


def _pointed(call: _Call, pool: _Pool) -> _Pool:
    """The memories a clear match points to raised (``recall.pointed``)."""
    found, pointed = with_pointed(pool.candidates, call.message)
    return pool._replace(candidates=found, marks=pool.marks._replace(pointed=pointed))


#: The pool's rules, in the order they apply (each a function of the call and the pool).
POOL_RULES: tuple[Callable[[_Call, _Pool], _Pool], ...] = (
    _summaries, _speakers, _time, _soft_terms, _chunk_rank, _line_vectors, _asked_turns,
    _second_round, _candidate_domains, _work, _area, _language, _sentences, _pointed,
)  # fmt: skip


def _signalled(classification: Classification, marks: Marks) -> Classification:
    """``classification`` with the signals of what the pool's rules marked: the work asked,
    the area, the languages of a request for code, the memories pointed to."""
    signals = []
    if marks.works:
        asked = ", ".join(sorted({w.value for kinds in marks.works.values() for w in kinds}))
        signals.append(f"work: {asked}")
    if marks.area:
        signals.append(f"area: {', '.join(marks.area)}")
    if marks.spoken:
        signals.append(f"language: {', '.join(sorted(marks.languages))}")
    if marks.pointed:
        links = ", ".join(f"{mid} by {by}" for mid, (by, _) in marks.pointed.items())
        signals.append(f"pointed to: {links}")
    if not signals:
        return classification
    return replace(classification, signals=(*classification.signals, *signals))


def _evidence_budget(call: _Call, pool: _Pool) -> Budget:
    """The automatic budget raised as for a history reference when the message is not
    marked as one but its most relevant candidate is a conversation chunk (a memory with
    turn ids): :func:`~engrain.recall.budget.with_conversation_evidence`. An explicit
    budget, ``history_evidence`` off, or a pool led by anything else leave it as it is."""
    if (
        call.token_budget is not None
        or not call.options.history_evidence
        or pool.classification.references_history
        or not _chunk_led(pool.candidates)
    ):
        return pool.budget
    return with_conversation_evidence(pool.budget, cap=call.max_budget)


def _chunk_led(pool: Sequence[Candidate]) -> bool:
    """Whether the most relevant candidate of ``pool`` is a conversation chunk."""
    return bool(pool) and bool(max(pool, key=lambda c: c.relevance).memory.provenance.turn_ids)


# -- score ---------------------------------------------------------------------------------


def _rank(call: _Call, pool: _Pool) -> _Ranking:
    """Every candidate scored once (:func:`_score`), the conflict partners of the ranked
    read (:func:`_partners`), conversation chunks cut to their excerpts and the asked
    speakers' lines, and the budget set by how clearly the best leads (:func:`_lead_budget`)."""
    o, message = call.options, call.message
    query = Query(pool.classification, pool.weights, call.now, o.focus_areas, o.present_use,
                  o.stated_span)  # fmt: skip
    ranked, components = _score(pool.candidates, o, query, call.cooccurrence,
                                explain=call.explain, marks=pool.marks)  # fmt: skip
    partners = _partners(call.store, call.user_id, ranked)
    ranked = with_excerpts(ranked, message, o.excerpt, pool.line_vectors, pool.vector)
    ranked = with_speaker_lines(ranked, message, o.speaker_lines, short_answer=o.short_answer)
    budget, by_lead = _lead_budget(call, pool, ranked)
    call.clock.lap("score")
    return _Ranking(pool, ranked, components, partners, budget, by_lead)


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


def _lead_budget(call: _Call, pool: _Pool, ranked: Sequence[Ranked]) -> tuple[Budget, bool]:
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
        or not _chunk_led(pool.candidates)
    ):
        return budget, False
    led = transcript_budget([r.score for r in ranked], depth=o.depth,
                            prioritize_speed=o.prioritize_speed, cap=call.max_budget)  # fmt: skip
    return Budget(led.tokens, (f"rules: {budget.tokens}, set aside", *led.steps)), True


# -- select → assemble ---------------------------------------------------------------------


def _select(call: _Call, ranking: _Ranking) -> _Selection:
    """The greedy fill of the ranking within its budget (:func:`~engrain.recall.select.
    select_gated`): the intent's thresholds, shifted by depth, apply to the automatic
    budget of the gated profile (:func:`_thresholds_apply`) unless the lead set it."""
    o, classification = call.options, ranking.pool.classification
    year, fmt, compact, grouped = call.now.year, o.format, o.compact, o.group_days
    selected, _, decisions = select_gated(
        ranking.ranked, line_tokens=lambda m: line_tokens(m, fmt, year, compact, grouped),
        line_floor=lambda m: line_floor(m, fmt, year, compact, grouped),
        token_budget=ranking.budget.tokens, intent=classification.intent,
        threshold_shift=DEPTH_EFFECT[o.depth][1] + classification.threshold_shift,
        apply_threshold=_thresholds_apply(o, call.token_budget) and not ranking.by_lead,
        explain=call.explain, top_k=call.top_k,
        layout=_layout(fmt, compact, grouped), partners=ranking.partners, build=built_all,
        trim=o.trim.for_message(classification),
    )  # fmt: skip
    call.clock.lap("select")
    return _Selection(ranking, selected, decisions)


def _assemble(call: _Call, selection: _Selection) -> Gated:
    """The block rendered to fit its budget (:func:`_fit`) and everything decided: with
    ``explain`` every ranked candidate with its line's cost."""
    o, ranking = call.options, selection.ranking
    year, fmt, compact, grouped = call.now.year, o.format, o.compact, o.group_days
    text, tokens, selected = _fit(selection.selected, fmt, ranking.budget.tokens, year, compact,
                                  grouped)  # fmt: skip
    call.clock.lap("assemble")
    costed = (
        [_costed(r, fmt, year, compact, grouped) for r in ranking.ranked]
        if call.explain
        else selected
    )
    pool = ranking.pool
    return Gated(pool.classification, ranking.budget, pool.weights, selected, tokens, text,
                 selection.decisions, costed, ranking.components, call.clock.laps)  # fmt: skip


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
