"""Session summaries as extra candidates (issue 15): a conversation's gist beside its turns.

A question about a person's leanings, habits or a period of their life ("What might John's
political leaning be?") is answered by several turns of a session that share few words
with it. With ``GateOptions.session_summaries`` above 0, each of the user's conversation
sessions gets an extractive summary, derived here and never stored (the session is not
compressed or deleted; nothing to export or migrate), and the ``n`` summaries that match
the message best join the candidate pool, scored and selected like any memory.

A summary is made of whole turns: those that together cover the session's names,
numbers, dates and technical terms (the compression stage's rule, ``docs/decisions.md``,
by turns instead of sentences), ≤ 120 words, in the order they were said. Its provenance
names exactly those turns, so a context reports no turn it does not show whole (a
sentence-level summary would show parts of turns it could not honestly name). It is an
episodic memory of kind ``summary`` dated at its session (``event_at``) with a derived id
(:func:`summary_id`). Its relevance is the pool's blend
(:func:`~engrain.recall.relevance.blend`: its cosine with the message, its BM25 among the
user's summaries over the best) over the pool's own scale, so it competes on the same
footing as the chunks.

Measured on LoCoMo's half A the summaries do not pay at equal tokens, so
:data:`SESSION_SUMMARIES` is 0 and nothing here runs unless a caller asks
(``docs/decisions.md``): one summary joining the pool moves within 2,000 tokens 0.870 →
0.872 and the automatic budget 0.768 → 0.782 but at 619 tokens instead of 559; three
raise open-domain questions 0.629 → 0.650 and lower multi-hop ones 0.694 → 0.678.

Derived data, kept per process (like :mod:`engrain.recall.turns`): per store and user a
:class:`SummaryIndex` labelled with the user's revision, rebuilt when it changes; a
session whose chunks are unchanged keeps its summary and vector, the others are
summarised and embedded (through the engine's embedding cache) in one batch.

Concurrency: snapshots are immutable and replaced whole under a lock; two threads finding
a stale one may both rebuild it (the same result), never read a half-built one. A
summary's id never names a stored row, so use counting and feedback on it change nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from engrain.compress import SUMMARY_MAX_WORDS, key_terms, sessions
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, content_hash
from engrain.recall.per_revision import Embed, StoreIndexes
from engrain.recall.relevance import RELEVANCE_FLOOR, Candidate, blend
from engrain.store.base import MemoryFilter, Store
from engrain.store.lexical import LexicalIndex

#: How many session summaries join the candidate pool (0: none; LoCoMo half A, issue 15).
SESSION_SUMMARIES = 0


def summary_id(user_id: str, session_id: str) -> str:
    """The derived id of a session's summary: 32 hex characters like a memory's, fixed
    for the user and session, and never a stored memory's (those are random)."""
    return hashlib.sha256(f"summary\0{user_id}\0{session_id}".encode()).hexdigest()[:32]


def session_turns(chunks: Sequence[Memory]) -> list[tuple[str, str]]:
    """The ``(line, turn id)`` of each turn of ``chunks``, in order; a chunk whose lines do
    not match its turn ids one to one (a turn split over lines, a merge) gives none."""
    out: list[tuple[str, str]] = []
    for memory in chunks:
        lines = memory.content.split("\n")
        if len(lines) == len(memory.provenance.turn_ids):
            out.extend(zip(lines, memory.provenance.turn_ids, strict=True))
    return out


def pick_turns(lines: Sequence[str], max_words: int = SUMMARY_MAX_WORDS) -> list[int]:
    """Indexes of the turns (``Speaker: text`` lines) that together cover the most names,
    numbers, dates and technical terms (:func:`~engrain.compress.key_terms` of each),
    picked greedily (most new terms first, the earlier on a tie) within ``max_words``, in
    the order they were said; a turn that adds no term is never picked."""
    terms = [key_terms(line) for line in lines]
    sizes = [len(line.split()) for line in lines]
    covered: set[str] = set()
    chosen: list[int] = []
    words = 0
    while True:
        best, gain = -1, 0
        for i, found in enumerate(terms):
            new = len(found - covered)
            if i not in chosen and new > gain and words + sizes[i] <= max_words:
                best, gain = i, new
        if best < 0:
            return sorted(chosen)
        chosen.append(best)
        covered |= terms[best]
        words += sizes[best]


def summarise_session(user_id: str, session_id: str, chunks: Sequence[Memory]) -> Memory | None:
    """The summary memory of one session's conversation chunks (in the order they
    happened): its key turns, whole (:func:`pick_turns`), without a vector; ``None`` when
    no turn carries a term."""
    turns = session_turns(chunks)
    chosen = pick_turns([line for line, _ in turns])
    if not chosen:
        return None
    text = "\n".join(turns[i][0] for i in chosen)
    projects = {m.project for m in chunks}
    return Memory(
        id=summary_id(user_id, session_id), user_id=user_id, content=text,
        memory_type=MemoryType.EPISODIC, kind=Kind.SUMMARY,
        created_at=min(m.created_at for m in chunks),
        updated_at=max(m.updated_at for m in chunks),
        event_at=min(m.when for m in chunks), session_id=session_id,
        project=projects.pop() if len(projects) == 1 else None,
        domains=tuple(dict.fromkeys(d for m in chunks for d in m.domains)),
        importance=max(m.importance for m in chunks),
        provenance=Provenance(tuple(turns[i][1] for i in chosen),
                              {"summarized_by": "extractive", "derived": True}),
        content_hash=content_hash(text),
    )  # fmt: skip


@dataclass(frozen=True)
class SummaryIndex:
    """One user's session summaries at one revision, their vectors as one matrix and a
    BM25 index over their texts."""

    revision: int
    memories: tuple[Memory, ...] = ()
    matrix: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.float32)
    )
    lexical: LexicalIndex | None = None
    signatures: Mapping[str, str] = field(default_factory=dict)  # session id → its chunks'


def _signature(chunks: Sequence[Memory]) -> str:
    return hashlib.sha256("\0".join(m.content_hash for m in chunks).encode()).hexdigest()


def build(
    memories: Sequence[Memory],
    user_id: str,
    revision: int,
    embed: Embed,
    previous: SummaryIndex | None = None,
) -> SummaryIndex:
    """The summaries of the sessions of ``memories``' conversation chunks (uncompressed
    episodic memories with turn ids and a session id); a session whose chunks are as in
    ``previous`` keeps its summary and vector, the new summaries are embedded in one batch."""
    reused = {m.session_id: (m, i) for i, m in enumerate(previous.memories)} if previous else {}
    found: list[Memory] = []
    vectors: list[npt.NDArray[np.float32] | None] = []
    signatures: dict[str, str] = {}
    chunks = [m for m in memories if m.provenance.turn_ids]
    for session in sessions(chunks):
        signature = _signature(session.memories)
        signatures[session.session_id] = signature
        old = reused.get(session.session_id)
        same = previous is not None and previous.signatures.get(session.session_id) == signature
        if old is not None and previous is not None and same:
            found.append(old[0])
            vectors.append(previous.matrix[old[1]])
            continue
        summary = summarise_session(user_id, session.session_id, session.memories)
        if summary is not None:
            found.append(summary)
            vectors.append(None)
    if not found:
        return SummaryIndex(revision, signatures=signatures)
    fresh = [i for i, v in enumerate(vectors) if v is None]
    if fresh:
        embedded = np.asarray(embed([found[i].content for i in fresh]), dtype=np.float32)
        for row, i in enumerate(fresh):
            vectors[i] = embedded[row]
    matrix = np.vstack([v for v in vectors if v is not None]).astype(np.float32)
    return SummaryIndex(
        revision, tuple(found), matrix, LexicalIndex([m.content for m in found]), signatures
    )


#: The process's summary indexes of a store: ``indexes(store).of(store, user_id, embed)``.
indexes: StoreIndexes[SummaryIndex] = StoreIndexes(build)


def with_summaries(
    pool: Sequence[Candidate],
    store: Store,
    embed_query: Callable[[str], Vector],
    user_id: str,
    message: str,
    vector: Vector | None,
    flt: MemoryFilter,
    count: int = SESSION_SUMMARIES,
    lexical_weight: float = 0.35,
) -> list[Candidate]:
    """``pool`` joined by the ``count`` session summaries passing ``flt`` that match
    ``message`` best (see the module), best relevance first; ``vector`` is the message's
    (embedded here when ``None``), ``lexical_weight`` the pool's (0 when not hybrid).
    Unchanged when ``count`` is 0, when no candidate is a conversation chunk (a project
    memory without transcripts pays nothing), or when the embedder cannot embed a batch."""
    embed = getattr(getattr(embed_query, "__self__", None), "embed", None)
    if count <= 0 or not callable(embed) or not any(c.memory.provenance.turn_ids for c in pool):
        return list(pool)
    index = indexes(store).of(store, user_id, embed)
    if not index.memories or index.lexical is None:
        return list(pool)
    if vector is None:
        vector = embed_query(message)
    sims = index.matrix @ np.asarray(vector, dtype=np.float32)
    bm25 = index.lexical.scores(message)
    best = float(bm25.max()) if len(bm25) else 0.0
    weight = lexical_weight if best > 0 and any(c.lexical > 0 for c in pool) else 0.0
    lexical = [float(b) / best if best > 0 else 0.0 for b in bm25]
    blends = [blend(float(s), b, weight) for s, b in zip(sims, lexical, strict=True)]
    scale = max([RELEVANCE_FLOOR, *(blend(c.similarity, c.lexical, weight) for c in pool)])
    known = {c.id for c in pool}
    order = sorted(range(len(blends)), key=lambda i: -blends[i])
    joined: list[Candidate] = []
    for i in order:
        memory = index.memories[i]
        if len(joined) >= count:
            break
        if memory.id in known or not flt.matches(memory):
            continue
        relevance = min(1.0, blends[i] / scale)
        joined.append(Candidate(memory, float(sims[i]), lexical[i], relevance))
    out = [*pool, *joined]
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out
