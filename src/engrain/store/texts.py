"""The texts of a large user's loaded rows, read from the store when asked for (issue 18).

A working set loaded from its saved image (``store/columns.py``) read every field in place
from the image's bytes: ~51 MB at 100,000 memories, of which the texts are ~30 MB. A call
only needs the texts of the ~150 memories it returns (the BM25 index is saved apart, and
checked against the image's digest of the texts, not the texts). :func:`without_texts`
copies every other column out of the image's bytes, so those can be freed, and gives the
table a :class:`RowTexts` instead: the texts read from the rows by rowid, a call's rows
in one query (:meth:`RowTexts.prefetch`, from ``Rows.memories``).

**A vector search's rows read only if asked** (:meth:`RowTexts.defer`): the candidates
of a search on the calling thread (``store/vector_search.py``, ``store/found.py``) are
noted as one batch, not read; the first of them whose text is asked for reads the batch's
in one query, as the search would have. A deep call at 10,000 memories finds ~140 rows
and builds ~45 memories, and most calls read no other candidate's text (a procedural
memory's is, ``recall/work.py``): the memories built read their own (:meth:`prefetch`),
the rest never. BM25's matches still read theirs at once: that search runs on a pool
thread beside the query's embedding (``store/reads.py``).

**Never another memory's text**: a text is taken from a row only if that row still holds
the memory id the table has for it; a row another process has replaced since (a new rowid)
is found by its id instead. A memory another process has forgotten since the working set
was loaded has no text left to read: it reads as ``""`` (the working set itself is
reloaded at the caller's next call, without that memory). A memory another process has
patched reads with its new text (the rest of its row is the working set's until the reload).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.store.columns import _ARRAYS, _CODES, Codes, Columns, Strings

#: Reads the texts of table rows (their positions in the table): one text or ``None`` each.
ReadTexts = Callable[[Sequence[int]], list[str | None]]

#: Texts kept after a prefetch (a call's rows; several calls' worth).
KEPT_MAX = 4_096
#: Searches' batches of rows whose texts are read when first asked for (the latest kept:
#: a call's; an older one dropped is read a row at a time, as a text no longer kept is).
BATCHES_MAX = 16


class RowTexts:
    """The ``content`` column of a table whose texts stay in the store: reads like
    :class:`~engrain.store.columns.Strings` (by position, or all of them)."""

    def __init__(self, count: int, read: ReadTexts) -> None:
        self._count = count
        self._read = read
        self._kept: dict[int, str] = {}
        self._batches: dict[int, tuple[int, ...]] = {}  # a deferred row: its batch
        self._deferred: list[tuple[int, ...]] = []  # the batches, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, row: int) -> str:
        with self._lock:
            found = self._kept.get(row)
            batch = self._take(row) if found is None else None
        if found is not None:
            return found
        if batch is not None:  # a search's rows: read together, as it would have
            self.prefetch(batch)
            with self._lock:
                found = self._kept.get(row)
            if found is not None:
                return found
        return self._read([row])[0] or ""

    def defer(self, rows: Sequence[int]) -> None:
        """Note ``rows`` (a search's) as one batch whose texts are read in one query when
        the first of them is asked for, not now (those kept already are left out)."""
        with self._lock:
            kept = self._kept
            batch = tuple(row for row in rows if row not in kept)
            if not batch:
                return
            if len(self._deferred) >= BATCHES_MAX:
                oldest = self._deferred.pop(0)
                for row in oldest:
                    if self._batches.get(row) is oldest:
                        del self._batches[row]
            self._deferred.append(batch)
            self._batches.update(dict.fromkeys(batch, batch))

    def _take(self, row: int) -> tuple[int, ...] | None:
        """The batch ``row`` was deferred with, no longer deferred (the lock held)."""
        batch = self._batches.get(row)
        if batch is None:
            return None
        for other in batch:
            if self._batches.get(other) is batch:
                del self._batches[other]
        self._deferred = [b for b in self._deferred if b is not batch]
        return batch

    def prefetch(self, rows: Sequence[int]) -> None:
        """Read the texts of ``rows`` in one query and keep them for the next reads. When
        the kept texts are too many they start over from ``rows``' own (those kept already
        stay: dropped, each would be read alone by the caller that prefetched it)."""
        kept = self._kept
        todo = [row for row in rows if row not in kept]
        if not todo:
            return
        texts = self._read(todo)
        self._keep(rows, todo, [text or "" for text in texts])

    def keep(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        """Keep ``texts``, the texts of ``rows`` read by the caller from those rows (with
        their vectors: ``SQLiteStore._row_vectors``), for the next reads, as
        :meth:`prefetch` keeps those it reads."""
        if rows:
            self._keep(rows, rows, texts)

    def _keep(self, rows: Sequence[int], todo: Sequence[int], texts: Sequence[str]) -> None:
        """Keep ``texts`` of rows ``todo`` (among ``rows``, a call's: those already kept
        stay when the kept texts start over)."""
        with self._lock:
            if len(self._kept) + len(todo) > KEPT_MAX:
                kept = self._kept
                self._kept = {row: kept[row] for row in rows if row in kept}
            self._kept.update(zip(todo, texts, strict=True))

    def all(self) -> list[str]:
        """Every text, in order (one read of every row: a BM25 index rebuilt, an image
        saved again)."""
        return self.read(range(self._count))

    def read(self, rows: Sequence[int]) -> list[str]:
        """The texts of ``rows``, read from the store (none kept: a refreshed image's
        digest reads every row a chunk at a time, ``store/image_refresh.py``)."""
        return [text or "" for text in self._read(rows)]


def without_texts(
    columns: Columns, reader: Callable[[npt.NDArray[np.int64], Strings], ReadTexts]
) -> Columns:
    """``columns`` with its texts read through ``reader(rowids, ids)`` (given the copied
    columns: nothing of the loaded bytes is kept) and every other column copied out of the
    bytes it was loaded from, so those bytes are freed once the caller drops them."""
    ids, rowids = _copied(columns.ids), np.array(columns.rowids, copy=True)
    fields: dict[str, Any] = {
        "ids": ids,
        "content_hash": _copied(columns.content_hash),
        "content": RowTexts(len(columns), reader(rowids, ids)),
        "rowids": rowids,
    }
    for name in _CODES:
        codes: Codes = getattr(columns, name)
        fields[name] = Codes(codes.values, np.array(codes.codes, copy=True))
    for name in _ARRAYS:
        fields[name] = np.array(getattr(columns, name), copy=True)
    return replace(columns, **fields)


def _copied(strings: Strings) -> Strings:
    """``strings`` in a blob of their own (not a view of a larger one)."""
    if not len(strings):
        return Strings(b"", np.zeros(1, dtype=np.int64))
    start, end = int(strings.at[0]), int(strings.at[-1]) - 1
    return Strings(bytes(strings.blob[start:end]), np.asarray(strings.at - start, dtype=np.int64))
