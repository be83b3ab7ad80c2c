"""Candidates: the pool of one call, every kind of candidate, and its rules applied.

:func:`pool_of` takes the :class:`~engrain.recall.stages.Call` and its
:class:`~engrain.recall.stages.Understood` and gives the :class:`~engrain.recall.stages.Pool`:
the nearest and lexical matches (:mod:`~engrain.recall.pool_reads`), every typed learning
near the query (:data:`LEARNING_KINDS`, at most :data:`LEARNINGS_MAX`), every pinned
memory, a transcript question's deeper pool, then each of
:data:`~engrain.recall.pool_rules.POOL_RULES` in order, their signals, and the budget
raised by the pool's evidence. Per-call state only: the lists and values it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engrain.model import Kind, MemoryFields, Vector
from engrain.recall.budget import Budget, with_conversation_evidence
from engrain.recall.chunk_rank import deep_enough, transcript_led
from engrain.recall.options import GateOptions
from engrain.recall.pool_reads import nearest, pool_size, start_reads
from engrain.recall.pool_rules import POOL_RULES, signalled
from engrain.recall.relevance import Candidate, cosine, gather
from engrain.recall.score import Profile
from engrain.recall.sentences import sentence_index, with_sentences
from engrain.recall.stages import NO_MARKS, Call, Pool, Understood
from engrain.recall.turns import with_turns
from engrain.recall.unnamed import blended, named_speakers, without_names
from engrain.store.reads import Reads

#: The typed learnings every call scores, relevant or not (the seed: "every learning in
#: your project memory is scored"); they are few. Facts, events, context and summaries
#: (what conversations produce, by the thousand) come from the candidate pool. A store
#: with more than :data:`LEARNINGS_MAX` learnings has its nearest that many scored.
LEARNINGS_MAX = 100


LEARNING_KINDS = (
    Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.ANTIPATTERN, Kind.GOLDEN_PATH,
    Kind.PREFERENCE, Kind.CORRECTION,
)  # fmt: skip


def pool_of(call: Call, understood: Understood) -> Pool:
    """The pool (:func:`_candidates`) through each of
    :data:`~engrain.recall.pool_rules.POOL_RULES` in order, the rules' signals added, and the
    budget raised by its evidence (:func:`_evidence_budget`)."""
    u = understood
    pool = Pool(_candidates(call, u), u.classification, u.budget, u.weights, u.vector, None,
                 NO_MARKS, u.searched, u.search_vector)  # fmt: skip
    for rule in POOL_RULES:
        pool = rule(call, pool)
    pool = pool._replace(classification=signalled(pool.classification, pool.marks))
    pool = pool._replace(budget=_evidence_budget(call, pool))
    call.clock.lap("candidates")
    return pool


def _candidates(call: Call, understood: Understood) -> list[Candidate]:
    """The pool: nearest and lexical matches (a pool deep enough to fill the budget with
    chunk-sized memories, ~40 tokens each), every typed learning and every pinned memory.
    The reads that do not need the query vector overlap its computation where they can:
    ``understood.started`` are those begun before the intent model's embedding, used when
    they were begun (the lexical matches again when the model's intent changed the pool's
    size). A pool led by a conversation chunk is gathered again (:func:`_transcript_pool`)."""
    store, options, text, budget = call.store, call.options, understood.searched, understood.budget
    size = pool_size(options, budget)
    started = understood.started
    if started is None:
        started = start_reads(call, text, budget)
    elif started.size != size:
        again = start_reads(call, text, budget, pinned=False)
        started = again._replace(pinned=started.pinned)
    vector = understood.search_vector
    if vector is None:
        vector = call.embed_query(text)
        call.clock.lap("embed")
    if options.profile is Profile.STATIC:
        return [Candidate(m, 0.0, 0.0, 0.0) for m in store.query(call.user_id, call.flt)]
    searches = [(size, call.flt), (LEARNINGS_MAX, call.flt.update(kinds=LEARNING_KINDS))]
    dense, learnings = nearest(store, call.user_id, vector, searches, call.reads.beside)
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
    call: Call,
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
    call: Call,
    understood: Understood,
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
        deeper = start_reads(call, understood.searched, understood.budget, pinned=False,
                              size=depth, reads=Reads(call.store)).lexical  # fmt: skip
        matches = deeper() if deeper else None
    (dense,) = nearest(call.store, call.user_id, vector, [(depth, call.flt)])
    return _gathered(call, understood.searched, vector, depth, dense, matches, include)


def _gathered(
    call: Call,
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


def _evidence_budget(call: Call, pool: Pool) -> Budget:
    """The automatic budget raised as for a history reference when the message is not
    marked as one but its most relevant candidate is a conversation chunk (a memory with
    turn ids): :func:`~engrain.recall.budget.with_conversation_evidence`. An explicit
    budget, ``history_evidence`` off, or a pool led by anything else leave it as it is."""
    if (
        call.token_budget is not None
        or not call.options.history_evidence
        or pool.classification.references_history
        or not chunk_led(pool.candidates)
    ):
        return pool.budget
    return with_conversation_evidence(pool.budget, cap=call.max_budget)


def chunk_led(pool: Sequence[Candidate]) -> bool:
    """Whether the most relevant candidate of ``pool`` is a conversation chunk."""
    return bool(pool) and bool(max(pool, key=lambda c: c.relevance).memory.provenance.turn_ids)
