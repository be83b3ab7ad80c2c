"""A conversation chunk found by its best turn (issue 15): an option, off by default.

A conversation chunk holds several turns (50–300 tokens) embedded as one text; all-MiniLM
truncates at 256 word pieces and averages what it reads, so a turn deep in a chunk is
diluted or not seen at all. With ``GateOptions.turn_weight`` above 0, every line of a
conversation chunk (a turn, or a part of a long one: :func:`~engrain.ingest.chunk.turn_lines`)
has a vector of its own, and the dense similarity of a chunk is
``(1 - w) × cosine + w × max(cosine, best line's cosine)``; the chunks whose best line is
among the nearest join the dense candidates even when the chunk's own vector is not.
Measured on LoCoMo's half A it does not pay (``docs/decisions.md``: ``w`` 1 loses 0.016
within 2,000 tokens and 0.04 on multi-hop, 0.25 and 0.5 are within ±0.004 of off), so
:data:`TURN_WEIGHT` is 0 and nothing here runs unless a caller asks.

The line vectors are derived data: the embeddings of the lines of the stored text, read
through the engine's content-hash embedding cache (embedded at the first recall that needs
them, then cached for every process; ``copy_store`` copies them with the memories'), so
nothing new is stored and an export loses nothing. Each process keeps, per store and user,
a :class:`TurnIndex` snapshot: the lines' vectors in one matrix, rebuilt when the user's
:meth:`~engrain.store.base.Store.revision` changes (any write by any process), a memory's
vectors reused while its content hash holds. A forgotten or edited memory's lines leave the
index with the revision that removed it.

Concurrency: snapshots are immutable and replaced whole under a lock; two threads that
find a stale snapshot may both rebuild it (the same result), never read a half-built one.
A snapshot labelled with a revision read *before* its memories were listed is at worst
older than the label says, and the next revision change rebuilds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from engrain.ingest.chunk import turn_lines
from engrain.model import Memory, MemoryFields, Vector
from engrain.recall.per_revision import Embed, StoreIndexes
from engrain.store.base import MemoryFilter, Store

#: Weight of the best line in a conversation chunk's dense similarity: off (half A, issue 15).
TURN_WEIGHT = 0.0


@dataclass(frozen=True)
class TurnIndex:
    """One user's conversation chunks of two or more lines, as one matrix of line vectors:
    chunk ``ids[i]`` owns rows ``starts[i]`` up to ``starts[i + 1]``."""

    revision: int
    ids: tuple[str, ...] = ()
    starts: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    matrix: npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.float32)
    )
    hashes: Mapping[str, str] = field(default_factory=dict)  # memory id → content hash
    position: Mapping[str, int] = field(default_factory=dict)  # memory id → index in ids

    def best(self, vector: Vector) -> npt.NDArray[np.float32]:
        """Each chunk's best line cosine with ``vector``, in the order of :attr:`ids`."""
        if not self.ids:
            return np.zeros(0, dtype=np.float32)
        sims = self.matrix @ np.asarray(vector, dtype=np.float32)
        return np.maximum.reduceat(sims, self.starts)

    def lines(self, memory_id: str) -> npt.NDArray[np.float32]:
        """The line vectors of one indexed chunk."""
        i = self.position[memory_id]
        end = self.starts[i + 1] if i + 1 < len(self.ids) else len(self.matrix)
        return self.matrix[self.starts[i] : end]


def build(
    memories: Sequence[Memory], revision: int, embed: Embed, previous: TurnIndex | None = None
) -> TurnIndex:
    """The index of ``memories``' conversation chunks (memories with turn ids, an embedding
    and two or more lines); a chunk whose content hash is unchanged since ``previous``
    keeps its vectors, the other lines are embedded in one batch."""
    chunks: list[tuple[Memory, Sequence[str]]] = []
    for memory in memories:
        if not memory.provenance.turn_ids or memory.embedding is None:
            continue
        lines = turn_lines(memory.content)
        if len(lines) >= 2:
            chunks.append((memory, lines))
    return index_of(chunks, revision, embed, previous)


def index_of(
    chunks: Sequence[tuple[Memory, Sequence[str]]],
    revision: int,
    embed: Embed,
    previous: TurnIndex | None = None,
) -> TurnIndex:
    """The index of each memory's pieces (its lines, or :mod:`~engrain.recall.sentences`'
    sentences) in the order given: a memory whose content hash is unchanged since
    ``previous`` keeps its vectors, the other pieces are embedded in one batch."""
    kept: dict[str, npt.NDArray[np.float32]] = {}
    wanted: list[str] = []
    for memory, lines in chunks:
        if previous is not None and previous.hashes.get(memory.id) == memory.content_hash:
            kept[memory.id] = previous.lines(memory.id)
        else:
            wanted.extend(lines)
    fresh = np.asarray(embed(wanted), dtype=np.float32) if wanted else None
    blocks: list[npt.NDArray[np.float32]] = []
    row = 0
    for memory, lines in chunks:
        if memory.id in kept:
            blocks.append(kept[memory.id])
        else:
            assert fresh is not None
            blocks.append(fresh[row : row + len(lines)])
            row += len(lines)
    if not blocks:
        return TurnIndex(revision)
    sizes = np.array([len(b) for b in blocks], dtype=np.intp)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp)
    ids = tuple(m.id for m, _ in chunks)
    return TurnIndex(
        revision=revision, ids=ids, starts=starts, matrix=np.vstack(blocks),
        hashes={m.id: m.content_hash for m, _ in chunks},
        position={mid: i for i, mid in enumerate(ids)},
    )  # fmt: skip


def _build_for(
    memories: Sequence[Memory],
    user_id: str,
    revision: int,
    embed: Embed,
    previous: TurnIndex | None,
) -> TurnIndex:
    """:func:`build` as :class:`~engrain.recall.per_revision.StoreIndexes` calls it."""
    return build(memories, revision, embed, previous)


#: The process's turn indexes of a store: ``indexes(store).of(store, user_id, embed)``.
indexes: StoreIndexes[TurnIndex] = StoreIndexes(_build_for)


def turn_similarity(chunk: float, turn: float, weight: float) -> float:
    """``(1 - weight) × chunk + weight × max(chunk, turn)``: a chunk is at least as close
    as its own vector says, and (``weight`` 1) as close as its best line."""
    return (1.0 - weight) * chunk + weight * max(chunk, turn)


def with_turns(
    store: Store,
    embed_query: Callable[[str], Vector],
    user_id: str,
    vector: Vector,
    dense: Sequence[tuple[MemoryFields, float]],
    k: int,
    flt: MemoryFilter,
    weight: float = TURN_WEIGHT,
) -> list[tuple[MemoryFields, float]]:
    """``dense`` (the ``k`` nearest by each memory's own vector) with every conversation
    chunk's similarity raised to its best line's (:func:`turn_similarity`), joined by the
    chunks passing ``flt`` whose best line is among the ``k`` best, nearest first.
    Unchanged when ``weight`` is 0, when no dense hit is a conversation chunk (a project
    memory without transcripts pays nothing), or when the embedder cannot embed a batch."""
    embed = getattr(getattr(embed_query, "__self__", None), "embed", None)
    if weight <= 0.0 or not callable(embed) or not any(m.provenance.turn_ids for m, _ in dense):
        return list(dense)
    index = indexes(store).of(store, user_id, embed)
    if not index.ids:
        return list(dense)
    best = index.best(vector)
    found: dict[str, tuple[MemoryFields, float]] = {m.id: (m, s) for m, s in dense}
    top = np.argsort(-best, kind="stable")[:k]
    missing = [index.ids[i] for i in top if index.ids[i] not in found]
    for memory in _memories(store, user_id, missing):
        if flt.matches(memory):
            found[memory.id] = (memory, _cosine(memory, vector))
    out: list[tuple[MemoryFields, float]] = []
    for fields, sim in found.values():
        at = index.position.get(fields.id)
        turn = float(best[at]) if at is not None else sim
        out.append((fields, turn_similarity(sim, turn, weight)))
    out.sort(key=lambda pair: pair[1], reverse=True)
    return out


def _memories(store: Store, user_id: str, ids: Sequence[str]) -> list[Memory]:
    """These memories as the store has them now (from a working set when it keeps one)."""
    if not ids:
        return []
    cached = getattr(store, "cached", None)
    found: list[Memory] = cached(user_id, ids) if callable(cached) else store.get(user_id, ids)
    return found


def _cosine(memory: Memory, vector: Vector) -> float:
    if memory.embedding is None:
        return 0.0
    return float(np.dot(memory.embedding, vector))
