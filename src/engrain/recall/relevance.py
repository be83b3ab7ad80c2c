"""Hybrid candidates and their relevance: dense nearest neighbours and BM25 matches, fused.

The spec's candidates are the ``top_k × 4`` nearest neighbours by embedding only; on LoCoMo
that misses much evidence that lexical matching finds (names, rare words, numbers). Here the
pool is the union of the dense and the lexical top lists, plus the memories the caller
always wants scored (every typed learning, pinned memories). Each candidate's blend is
``0.65 × cosine + 0.35 × support × BM25 / best BM25``, where ``support = min(1, cosine /
0.2)``: a lexical match counts in full only when the meanings overlap too, so one shared
word ("server") with a near-zero cosine adds almost nothing. Its relevance in [0, 1] is
the blend over the best blend of the query (but never over less than ``RELEVANCE_FLOOR``):
the best match of a query that has one scores 1.0, whatever the model's cosine range, so
the gated thresholds mean "this close to the best evidence"; a query with nothing close
keeps low relevance everywhere and the thresholds keep noise out.

The person a message quotes ("priya asked if we could forecast the bakery department
daily", "Jonas floated going back to a PaaS") is who said it, not what it is about: a
typed memory that shares with the query nothing but that person's name ("Priya's team
demos on Fridays") matches the person, not the topic, so its lexical side counts nothing
(:func:`quoted_only`) and the dense similarity alone decides. Conversation chunks keep
their name matches (who said what is what a question about a conversation asks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from engrain.model import MemoryFields, Vector
from engrain.store.base import MemoryFilter, Store
from engrain.store.lexical import tokenize

#: Weight of the lexical side in the relevance blend (the dense side gets the rest).
LEXICAL_WEIGHT = 0.35
#: The blend a clearly relevant memory reaches; the best candidate's blend is scaled to 1.0
#: only when it is at least this high, so an unrelated query keeps low relevance throughout.
RELEVANCE_FLOOR = 0.5
RRF_K = 60
#: The cosine from which a lexical match counts in full; below it, in proportion.
#: all-MiniLM-L6-v2 gives unrelated sentences 0.0-0.1 and related ones 0.3 and more.
LEXICAL_SUPPORT_COSINE = 0.2
#: At most this many of the memories a caller always wants scored join the pool, the
#: nearest first (a project's typed learnings are hundreds; this bounds a huge store).
INCLUDE_MAX = 200


@dataclass(frozen=True)
class Candidate:
    """A memory that may be injected, with the evidence for its relevance; the memory as
    its fields (:class:`~engrain.model.MemoryFields`: a row of a large user's working set
    is built only if selection shows it)."""

    memory: MemoryFields
    similarity: float  # cosine with the query
    lexical: float  # BM25 / best BM25 of the query, in [0, 1]
    relevance: float  # the blend the scorers see
    #: the lexical side dropped (BM25 / best) because the shared terms are no evidence of
    #: a topic: only a quoted person's name or pieces of different numbers
    no_evidence: float = 0.0

    @property
    def id(self) -> str:
        """The memory's id."""
        return self.memory.id


def gather(
    store: Store,
    user_id: str,
    query: str,
    vector: Vector,
    flt: MemoryFilter,
    *,
    pool: int,
    hybrid: bool = True,
    lexical_weight: float = LEXICAL_WEIGHT,
    floor: float = RELEVANCE_FLOOR,
    fusion: str = "blend",
    lexical: Sequence[tuple[MemoryFields, float]] | None = None,
    include: Sequence[tuple[MemoryFields, float]] = (),
    dense: Sequence[tuple[MemoryFields, float]] | None = None,
    fragments: bool = True,
    names: bool = False,
) -> list[Candidate]:
    """The candidate pool among the memories passing ``flt``: the ``pool`` nearest and
    (``hybrid``) the ``pool`` best BM25 matches, plus ``include`` (memories always scored,
    with their cosine), best relevance first. ``lexical`` is
    ``store.lexical_search(user_id, query, pool, flt)`` when the caller already has it, and
    ``dense`` likewise ``store.search(user_id, vector, pool, flt)``. ``fragments``: a
    typed memory sharing with the query only pieces of different numbers gets no lexical
    credit (:func:`fragments_only`; ``False`` is the ablation); ``names``: nor one sharing
    only names the query writes (:func:`names_of`, :func:`named_only`; off by default: it
    changed no label of the gating evaluation, ``docs/decisions.md``)."""
    if dense is None:
        dense = store.search(user_id, vector, pool, flt)
    if not hybrid:
        lexical = []
    elif lexical is None:
        lexical = store.lexical_search(user_id, query, pool, flt)
    best = max((score for _, score in lexical), default=0.0)
    lex = {m.id: score / best for m, score in lexical} if best > 0 else {}
    memories, sims = _union(dense, lexical, include, vector)
    dropped = _without_evidence(lex, lexical, query, fragments,
                                list(memories.values()) if names else None)  # fmt: skip
    lex = {mid: value for mid, value in lex.items() if mid not in dropped}
    # no memory shares a term with the query: the lexical side says nothing about any of
    # them, so it must not halve every memory's relevance (the dense side alone decides)
    weight = lexical_weight if hybrid and lex else 0.0
    ids = list(memories)
    similarity = [sims[mid] for mid in ids]
    lexicals = [lex.get(mid, 0.0) for mid in ids]
    if fusion == "rrf" and hybrid:
        mixed, floor = _rrf(ids, dense, lexical, weight, pool), 0.0
    else:
        mixed = blends(np.array(similarity, dtype=np.float64),
                       np.array(lexicals, dtype=np.float64), weight)  # fmt: skip
    scale = max(float(mixed.max()) if ids else 0.0, floor)
    scaled = mixed / scale
    relevance = np.where(scaled < 1.0, scaled, 1.0)  # min(1.0, blend / scale)
    # best relevance first; equal ones keep the pool's order, as sort(reverse=True) keeps it
    order = np.argsort(-relevance, kind="stable").tolist()
    relevances = relevance.tolist()
    return [
        Candidate(memories[ids[i]], similarity[i], lexicals[i], relevances[i],
                  dropped.get(ids[i], 0.0))
        for i in order
    ]  # fmt: skip


def _union(
    dense: Sequence[tuple[MemoryFields, float]],
    lexical: Sequence[tuple[MemoryFields, float]],
    include: Sequence[tuple[MemoryFields, float]],
    vector: Vector,
) -> tuple[dict[str, MemoryFields], dict[str, float]]:
    """The pool's memories by id, in order (the nearest, then the lexical matches, then
    ``include``), and each one's cosine (a lexical match's computed here)."""
    memories: dict[str, MemoryFields] = {m.id: m for m, _ in dense}
    sims: dict[str, float] = {m.id: s for m, s in dense}
    for memory, _ in lexical:
        if memory.id not in memories:
            memories[memory.id] = memory
            sims[memory.id] = cosine(memory, vector)
    for memory, sim in include:
        if memory.id not in memories:
            memories[memory.id] = memory
            sims[memory.id] = sim
    return memories, sims


def _rrf(
    ids: Sequence[str],
    dense: Sequence[tuple[MemoryFields, float]],
    lexical: Sequence[tuple[MemoryFields, float]],
    weight: float,
    pool: int,
) -> npt.NDArray[np.float64]:
    """Reciprocal rank fusion of each id's rank among the nearest and the lexical matches
    (``pool + 1`` where it is not ranked), the lexical side weighted ``weight``."""
    dense_rank = {m.id: r for r, (m, _) in enumerate(dense)}
    lex_rank = {m.id: r for r, (m, _) in enumerate(lexical)}
    worst = pool + 1
    return np.array([
        (1.0 - weight) / (RRF_K + dense_rank.get(mid, worst))
        + weight / (RRF_K + lex_rank.get(mid, worst))
        for mid in ids
    ], dtype=np.float64)  # fmt: skip


def blend(similarity: float, lexical: float, lexical_weight: float = LEXICAL_WEIGHT) -> float:
    """``(1 - w) × cosine + w × support × lexical``, ``support = min(1, cosine / 0.2)``:
    the lexical side needs some meaning overlap to count."""
    cosine = max(0.0, similarity)
    support = min(1.0, cosine / LEXICAL_SUPPORT_COSINE)
    return (1.0 - lexical_weight) * cosine + lexical_weight * support * lexical


def blends(
    similarity: npt.NDArray[np.float64],
    lexical: npt.NDArray[np.float64],
    lexical_weight: float = LEXICAL_WEIGHT,
) -> npt.NDArray[np.float64]:
    """:func:`blend` of each pair, as one column: the same IEEE operations in the same
    order, each clamp written as Python's ``max(0.0, x)`` / ``min(1.0, x)`` (the constant
    unless ``x`` is strictly greater / less), so every float is :func:`blend`'s to the
    last bit (``tests/test_relevance.py``)."""
    cosine = np.where(similarity > 0.0, similarity, 0.0)
    ratio = cosine / LEXICAL_SUPPORT_COSINE
    support = np.where(ratio < 1.0, ratio, 1.0)
    mixed: npt.NDArray[np.float64] = (1.0 - lexical_weight) * cosine + (
        lexical_weight * support
    ) * lexical
    return mixed


def _without_evidence(
    lex: dict[str, float],
    lexical: Sequence[tuple[MemoryFields, float]],
    query: str,
    fragments: bool,
    memories: Sequence[MemoryFields] | None = None,
) -> dict[str, float]:
    """The matches of ``lex`` whose shared terms are no evidence of a topic, with their
    lexical side: typed memories sharing with the query only the name of a person it quotes
    (:func:`quoted_only`) or names (:func:`names_of` among ``memories``, the pool, when
    given; :func:`named_only`) or (``fragments``) only pieces of numbers the two texts write
    differently (:func:`fragments_only`). Conversation chunks keep every match."""
    sources = quoted(query)
    numbers = written_numbers(query) if fragments else frozenset()
    named = names_of(query, memories) if lex and memories is not None else frozenset()
    if not lex or not (sources or numbers or named):
        return {}
    asked = frozenset(tokenize(query))
    return {
        m.id: lex[m.id]
        for m, _ in lexical
        if m.id in lex
        and not m.provenance.turn_ids
        and (
            (sources and quoted_only(m.content, asked, sources))
            or (named and named_only(m.content, asked, named))
            or (numbers and fragments_only(m.content, asked, numbers))
        )
    }


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


def _starts_sentence(text: str, at: int) -> bool:
    """Whether the word at ``at`` opens ``text`` or a sentence of it."""
    before = text[:at].rstrip()
    return not before or before[-1] in ".!?:;"


@lru_cache(maxsize=65_536)
def proper_nouns(content: str) -> frozenset[str]:
    """The lexical terms ``content`` writes only as names: every occurrence capitalised
    (not all capitals: "API" is a term), at least one of them inside a sentence or
    possessive ("Every Stripe webhook", "Priya's team"); a word seen only at the start of
    sentences says nothing either way."""
    lower: set[str] = set()
    inner: set[str] = set()
    for match in _WORD.finditer(content):
        word = match.group(0)
        terms = tokenize(word)
        if not terms:
            continue
        if not (word[0].isupper() and any(ch.islower() for ch in word[1:])):
            lower.update(terms)
        elif word.endswith("'s") or not _starts_sentence(content, match.start()):
            inner.update(terms)
    return frozenset(inner - lower)


#: A word followed by a verb of reported speech: the person the message quotes.
_REPORTED = re.compile(
    r"\b([a-z][a-z'-]*)\s+(?:asked|asks|said|says|suggested|suggests|floated|floats|"
    r"mentioned|mentions|proposed|proposes|wants|wanted|thinks|thought|told|tells|pinged|"
    r"wrote|writes|reported|reports|complained|argued|argues|feels|felt|insists|insisted)\b",
    re.IGNORECASE,
)


def quoted(query: str) -> frozenset[str]:
    """The lexical terms of the people ``query`` quotes: the word before a verb of reported
    speech ("priya asked", "Jonas floated"), stopwords ("he said") left out."""
    return frozenset(t for m in _REPORTED.finditer(query) for t in tokenize(m.group(1)))


#: A word written capitalised (not all capitals: "API", "MRN" are terms) after another word
#: of its sentence: a name ("fyi Wen is taking over", "ask Ingrid").
_CAPITALISED = re.compile(r"(?<=[^\s.!?:;])\s+([A-Z][a-z][A-Za-z'-]*)")


def names_of(query: str, memories: Sequence[MemoryFields]) -> frozenset[str]:
    """The lexical terms of the people (and places) ``query`` names: its words written
    capitalised inside a sentence that no memory of ``memories`` (the candidates) writes
    otherwise (in lower case: "stripe.Webhook", "the artemis broker") or tags as a domain.
    A service, a table or a tool is written in lower case in a project's code, commands
    and identifiers; a person's name never is."""
    written = {t for m in _CAPITALISED.finditer(query) for t in tokenize(m.group(1))}
    if not written:
        return frozenset()
    topical = {d for m in memories for d in m.domains} | {
        t for m in memories if written & _terms(m.content) for t in lower_terms(m.content)
    }
    return frozenset(written - topical)


def named_only(content: str, query_terms: frozenset[str], names: frozenset[str]) -> bool:
    """Whether ``content`` shares with the query (``query_terms``) at least one term and
    only names it writes (``names``, :func:`names_of`: no candidate writes them otherwise)."""
    shared = query_terms & _terms(content)
    return bool(shared) and shared <= names


@lru_cache(maxsize=65_536)
def lower_terms(content: str) -> frozenset[str]:
    """The lexical terms ``content`` writes at least once not capitalised ("stripe" in
    "stripe.Webhook", "api" in "API": every word but a capitalised one)."""
    out: set[str] = set()
    for match in _WORD.finditer(content):
        word = match.group(0)
        if not (word[0].isupper() and any(ch.islower() for ch in word[1:])):
            out.update(tokenize(word))
    return frozenset(out)


def quoted_only(content: str, query_terms: frozenset[str], sources: frozenset[str]) -> bool:
    """Whether ``content`` shares with the query (``query_terms``, the query's
    :func:`~engrain.store.lexical.tokenize`) at least one term and only terms that are
    quoted people (``sources``, :func:`quoted`) written as names in ``content``
    (:func:`proper_nouns`)."""
    shared = query_terms.intersection(tokenize(content))
    return bool(shared) and shared <= (sources & proper_nouns(content))


#: A number as written: digits, and digits joined by ".", ":", ",", "/" or "-" ("3.1.2",
#: "24:00:00", "2026-01-08", "1,000"). The lexical terms cut it into its digit runs.
_NUMBER = re.compile(r"\d+(?:[.:,/-]\d+)*")


@lru_cache(maxsize=65_536)
def written_numbers(text: str) -> frozenset[str]:
    """The numbers ``text`` writes, whole (:data:`_NUMBER`)."""
    return frozenset(_NUMBER.findall(text))


@lru_cache(maxsize=65_536)
def _terms(content: str) -> frozenset[str]:
    """``content``'s lexical terms (:func:`~engrain.store.lexical.tokenize`)."""
    return frozenset(tokenize(content))


def fragments_only(content: str, query_terms: frozenset[str], numbers: frozenset[str]) -> bool:
    """Whether ``content`` shares with the query (``query_terms``, its terms; ``numbers``,
    :func:`written_numbers` of it) at least one term and only digit runs that are pieces of
    different numbers: "00" of "24:00:00" and of "15:00" says nothing about a topic, while
    "3.1.2" written in both is one (each of its runs then counts)."""
    shared = query_terms & _terms(content)
    if not shared or not all(term.isdigit() for term in shared):
        return False
    both = numbers & written_numbers(content)
    whole = {run for number in both for run in re.findall(r"\d+", number)}
    return not shared & whole


def cosine(memory: MemoryFields, vector: Vector) -> float:
    """The memory's cosine with ``vector`` (0 without an embedding)."""
    if memory.embedding is None:
        return 0.0
    return float(np.dot(memory.embedding, vector))
