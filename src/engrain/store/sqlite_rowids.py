"""A loaded working set's vectors, and texts, read from the user's rows by rowid on SQLite
(issue 18).

An indexed user's working set keeps no float32 vectors in memory (``store/cache.py``): each
search reads its candidates' vectors from their rows, with their texts when it will build
some of their memories (``Arrays.vectors``), ~200 rows a call at 100,000 memories and ~370
in a call with a 7,500-token budget. A row counts only if it still holds the memory id the
working set has for it, with a vector of the size asked: a rowid freed by a delete and taken
by another row is never read as this memory's.

What a read costs besides SQLite's pages (session 18, docs/scale.md): the rows are taken
from the cursor one at a time, so a read never holds hundreds of row tuples at once (each a
container the garbage collector tracks: 370 of them, with a list per rowid for where it
goes, set off a collection inside nearly every large read); the rowids asked are made
unique once, and the vectors of all of them become one matrix from one joined buffer,
spread to the positions asked by their index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.store.arrays import BoolArray, RowVectors

#: Runs a statement and gives its rows to iterate, one at a time, under the store's lock
#: (read to the end by the caller, and its errors the store's).
Rows = Callable[[str, Sequence[Any]], AbstractContextManager[Iterable[tuple[Any, ...]]]]

#: Rowids per ``IN (…)`` list: well under SQLite's default limit of 32,766 variables.
IN_CHUNK = 500


def reader(rows: Rows, user_id: str) -> RowVectors:
    """Reads ``user_id``'s loaded rows' vectors (and texts) through ``rows``."""

    def read(
        rowids: npt.NDArray[np.int64], ids: Sequence[str], dim: int, *, texts: bool = False
    ) -> tuple[BoolArray, npt.NDArray[np.float32], list[str | None] | None]:
        if not len(rowids):
            return (
                np.zeros(0, dtype=bool),
                np.zeros((0, dim), dtype=np.float32),
                ([] if texts else None),
            )
        unique, where = np.unique(rowids, return_inverse=True)
        listed: list[int] = unique.tolist()
        slot = {rowid: i for i, rowid in enumerate(listed)}
        size = 4 * dim
        blobs = [bytes(size)] * len(listed)  # zeros for a row not found
        found_ids: list[str | None] = [None] * len(listed)
        found_texts: list[str | None] = [None] * len(listed)
        columns = "rowid, id, embedding, content" if texts else "rowid, id, embedding"
        for start in range(0, len(listed), IN_CHUNK):
            part = listed[start : start + IN_CHUNK]
            sql = (
                f"SELECT {columns} FROM memories WHERE +user_id = ? AND rowid IN "
                f"({', '.join('?' for _ in part)})"
            )
            with rows(sql, (user_id, *part)) as cursor:
                for row in cursor:
                    blob = row[2]
                    if blob is None or len(blob) != size:
                        continue
                    i = slot[row[0]]
                    blobs[i] = blob
                    found_ids[i] = row[1]
                    if texts:
                        found_texts[i] = row[3]
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(listed), dim)
        at: list[int] = where.tolist()
        same = np.fromiter(
            (memory_id == found_ids[u] for memory_id, u in zip(ids, at, strict=True)),
            dtype=bool,
            count=len(at),
        )
        return same, matrix[where], [found_texts[u] for u in at] if texts else None

    return read
