"""The review queue: pairs of memories a person should look at, and how each is resolved.

Two sources fill the queue:

- **Conflicts**: active memories flagged against each other when the second was stored
  (``corrections.py``: same subject, a value that differs), read from their
  ``conflicts_with`` flags.
- **Duplicates**: two active memories of the same subject, nearly the same meaning (cosine
  at least :data:`DUPLICATE_SIMILARITY`, the tiers' semantic dedup) that ingestion did not
  merge (it only merges recent items of the same kind). Looked for among the user's
  :data:`DUPLICATE_WINDOW` most recently updated unmuted memories, so the queue costs one small
  matrix product however large the store.

A pair is resolved in one of three ways, each one transaction (a failure writes nothing):

- ``keep``: keep the first, forget the second (as :meth:`Engine.forget` does: its conflict
  partners are unflagged and its learned co-occurrence dropped);
- ``correct``: the first corrects the second, which is superseded (kept, linked, never
  injected again), as ``remember(corrects=...)`` would have done;
- ``both``: both stand. Their conflict flags on each other are cleared and each records
  the other under ``distinct_from``, so the pair does not come back as a duplicate.

This module only reads; :func:`plan` returns the writes for the engine's one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import numpy as np

from engrain import browse as browsing
from engrain import feedback as fb
from engrain import relate
from engrain.corrections import (
    CONFLICT_KINDS,
    CONFLICTS_WITH,
    CORRECTS,
    conflicts_of,
    disagreement,
    same_subject,
    unflag,
    with_meta,
)
from engrain.errors import NotFoundError, ValidationError
from engrain.model import Kind, Memory, ids_in
from engrain.store.base import KeyClaim, MemoryFilter, Patch, State, Store
from engrain.tiers import DEDUP_SIMILARITY

#: Cosine at or above which two memories of the same subject are duplicates.
DUPLICATE_SIMILARITY = DEDUP_SIMILARITY
#: How many of the most recently updated memories the duplicate search looks at.
DUPLICATE_WINDOW = 1_000
#: Provenance metadata key: the memories a person reviewed and chose to keep beside this one.
DISTINCT_FROM = "distinct_from"

CONFLICT = "conflict"
DUPLICATE = "duplicate"


class Resolution(StrEnum):
    """What a person decided about a pair (first, second)."""

    KEEP = "keep"  # keep the first, forget the second
    CORRECT = "correct"  # the first corrects (supersedes) the second
    BOTH = "both"  # both stand: clear the flag

    @classmethod
    def parse(cls, value: object) -> Resolution:
        """The resolution named ``value``; :class:`ValidationError` for anything else."""
        if isinstance(value, Resolution):
            return value
        try:
            return cls(value.strip().lower() if isinstance(value, str) else str(value))
        except ValueError:
            names = ", ".join(r.value for r in cls)
            try:
                shown = repr(value)
            except ValueError:  # an int past Python's str conversion limit (4,300 digits)
                shown = f"an {type(value).__name__} too long to show"
            raise ValidationError(f"resolution must be one of {names}, not {shown}") from None


@dataclass(frozen=True)
class FlaggedPair:
    """Two memories to review: why they were queued (``conflict`` or ``duplicate``), the
    disagreement found between them (conflicts) and their cosine similarity."""

    first: Memory
    second: Memory
    reason: str
    detail: str | None
    similarity: float

    @property
    def ids(self) -> tuple[str, str]:
        """The two memory ids, first first."""
        return (self.first.id, self.second.id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (memories without their embeddings)."""
        return {"first": self.first.to_dict(), "second": self.second.to_dict(),
                "reason": self.reason, "detail": self.detail,
                "similarity": round(self.similarity, 6)}  # fmt: skip


@dataclass(frozen=True)
class Resolved:
    """What a resolution did: the memories kept (as they are now), forgotten, superseded."""

    resolution: Resolution
    kept: tuple[str, ...]
    forgotten: tuple[str, ...] = ()
    superseded: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolutionPlan:
    """The writes of one resolution, for one transaction, and its result."""

    result: Resolved
    patches: tuple[Patch, ...] = ()
    deletes: tuple[Memory, ...] = ()
    state: tuple[State, ...] = ()
    #: What the plan read of the pair, checked inside the write's transaction: another
    #: process resolving, forgetting or superseding either meanwhile has it planned again.
    claims: tuple[KeyClaim, ...] = ()


# -- the queue ------------------------------------------------------------------------------


def _active(project: str | None) -> MemoryFilter:
    return MemoryFilter(project=project, kinds=tuple(CONFLICT_KINDS), include_superseded=False,
                        include_compressed=False)  # fmt: skip


def _cosine(a: Memory, b: Memory) -> float:
    if a.embedding is None or b.embedding is None or a.embedding.shape != b.embedding.shape:
        return 0.0
    return float(a.embedding @ b.embedding)


def _distinct(a: Memory, b: Memory) -> bool:
    return b.id in ids_in(a.provenance.metadata, DISTINCT_FROM)


def conflicts(store: Store, user_id: str, project: str | None = None) -> list[FlaggedPair]:
    """Every pair of the user's active memories (of ``project``, or all) flagged as
    conflicting, newest first (by the later update of the two)."""
    flt = _active(project)
    # the browse stage's column arrays (kept per store revision) name the flagged memories:
    # a few hundred at most, read as stored now, instead of a pass over every memory
    index = browsing.index_of(store, user_id)
    rows = np.flatnonzero(index.conflicting & ~index.superseded).tolist()
    flagged = [m for m in store.get(user_id, [index.ids[r] for r in rows])
               if flt.matches(m) and m.provenance.metadata.get(CONFLICTS_WITH)]  # fmt: skip
    known = {m.id: m for m in flagged}
    missing = sorted({i for m in flagged for i in conflicts_of(m)} - known.keys())
    known.update({m.id: m for m in store.get(user_id, missing) if flt.matches(m)})
    pairs: dict[frozenset[str], FlaggedPair] = {}
    for memory in flagged:
        for other_id in conflicts_of(memory):
            other = known.get(other_id)
            key = frozenset((memory.id, other_id))
            if other is None or key in pairs or other_id == memory.id:
                continue
            older, newer = sorted((memory, other), key=lambda m: (m.updated_at, m.id))
            pairs[key] = FlaggedPair(newer, older, CONFLICT,
                                     disagreement(older.content, newer.content),
                                     _cosine(older, newer))  # fmt: skip
    return sorted(pairs.values(), key=lambda p: (p.first.updated_at, p.first.id), reverse=True)


def _recent(store: Store, user_id: str, flt: MemoryFilter, window: int) -> list[Memory]:
    """The user's ``window`` most recently updated unmuted memories passing ``flt`` (the
    store's order), those with a vector kept: picked from the browse stage's column
    arrays (kept per store revision) rather than by sorting every memory. Counted uses
    may be older than stored (they change no revision): a pair found is read again."""
    index = browsing.index_of(store, user_id)
    codes = [i for i, k in enumerate(Kind) if flt.kinds is None or k in flt.kinds]
    mask = np.isin(index.kind, codes) & ~index.superseded & ~index.muted
    if flt.project is not None:
        mask &= index.project == flt.project
    rows = np.flatnonzero(mask).tolist()
    recent: list[Memory] = []
    for memory in map(index.memories.__getitem__, rows):
        if not flt.matches(memory):
            continue
        recent.append(memory)
        if len(recent) >= window:
            break
    return [m for m in recent if m.embedding is not None]


def duplicates(
    store: Store,
    user_id: str,
    project: str | None = None,
    *,
    window: int = DUPLICATE_WINDOW,
    similarity: float = DUPLICATE_SIMILARITY,
    limit: int | None = None,
) -> list[FlaggedPair]:
    """Pairs among the user's ``window`` most recently updated active memories of the same
    subject at least ``similarity`` close, not flagged as conflicting (those are
    conflicts) nor reviewed as distinct; each memory appears in at most one pair (with its
    closest twin), the closest pairs first, at most ``limit`` of them (the search stops
    there: comparing subjects is the costly part)."""
    recent = _recent(store, user_id, _active(project), window)
    if len(recent) < 2:
        return []
    dims = {m.embedding.shape for m in recent if m.embedding is not None}
    if len(dims) != 1:  # vectors of two models: compare only the most common size
        common = max(dims, key=lambda d: sum(1 for m in recent if m.embedding is not None
                                             and m.embedding.shape == d))  # fmt: skip
        recent = [m for m in recent if m.embedding is not None and m.embedding.shape == common]
    matrix = np.stack([m.embedding for m in recent if m.embedding is not None])
    sims = matrix @ matrix.T
    np.fill_diagonal(sims, -1.0)
    rows, cols = np.nonzero(np.triu(sims >= similarity))
    order = np.argsort(-sims[rows, cols], kind="stable")
    taken: set[str] = set()
    found: list[FlaggedPair] = []
    for i, j in zip(rows[order].tolist(), cols[order].tolist(), strict=True):
        if limit is not None and len(found) >= limit:
            break
        a, b = recent[i], recent[j]
        if a.id in taken or b.id in taken or b.id in conflicts_of(a) or _distinct(a, b):
            continue
        if not same_subject(a.content, b.content) or disagreement(a.content, b.content):
            continue
        newer, older = (a, b) if (a.updated_at, a.id) >= (b.updated_at, b.id) else (b, a)
        found.append(FlaggedPair(newer, older, DUPLICATE, None, float(sims[i, j])))
        taken.update((a.id, b.id))
    now = {m.id: m for m in store.get(user_id, [i for p in found for i in p.ids])}
    return [replace(p, first=now[p.first.id], second=now[p.second.id]) for p in found
            if p.first.id in now and p.second.id in now]  # fmt: skip


def queue(
    store: Store, user_id: str, project: str | None = None, *, limit: int | None = None
) -> list[FlaggedPair]:
    """The review queue: conflicts first (newest first), then duplicates (closest first),
    at most ``limit`` pairs."""
    pairs = conflicts(store, user_id, project)
    if limit is not None and len(pairs) >= limit:
        return pairs[:limit]
    rest = None if limit is None else limit - len(pairs)
    return [*pairs, *duplicates(store, user_id, project, limit=rest)]


# -- resolving a pair -----------------------------------------------------------------------


def _provenance(memory: Memory) -> Patch:
    return Patch(memory.user_id, memory.id, {"provenance": memory.provenance})


def plan(
    store: Store,
    user_id: str,
    first_id: str,
    second_id: str,
    resolution: Resolution,
    now: datetime,
) -> ResolutionPlan:
    """The writes resolving the pair (``first_id``, ``second_id``) of ``user_id`` as
    ``resolution`` says; :class:`NotFoundError` if either memory is not the user's,
    :class:`ValidationError` for a memory paired with itself or a correction involving a
    memory already superseded."""
    if first_id == second_id:
        raise ValidationError("other_id: a memory cannot be paired with itself")
    found = {m.id: m for m in store.get(user_id, [first_id, second_id])}
    for memory_id in (first_id, second_id):
        if memory_id not in found:
            raise NotFoundError(f"no memory {memory_id!r} for user {user_id!r}")
    first, second = found[first_id], found[second_id]
    if resolution is Resolution.KEEP:
        done = _keep(store, user_id, first, second, now)
    elif resolution is Resolution.CORRECT:
        done = _correct(store, user_id, first, second, now)
    else:
        done = _both(first, second)
    # the pair as this plan read it, checked by the write: a resolution of the same pair
    # committed meanwhile (in the other order: each would forget or supersede the memory
    # the other keeps) has this one planned again, and refused as it would be after it
    return replace(done, claims=(KeyClaim.live(first), KeyClaim.live(second)))


def _keep(
    store: Store, user_id: str, first: Memory, second: Memory, now: datetime
) -> ResolutionPlan:
    """Forget ``second`` the way :meth:`Engine.forget` does. ``first`` superseded by
    ``second`` comes back (it is the one kept); superseded by another memory, the pair is
    refused, as a correction of it is: kept, it would still never be served."""
    if first.superseded_by is not None and first.superseded_by != second.id:
        raise ValidationError(f"memory {first.id!r} is already superseded by "
                              f"{first.superseded_by!r}")  # fmt: skip
    state = tuple(fb.unlearned(store, user_id, [second.id]))
    patches = tuple(relate.resolve(store, user_id, [second]))
    if first.superseded_by is not None:
        patches += (Patch(user_id, first.id, {"superseded_by": None, "updated_at": now}),)
    return ResolutionPlan(Resolved(Resolution.KEEP, (first.id,), forgotten=(second.id,)),
                          patches, (second,), state)  # fmt: skip


def _correct(
    store: Store, user_id: str, first: Memory, second: Memory, now: datetime
) -> ResolutionPlan:
    """``first`` supersedes ``second``: ``second`` is linked and its conflicts resolved on
    both sides; ``first`` records what it corrects."""
    for memory in (first, second):
        if memory.superseded_by is not None:
            raise ValidationError(f"memory {memory.id!r} is already superseded")
    partners = [p for p in store.get(user_id, list(conflicts_of(second))) if p.id != first.id]
    corrector = unflag(with_meta(first, **{CORRECTS: second.id}), [second.id])
    old = unflag(second, conflicts_of(second))
    patches = (
        _provenance(corrector),
        Patch(user_id, second.id, {"superseded_by": first.id, "updated_at": now,
                                   "provenance": old.provenance}),
        *(_provenance(unflag(p, [second.id])) for p in partners),
    )  # fmt: skip
    return ResolutionPlan(Resolved(Resolution.CORRECT, (first.id,), superseded=(second.id,)),
                          patches)  # fmt: skip


def _both(first: Memory, second: Memory) -> ResolutionPlan:
    """Both stand: no longer flagged against each other, and reviewed as distinct."""

    def reviewed(memory: Memory, other: Memory) -> Memory:
        seen = list(dict.fromkeys([*ids_in(memory.provenance.metadata, DISTINCT_FROM),
                                   other.id]))  # fmt: skip
        return with_meta(unflag(memory, [other.id]), **{DISTINCT_FROM: seen})

    patches = (_provenance(reviewed(first, second)), _provenance(reviewed(second, first)))
    return ResolutionPlan(Resolved(Resolution.BOTH, (first.id, second.id)), patches)
