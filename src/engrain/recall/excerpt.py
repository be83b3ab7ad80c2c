"""A conversation chunk rendered with only the lines a question needs (issue 15).

A conversation chunk holds several consecutive turns (50–300 tokens, one ``Speaker: text``
line each); the question usually needs one or two of them. With ``GateOptions.excerpt``
above 0, every ranked conversation chunk is replaced, for this call only, by an *excerpt*:
a copy of the memory whose content is its best-matching lines and whose provenance names
only their turns. Selection, the budget check and rendering then work on the copy as on
any memory, so the block's token count stays exact and a turn left out of the excerpt is
not among the turns the context reports (an evidence turn that is cut is not found).
The stored memory is untouched (the transcript stays the record); use counting reads
the copy's id only.

A line's score is its cosine with the question (the line vectors ``recall.turns`` derives
through the embedding cache, when the call has the query vector) plus the lexical match
of the question's terms (``IDF``-weighted over the lines of this call's ranked chunks,
scaled to the best line of the pool) times :data:`LEXICAL_SHARE`. A chunk keeps its
:data:`EXCERPT_LINES` best lines, and around each kept line the question it answers (the
line before ends with ``?``) and the answer it asks for (it ends with ``?``).

A chunk is kept whole when its lines cannot be matched one to one with its turn ids (a
long turn split over lines, a near-duplicate merge that added turns), when it has no more
lines than the excerpt would keep, or when the excerpt would not be shorter.

Measured on LoCoMo's half A it does not pay, so :data:`EXCERPT_LINES` is 0 and nothing
here runs unless a caller asks (``docs/decisions.md``): LoCoMo's turns are long, so its
chunks hold one or two of them (conv-26: 195 of 224 chunks, 72 tokens on average), an
excerpt saves ~2–12% of the tokens, and the line it cuts is often the evidence (one line:
within 2,000 tokens 0.870 → 0.823).

Concurrency: pure functions of their arguments; the line vectors come from
:mod:`engrain.recall.turns`' per-process snapshots (see there).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engrain.model import Memory, MemoryFields, Provenance, Vector, content_hash
from engrain.recall.select import Ranked
from engrain.recall.turns import TurnIndex, indexes
from engrain.store.base import Store
from engrain.store.lexical import tokenize

#: Lines an excerpt keeps (0: off, chunks rendered whole; LoCoMo half A, issue 15), before
#: the questions and answers around them.
EXCERPT_LINES = 0
#: Weight of the lexical match (over the pool's best line) beside the line's cosine.
LEXICAL_SHARE = 0.35
#: Whether a kept line brings the question before it and the answer after it.
QUESTION_NEIGHBOURS = True


@dataclass(frozen=True)
class ExcerptRule:
    """How excerpts are cut: lines kept, the lexical share, question/answer neighbours,
    and how many of the best-ranked chunks stay whole."""

    lines: int = EXCERPT_LINES
    lexical_share: float = LEXICAL_SHARE
    neighbours: bool = QUESTION_NEIGHBOURS
    whole_first: int = 0
    use_vectors: bool = True
    margin: float = 1.0e9


#: The rule ``GateOptions.excerpt`` defaults to.
EXCERPT = ExcerptRule()


def chunk_lines(memory: MemoryFields) -> list[str] | None:
    """The lines of a conversation chunk, one per turn id in order, or ``None`` when they
    do not match its turn ids one to one (not a chunk, a turn split over lines, turns a
    near-duplicate merge added)."""
    ids = memory.provenance.turn_ids
    if not ids or "history" in memory.provenance.metadata:
        return None
    lines = memory.content.split("\n")
    if len(lines) != len(ids) or any(not line.strip() for line in lines):
        return None
    return lines


def kept_lines(scores: Sequence[float], lines: Sequence[str], rule: ExcerptRule) -> list[int]:
    """Indexes of the lines an excerpt keeps, in order: the ``rule.lines`` best by
    ``scores`` (ties: the earlier line), and (``rule.neighbours``) the question each kept
    line answers and the answer each kept question asks for."""
    best = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: rule.lines]
    best = [i for i in best if scores[i] >= scores[best[0]] - rule.margin]
    keep = set(best)
    if rule.neighbours:
        for i in best:
            if i > 0 and lines[i - 1].rstrip().endswith("?"):
                keep.add(i - 1)
            if i + 1 < len(lines) and lines[i].rstrip().endswith("?"):
                keep.add(i + 1)
    return sorted(keep)


def excerpt(memory: MemoryFields, keep: Sequence[int]) -> Memory:
    """A copy of ``memory`` holding only its lines ``keep`` and their turn ids (its content
    split per :func:`chunk_lines`)."""
    lines = memory.content.split("\n")
    ids = memory.provenance.turn_ids
    text = "\n".join(lines[i] for i in keep)
    provenance = Provenance(tuple(ids[i] for i in keep), memory.provenance.metadata)
    built = memory.built()
    return built.evolve(content=text, content_hash=content_hash(text), provenance=provenance)


#: A chunk's line vectors, one row per line, or ``None`` when unknown.
LineVectors = Callable[[MemoryFields], "npt.NDArray[np.float32] | None"]


def with_excerpts(
    ranked: Sequence[Ranked],
    message: str,
    rule: ExcerptRule,
    line_vectors: LineVectors | None = None,
    vector: Vector | None = None,
) -> list[Ranked]:
    """``ranked`` with each conversation chunk (after the ``rule.whole_first`` best ranked)
    replaced by its excerpt (see the module); unchanged when ``rule.lines`` is 0."""
    if rule.lines <= 0:
        return list(ranked)
    chunks: dict[int, list[str]] = {}
    for n, r in enumerate(ranked):
        lines = chunk_lines(r.memory)
        if lines is not None and len(lines) > rule.lines:
            chunks[n] = lines
    if not chunks:
        return list(ranked)
    terms = set(tokenize(message))
    tokens = {n: [set(tokenize(line)) & terms for line in lines] for n, lines in chunks.items()}
    df: Counter[str] = Counter(t for found in tokens.values() for line in found for t in line)
    total = sum(len(lines) for lines in chunks.values())
    idf = {t: math.log(1.0 + total / df[t]) for t in df}
    lexical = {n: [sum(idf[t] for t in line) for line in found] for n, found in tokens.items()}
    top = max((s for scores in lexical.values() for s in scores), default=0.0) or 1.0
    query = np.asarray(vector, dtype=np.float32) if vector is not None else None
    out = list(ranked)
    seen = 0
    for n, r in enumerate(ranked):
        if not r.memory.provenance.turn_ids:
            continue
        seen += 1
        if n not in chunks or seen <= rule.whole_first:
            continue
        lines = chunks[n]
        scores = [rule.lexical_share * s / top for s in lexical[n]]
        use = rule.use_vectors and line_vectors is not None and query is not None
        vectors = line_vectors(r.memory) if use and line_vectors else None
        if vectors is not None and query is not None and len(vectors) == len(lines):
            scores = [a + float(b) for a, b in zip(scores, vectors @ query, strict=True)]
        keep = kept_lines(scores, lines, rule)
        if len(keep) < len(lines):
            out[n] = r._replace(memory=excerpt(r.memory, keep))
    return out


def store_line_vectors(
    store: Store, user_id: str, embed_query: Callable[[str], Vector]
) -> LineVectors | None:
    """The line vectors of the user's conversation chunks, as ``recall.turns`` derives them
    (one snapshot per user and revision), or ``None`` when the embedder cannot embed a
    batch."""
    embed = getattr(getattr(embed_query, "__self__", None), "embed", None)
    if not callable(embed):
        return None
    built: list[TurnIndex] = []

    def of(memory: MemoryFields) -> npt.NDArray[np.float32] | None:
        if not built:  # the snapshot is read at the first chunk that needs it
            built.append(indexes(store).of(store, user_id, embed))
        index = built[0]
        if index.hashes.get(memory.id) != memory.content_hash:
            return None
        return index.lines(memory.id)

    return of
