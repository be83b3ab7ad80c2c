"""The corrections stage: how a new memory relates to the ones already stored.

``corrections.py`` says what a conflict or a correction *is* (``disagreement``, the
``conflicts_with`` flags); this module decides what a new memory *does* to the store: which
memory a correction supersedes, and which close memories a new statement disagrees with.
It only reads; every change to an existing memory comes back as a
:class:`~engrain.store.base.Patch` of the fields it sets, for the caller's one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from engrain.config import Settings
from engrain.corrections import (
    CONFLICT_KINDS,
    CORRECTS,
    conflicts_of,
    disagreement,
    flag,
    unflag,
    with_meta,
)
from engrain.errors import NotFoundError, ValidationError
from engrain.model import Kind, Memory, Vector
from engrain.store import MemoryFilter, Store
from engrain.store.base import Patch


def corrected(
    store: Store,
    settings: Settings,
    user_id: str,
    project: str | None,
    corrects: str | None,
    vector: Vector,
    staged: Sequence[Memory] = (),
) -> Memory | None:
    """The memory a correction supersedes: the one named (:class:`NotFoundError` if the user
    has none with that id), else the nearest active one at least ``correction_similarity``
    close (``None``: the correction stands alone). ``staged`` are the memories an earlier
    record of the same import created or changed, seen as sequential calls would see them."""
    if corrects is not None:
        mine = [m for m in staged if m.id == corrects and m.user_id == user_id]
        found = mine or store.get(user_id, [corrects])
        if not found:
            raise NotFoundError(f"no memory {corrects!r} for user {user_id!r}")
        if found[0].superseded_by is not None:
            raise ValidationError(f"corrects: memory {corrects!r} is already superseded")
        return found[0]
    flt = MemoryFilter(project=project, include_superseded=False, include_compressed=False)
    for memory, sim in near(store, user_id, vector, 3, flt, staged):
        if sim >= settings.correction_similarity and memory.kind is not Kind.CORRECTION:
            return memory
    return None


def supersede(
    store: Store,
    memory: Memory,
    target: Memory | None,
    now: datetime,
    holder: Memory | None = None,
) -> tuple[Memory, list[Patch], str]:
    """A correction ``memory`` superseding ``target`` and ``holder``, the live memory that
    held the key ``memory`` now holds (either may be ``None``, not both): the correction
    records what it corrects; each old memory is linked (``superseded_by``) and its
    conflicts are resolved on both sides. Returns the new memory, the patches and the
    outcome's reason."""
    olds = [m for m in (target, holder) if m is not None]
    if len(olds) == 2 and olds[0].id == olds[1].id:
        olds = olds[:1]
    ids = {m.id for m in olds}
    partners = store.get(memory.user_id, sorted({p for m in olds for p in conflicts_of(m)} - ids))
    if target is not None:
        memory = with_meta(memory, **{CORRECTS: target.id})
    patches = [
        *(Patch(m.user_id, m.id, {"superseded_by": memory.id, "updated_at": now,
                                  "provenance": unflag(m, conflicts_of(m)).provenance})
          for m in olds),
        *(_provenance(unflag(p, ids)) for p in partners),
    ]  # fmt: skip
    reasons = [f"supersedes {m.id}" if m is target else
               f"replaces {m.id} under key {memory.key!r}" for m in olds]  # fmt: skip
    return memory, patches, "; ".join(reasons)


def conflicts(
    store: Store,
    settings: Settings,
    memory: Memory,
    twin: Memory | None = None,
    staged: Sequence[Memory] = (),
) -> tuple[Memory, list[Patch], str | None]:
    """A new ``memory`` flagged against the close active memories it disagrees with (and
    ``twin``, a near-duplicate known to disagree), each of them flagged back; ``staged`` as
    for :func:`corrected`. Returns the memory, the patches of the others and the outcome's
    reason (``None``: no conflict)."""
    if memory.kind not in CONFLICT_KINDS or memory.embedding is None:
        return memory, [], None
    flt = MemoryFilter(project=memory.project, kinds=tuple(CONFLICT_KINDS),
                       include_superseded=False, include_muted=False)  # fmt: skip
    clashes: list[tuple[Memory, str]] = []
    if twin is not None:
        clashes.append((twin, disagreement(twin.content, memory.content) or ""))
    for other, sim in near(store, memory.user_id, memory.embedding, 5, flt, staged):
        if sim < settings.conflict_similarity or other.id == getattr(twin, "id", None):
            continue
        why = disagreement(other.content, memory.content)
        if why:
            clashes.append((other, why))
    if not clashes:
        return memory, [], None
    memory = flag(memory, [o.id for o, _ in clashes])
    patches = [_provenance(flag(o, [memory.id])) for o, _ in clashes]
    reason = "conflicts with " + ", ".join(f"{o.id} ({why})" for o, why in clashes)
    return memory, patches, reason


def near(
    store: Store,
    user_id: str,
    vector: Vector,
    k: int,
    flt: MemoryFilter,
    staged: Sequence[Memory] = (),
) -> list[tuple[Memory, float]]:
    """The ``k`` memories passing ``flt`` nearest to ``vector``, best first: the store's,
    as ``staged`` (this call's new and changed memories, not written yet) makes them."""
    mine = {m.id: m for m in staged if m.user_id == user_id}
    found = [(mine.get(m.id, m), sim) for m, sim in store.search(user_id, vector, k, flt)]
    seen = {m.id for m, _ in found}
    for m in mine.values():
        if m.id not in seen and m.embedding is not None and m.embedding.shape == vector.shape:
            found.append((m, float(m.embedding @ vector)))
    return sorted(((m, s) for m, s in found if flt.matches(m)), key=lambda p: -p[1])[:k]


def resolve(store: Store, user_id: str, gone: Iterable[Memory]) -> list[Patch]:
    """The patches unflagging the conflict partners of memories about to be deleted."""
    gone = list(gone)
    ids = {m.id for m in gone}
    partners = sorted({i for m in gone for i in conflicts_of(m)} - ids)
    return [_provenance(unflag(p, ids)) for p in store.get(user_id, partners)]


def _provenance(memory: Memory) -> Patch:
    return Patch(memory.user_id, memory.id, {"provenance": memory.provenance})
