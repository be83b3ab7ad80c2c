"""A typed learning found by its best sentence or step (issue 12): an option, off by default.

A golden path of six steps, a decision with its three reasons or an invariant with its
exceptions is embedded as one mean-pooled vector: a message that asks about one step ("how
do I redo just the annotation") meets the average of all of them and loses to a short
memory that says less. With ``GateOptions.sentence_weight`` above 0, every typed learning
(an invariant, pattern, decision, antipattern, golden path, preference or correction) of two
pieces or more has a vector per piece (:func:`pieces`: its sentences, its clauses after
";", its numbered or arrowed steps, each prefixed with the learning's own heading when it
opens with one, "Resuming a failed run: …"). Its evidence is its own cosine's quantile
among the candidates raised towards its best piece's chance of being that close
(:func:`lifted`: ``(1 - w) × G + w × max(G, F(best) ** n)``, the conversation chunks'
:func:`~engrain.recall.turns.turn_similarity` on quantiles), and the memories are given
their own cosines in that order (:func:`on_cosine_scale`), so the thresholds keep the scale
they were set on. Measured over the gating evaluation's nine tune halves it ranks the
labelled memories better but moves no label net, and leaving one project out chooses it for
no set (``docs/classification.md``, session 25, h2): hence off.

The piece vectors are derived data, as the conversation chunks' line vectors are
(``recall/turns.py``): embedded through the engine's content-hash embedding cache at the
first recall that needs them, kept per store and user in a snapshot rebuilt when the user's
revision changes (any write by any process), a memory's vectors reused while its content
hash holds. Nothing new is stored, so an export, an import and every backend are unchanged.

Concurrency: snapshots are immutable and replaced whole (``recall/per_revision.py``); two
threads that find one stale both rebuild it (the same result), never read a half-built one;
a snapshot is at worst older than its revision label, and the next revision change rebuilds
it. A piece vector is a function of the text alone, so any process computes the same one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from engrain.model import Kind, Memory, MemoryFields, Vector
from engrain.recall.per_revision import Embed, StoreIndexes
from engrain.recall.turns import TurnIndex, index_of, turn_similarity
from engrain.store.base import Store

#: Weight of the best piece in a typed learning's dense similarity: off by default.
SENTENCE_WEIGHT = 0.0
#: The kinds whose memories are split: the typed learnings every call scores.
SPLIT_KINDS = frozenset({
    Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.ANTIPATTERN, Kind.GOLDEN_PATH,
    Kind.PREFERENCE, Kind.CORRECTION,
})  # fmt: skip
#: A piece shorter than this many words joins the piece before it: "2) bump" says nothing.
MIN_WORDS = 4
#: A heading ("Resuming a failed run:", "Releasing kestrel:") is at most this many words.
HEADING_WORDS = 8

#: Where a learning's text divides: a sentence's end before a capital, digit or quote; a
#: ";"; an arrow between steps; a numbered step "2)" / "(2)" / "2." after a separator.
_BREAK = re.compile(
    r"(?<=[.!?])\s+(?=[A-Z0-9\"'(`])"
    r"|;\s+"
    r"|\s+(?:->|→|=>)\s+"
    r"|(?<=[,:;])\s+(?=\(?\d{1,2}[.)]\s)"
    r"|\n+"
)
_HEADING = re.compile(r"^([^:.;\n]{3,80}):\s+(?=\S)")
_STEP_NUMBER = re.compile(r"^\(?\d{1,2}[.)]\s+")


@lru_cache(maxsize=16_384)
def pieces(content: str) -> tuple[str, ...]:
    """The pieces of a learning's text that get a vector of their own: its sentences,
    ";"-clauses and steps (:data:`_BREAK`), a piece under :data:`MIN_WORDS` words joined to
    the one before, each prefixed with the text's heading (the words before its first ":",
    at most :data:`HEADING_WORDS`) so a step still names its procedure. A text of one piece
    gives ``()``: its own vector is its best piece."""
    text = content.strip()
    heading = ""
    found = _HEADING.match(text)
    if found and len(found.group(1).split()) <= HEADING_WORDS:
        heading, text = found.group(1).strip(), text[found.end() :]
    parts: list[str] = []
    for raw in _BREAK.split(text):
        part = _STEP_NUMBER.sub("", raw.strip()).strip(" ,;")
        if not part:
            continue
        if parts and len(part.split()) < MIN_WORDS:
            parts[-1] = f"{parts[-1]}; {part}"
        elif not parts or len(parts[-1].split()) >= MIN_WORDS:
            parts.append(part)
        else:
            parts[-1] = f"{parts[-1]}; {part}"
    if len(parts) < 2:
        return ()
    return tuple(f"{heading}: {p}" if heading else p for p in parts)


def build(
    memories: Sequence[Memory], revision: int, embed: Embed, previous: TurnIndex | None = None
) -> TurnIndex:
    """The index of ``memories``' typed learnings of two pieces or more (with an embedding,
    not a conversation chunk); a learning whose content hash is unchanged since
    ``previous`` keeps its vectors, the other pieces are embedded in one batch."""
    split: list[tuple[Memory, Sequence[str]]] = []
    for memory in memories:
        if memory.kind not in SPLIT_KINDS or memory.provenance.turn_ids:
            continue
        if memory.embedding is None:
            continue
        found = pieces(memory.content)
        if found:
            split.append((memory, found))
    return index_of(split, revision, embed, previous)


def _build_for(
    memories: Sequence[Memory],
    user_id: str,
    revision: int,
    embed: Embed,
    previous: TurnIndex | None,
) -> TurnIndex:
    """:func:`build` as :class:`~engrain.recall.per_revision.StoreIndexes` calls it."""
    return build(memories, revision, embed, previous)


#: The process's piece indexes of a store: ``indexes(store).of(store, user_id, embed)``.
indexes: StoreIndexes[TurnIndex] = StoreIndexes(_build_for)


def with_sentences(
    index: TurnIndex | None,
    vector: Vector,
    lists: Sequence[Sequence[tuple[MemoryFields, float]]],
    weight: float = SENTENCE_WEIGHT,
) -> list[list[tuple[MemoryFields, float]]]:
    """``lists`` of memories with their cosine to ``vector`` (the pool's nearest, the
    learnings), the memories ordered by their own cosine's quantile raised towards their
    best piece's chance quantile (:func:`lifted`) and given the cosines the memories had
    in that order (:func:`on_cosine_scale`): the order from the better evidence, the scale
    the thresholds were set on. Unchanged when ``weight`` is 0 or there is no index."""
    if weight <= 0.0 or index is None or not index.ids:
        return [list(found) for found in lists]
    own: dict[str, float] = {}
    fields_of: dict[str, MemoryFields] = {}
    for found in lists:
        for fields, sim in found:
            own.setdefault(fields.id, sim)
            fields_of.setdefault(fields.id, fields)
    raised = lifted(index, vector, [(fields_of[i], sim) for i, sim in own.items()], weight)
    scaled = on_cosine_scale(own, raised)
    return [[(fields, scaled[fields.id]) for fields, _ in found] for found in lists]


def lifted(
    index: TurnIndex,
    vector: Vector,
    found: Sequence[tuple[MemoryFields, float]],
    weight: float,
) -> dict[str, float]:
    """Each memory's evidence as a quantile in [0, 1]: its own cosine's among ``found``'s
    (``G``), raised for an indexed learning (its content as the index holds it) towards
    its best piece's *chance quantile* ``F(best) ** n`` — ``F`` the share of all the
    index's pieces no closer to the query, ``n`` the learning's pieces: the probability
    that none of ``n`` pieces drawn at random would be as close. A learning of six steps
    has six chances to hold one close piece, so its best piece must be closer than a
    two-sentence learning's to count as much (a bare maximum favours the long ones);
    :func:`turn_similarity` mixes the two with ``weight``."""
    own_sorted = np.sort(np.array([sim for _, sim in found], dtype=np.float64))
    if not index.ids:
        return {fields.id: _quantile(own_sorted, sim) for fields, sim in found}
    sims = index.matrix @ np.asarray(vector, dtype=np.float32)
    best = np.maximum.reduceat(sims, index.starts)
    ordered = np.sort(sims.astype(np.float64))
    counts = np.append(index.starts[1:], len(sims)) - index.starts
    out: dict[str, float] = {}
    for fields, sim in found:
        g = _quantile(own_sorted, sim)
        at = index.position.get(fields.id)
        if at is None or index.hashes.get(fields.id) != fields.content_hash:
            out[fields.id] = g
            continue
        f = _quantile(ordered, float(best[at]))
        out[fields.id] = turn_similarity(g, f ** int(counts[at]), weight)
    return out


def _quantile(ordered: npt.NDArray[np.float64], value: float) -> float:
    """``value``'s mid-rank share of ``ordered`` (sorted): those below it and half of those
    equal to it (an unrelated memory's zero cosine, shared by many, is the middle of them,
    not their top)."""
    below = int(np.searchsorted(ordered, value, side="left"))
    upto = int(np.searchsorted(ordered, value, side="right"))
    return (below + 0.5 * (upto - below)) / max(1, len(ordered))


def on_cosine_scale(own: Mapping[str, float], raised: Mapping[str, float]) -> dict[str, float]:
    """The memories ranked by ``raised`` and given ``own``'s values in that order: the best
    raised one gets the best own cosine, the second the second, and so on. A piece is a
    short text and the best of several, so its cosine runs higher than a whole memory's
    (all-MiniLM: a sentence of a memory beats the memory by 0.05-0.15 where nothing is
    related); on that scale every learning would clear thresholds set on whole memories.
    The values stay the ones the thresholds, the relevance floor and the budgets were set
    on; only which memory holds which changes. Equal raised values keep ``own``'s order."""
    ids = list(own)
    values = sorted(own.values(), reverse=True)
    order = sorted(range(len(ids)), key=lambda i: (-raised[ids[i]], -own[ids[i]], i))
    return {ids[i]: values[rank] for rank, i in enumerate(order)}


def best_pieces(
    index: TurnIndex, vector: Vector, memories: Sequence[MemoryFields]
) -> dict[str, float]:
    """The best piece's cosine with ``vector`` of each of ``memories`` the index holds as
    it is (what ``explain()`` shows as ``best_sentence``)."""
    if not index.ids:
        return {}
    best = index.best(vector)
    out: dict[str, float] = {}
    for memory in memories:
        at = index.position.get(memory.id)
        if at is not None and index.hashes.get(memory.id) == memory.content_hash:
            out[memory.id] = float(best[at])
    return out


def sentence_index(
    store: Store, user_id: str, embed_query: Callable[[str], Vector], weight: float
) -> TurnIndex | None:
    """The user's piece index when ``weight`` is above 0 and the embedder embeds batches
    (its ``embed`` method, through the engine's cache), else ``None``."""
    embed = getattr(getattr(embed_query, "__self__", None), "embed", None)
    if weight <= 0.0 or not callable(embed):
        return None
    return indexes(store).of(store, user_id, embed)
