"""Which rows of a large user's working set the approximate index holds (issue 18).

A snapshot of a working set (``store/cache.py``) records, per row, the row's index key
(:func:`~engrain.store.ann.memory_keys` of its id) and whether the index holds that key with
the vector the row has in that snapshot, plus the keys in sorted order, so the index's
candidate keys are mapped onto rows by a binary search (a key no row has is a memory
forgotten since: never returned). Never changed once built: a write derives a new record,
carrying the sorted order instead of sorting every key again (100,000 keys took ~5 ms of
every write; a memory's tenth use is such a write).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from engrain.store.ann import Keys, VectorIndex

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class AnnRows:
    """Which rows of a snapshot's arrays the approximate ``index`` holds with the vector
    they have in that snapshot; never changed once built (writes derive new ones)."""

    index: VectorIndex
    keys: Keys  # per row: memory_keys(ids)
    held: BoolArray  # per row
    sorted_keys: Keys
    order: npt.NDArray[np.intp]  # rows in key order

    @classmethod
    def of(cls, index: VectorIndex, keys: Keys, held: BoolArray) -> AnnRows:
        """The record for rows with these keys, ``held`` by ``index``."""
        order = np.argsort(keys, kind="stable")
        held.flags.writeable = False
        return cls(index, keys, held, keys[order], order)

    def rows_of(self, keys: Keys) -> npt.NDArray[np.intp]:
        """The row of each key, -1 for a key no row has (a memory forgotten since)."""
        if not len(self.sorted_keys):
            return np.full(len(keys), -1, dtype=np.intp)
        at = np.minimum(np.searchsorted(self.sorted_keys, keys), len(self.sorted_keys) - 1)
        return np.where(self.sorted_keys[at] == keys, self.order[at], -1)

    def after_write(self, unheld: Iterable[int], fresh_keys: Keys) -> AnnRows:
        """The record after a write: rows ``unheld`` got another vector, rows with
        ``fresh_keys`` were appended (neither is held until the index is patched). The
        key order is carried, not sorted again: a patch (a memory's tenth use promotes
        it) keeps every key, and appended keys are merged in (sorting 100,000 keys took
        ~5 ms of every write)."""
        held = np.concatenate([self.held, np.zeros(len(fresh_keys), dtype=bool)])
        held[list(unheld)] = False
        held.flags.writeable = False
        if not len(fresh_keys):
            return replace(self, held=held)
        keys = np.concatenate([self.keys, fresh_keys])
        fresh_order = np.argsort(fresh_keys, kind="stable")
        at = np.searchsorted(self.sorted_keys, fresh_keys[fresh_order], side="right")
        sorted_keys = np.insert(self.sorted_keys, at, fresh_keys[fresh_order])
        order = np.insert(self.order, at, len(self.keys) + fresh_order)
        return AnnRows(self.index, keys, held, sorted_keys, order)

    def without(self, keep: BoolArray) -> AnnRows:
        """The record with the rows not kept left out (the key order carried)."""
        held = self.held[keep]
        held.flags.writeable = False
        in_order = keep[self.order]
        renumbered = np.cumsum(keep, dtype=np.intp) - 1
        return AnnRows(self.index, self.keys[keep], held, self.sorted_keys[in_order],
                        renumbered[self.order[in_order]])  # fmt: skip
