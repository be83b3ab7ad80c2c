"""The SQLite store's side of the approximate indexes' stamps (issue 18, session 15):
reading them in a load's transaction, loading the copies they name, and writing them
(``store/ann_stamp.py`` says what a stamp vouches for and why it is safe).

A user's two indexes (the first, kind ``usearch``, and the typed learnings', ``store/
ann_kinds.py``) are stamped apart: the first's stamp alone lets a process load without
reading vectors; the learnings' is then loaded on its own stamp, or checked by its job as
before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from engrain.store import ann_kinds, ann_stamp, derived_blobs
from engrain.store.ann import IndexSlot, VectorIndex, memory_keys
from engrain.store.ann_stamp import IndexStamp
from engrain.store.arrays import HeldTable
from engrain.store.cache import Snapshot, Stamped
from engrain.store.columns import Stamp
from engrain.store.ids import IdColumn

#: The kind of the first index among a user's derived indexes.
FIRST = "usearch"
KINDS = (FIRST, ann_kinds.STASH_KIND)


def read(db: sqlite3.Connection, user_id: str, stamp: Stamp) -> dict[str, IndexStamp]:
    """The user's index stamps written at ``stamp`` (revision and migrations), by index
    kind, read in the caller's transaction (a stamp of another revision is not returned)."""
    found: dict[str, IndexStamp] = {}
    for kind in KINDS:
        saved = ann_stamp.load(derived_blobs.read(db, user_id, kind + ann_stamp.SUFFIX))
        if saved is not None and saved.vouches_for(stamp.revision, stamp.migrations):
            found[kind] = saved
    return found


class Named(NamedTuple):
    """The saved copies the stamps name, loaded: the first index and the learnings'
    (``None``: none saved, torn, or not the copy its stamp names)."""

    first: VectorIndex | None
    part: VectorIndex | None


def loader(
    stamps: dict[str, IndexStamp], slot: IndexSlot, read: Callable[[str], bytes | None]
) -> Callable[[], Named]:
    """Loads the copies ``stamps`` name (``read(kind)``: the saved bytes): the first, and
    the learnings' if the first is the copy named and ``slot`` keeps a learnings' index
    of the same size. Reads nothing until called; the caller may run it on another thread
    while it reads the rows (docs/scale.md, "Session 21 … (h10)")."""

    def load() -> Named:
        first = stamps.get(FIRST)
        if first is None:
            return Named(None, None)
        index = _named(first, read(FIRST))
        learnings = stamps.get(ann_kinds.STASH_KIND)
        if index is None or learnings is None or slot.part is None \
                or learnings.dim != first.dim:  # fmt: skip
            return Named(index, None)
        return Named(index, _named(learnings, read(ann_kinds.STASH_KIND)))

    return load


def adopted(
    table: HeldTable,
    stamps: dict[str, IndexStamp],
    slot: IndexSlot,
    named: Callable[[], Named],
) -> Stamped | None:
    """The indexes the stamps name, loaded (``named``: :func:`loader`'s, perhaps begun on
    another thread) and adopted in ``slot`` (and its learnings' slot), for a table read
    without vectors; ``None``, the slot unchanged, if the first is not the copy its stamp
    names (saved again since), or the user is below the slot's threshold, or the slot
    already has an index: the caller then reads the rows' vectors."""
    first = stamps.get(FIRST)
    if first is None or slot.index is not None \
            or int(np.count_nonzero(table.has_vector)) < slot.min_vectors:  # fmt: skip
        return None
    index, part = named()
    if index is None:
        return None
    keys = first.keys_for(table.columns.rowids)
    if keys is None:
        keys = memory_keys(IdColumn(table.columns.ids).tolist())
    if not slot.adopt(index):
        return None
    if part is not None and (slot.part is None or not slot.part.adopt(part)):
        part = None
    return Stamped(index, keys, part)


def _named(stamp: IndexStamp, data: bytes | None) -> VectorIndex | None:
    """The saved index in ``data`` if it is the copy ``stamp`` names: read in place
    (usearch's ``view`` of the bytes read from the file, which nothing changes: no copy
    of a million rows' graph into the process, ~0.5 GB and ~0.4 s of CPU at a million;
    its first patch copies it in, ``VectorIndex._own_copy``), or copied in and converted
    if it is of wider vectors (an earlier version's)."""
    if data is None:
        return None
    index = VectorIndex.viewed(memoryview(data), stamp.dim)
    if index is None:
        index = VectorIndex.read(lambda: data, stamp.dim)
    return index if index is not None and stamp.names(index.saved) else None


def made(
    snapshot: Snapshot,
    held: Sequence[tuple[IndexSlot, VectorIndex]],
    slot: IndexSlot,
    stamp: Stamp,
) -> list[tuple[str, IndexStamp]]:
    """The stamps to write for ``held`` (:meth:`~engrain.store.cache.UserCache.
    held_indexes` of ``snapshot``, whose rows the file holds at ``stamp``), by kind; none
    unless the snapshot's rows are its loaded rows in their order (patched in place at
    most), so that each row's key can be kept by rowid."""
    arrays = snapshot.arrays
    record = snapshot.ann if snapshot.ann is not None else snapshot.part
    base = None if arrays is None else arrays.rows.base
    if arrays is None or record is None or base is None or len(base.rowids) != len(arrays):
        return []
    source = arrays.rows.source
    kept = np.flatnonzero(source >= 0)
    if not np.array_equal(source[kept], kept):
        return []
    digest = ann_stamp.rowids_digest(base.rowids)
    vectors = np.array(arrays.has_vector, dtype=bool)  # the rows' own order: the loaded one
    out: list[tuple[str, IndexStamp]] = []
    for owner, index in held:
        saved = index.saved
        kind = FIRST if owner is slot else ann_kinds.STASH_KIND
        if saved is None or (owner is not slot and owner is not slot.part):
            continue
        out.append((kind, IndexStamp(stamp.revision, stamp.migrations, saved[0], saved[1],
                                     index.ndim, digest, record.keys, vectors)))  # fmt: skip
    return out


def write(
    db: sqlite3.Connection, user_id: str, stamps: Sequence[tuple[str, IndexStamp]], at: str
) -> None:
    """Save ``stamps`` (by index kind) in the caller's write transaction."""
    for kind, stamp in stamps:
        derived_blobs.write(db, user_id, kind + ann_stamp.SUFFIX, ann_stamp.dump(stamp), at)
