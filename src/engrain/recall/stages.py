"""What each stage of :func:`~engrain.recall.gate.gate` hands the next.

:class:`Call` is one call's inputs, which every stage reads; :class:`Understood` (classify →
budget), :class:`Pool` (candidates, with the :class:`Marks` of its rules), :class:`Ranking`
(score) and :class:`Selection` (select) are what each stage gives; :class:`Started` the reads
begun before the query vector is known; :class:`Clock` the stages' laps. All are made per
call and dropped with it: nothing here is shared between calls or threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from engrain.feedback import Pairs
from engrain.model import Memory, MemoryFields, Vector
from engrain.recall.budget import Budget
from engrain.recall.classify import Classification
from engrain.recall.excerpt import LineVectors
from engrain.recall.options import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.results import Decision, ScoredMemory
from engrain.recall.select import Ranked
from engrain.recall.work import Work
from engrain.store.base import MemoryFilter, Store
from engrain.store.reads import Reads


class Call(NamedTuple):
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
    clock: Clock


class Clock:
    """Per-stage wall-clock laps in milliseconds."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = (now - self._last) * 1000.0
        self._last = now


class Started(NamedTuple):
    """The reads that need no query vector, begun for a pool of ``size``."""

    size: int
    lexical: Callable[[], Sequence[tuple[MemoryFields, float]]] | None
    pinned: Callable[[], list[Memory]]


class Understood(NamedTuple):
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
    started: Started | None


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


class Pool(NamedTuple):
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


class Ranking(NamedTuple):
    """score: the candidates best first, their components (``explain``), the conflict
    partners of the ranked, and the budget set by how clearly the best leads (``by_lead``:
    filled in score order)."""

    pool: Pool
    ranked: list[Ranked]
    components: dict[str, dict[str, float]]
    partners: dict[str, list[Ranked]]
    budget: Budget
    by_lead: bool


class Selection(NamedTuple):
    """select: the memories selected and, with ``explain``, a decision per candidate."""

    ranking: Ranking
    selected: list[ScoredMemory]
    decisions: list[Decision]
