"""A working set's memory ids and each id's row, without a Python string per row (issue 18).

A working set held its ids as an object array of ``str`` (~85 bytes each for a 36-character
id) and a ``dict`` from id to row (~65 bytes an entry): ~14.7 MB at 100,000 memories, beside
the same ids already held once as one UTF-8 blob by the loaded columns
(:class:`~engrain.store.columns.Strings`). Here:

- :class:`IdColumn` is row → id over such a blob (the loaded columns' own, not a copy): a
  ``str`` is made when a row's id is asked for (a call asks for a few hundred);
- :class:`IdPositions` is id → row: the ids' ``hash()`` sorted (int64) and the row of each
  (int32), 12 bytes a row. A lookup is a binary search of the id's hash, then a comparison
  of the candidate row's id with the one asked for, so a hash shared by two ids never gives
  a wrong row. ``hash()`` of a ``str`` is salted per process: the positions are never saved.

Both are immutable: a write makes new ones (:meth:`IdColumn.extended`, :meth:`IdColumn.kept`),
as it made new arrays and a new ``dict`` before; a reader of an older snapshot keeps its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from engrain.store.columns import Strings

#: As :class:`Strings` encodes its entries.
_ENCODING = ("utf-8", "surrogatepass")

#: Rows the positions can number (int32): a user of more is far beyond any working set.
_MAX_ROWS = 2**31 - 1


class IdColumn:
    """The memory id of each row, over one UTF-8 blob (:class:`Strings`)."""

    __slots__ = ("strings",)

    def __init__(self, strings: Strings) -> None:
        self.strings = strings

    @classmethod
    def of(cls, ids: Sequence[str]) -> IdColumn:
        """The column of ``ids``, in order."""
        return cls(Strings.of(ids))

    def __len__(self) -> int:
        return len(self.strings)

    @overload
    def __getitem__(self, at: int | np.integer) -> str: ...

    @overload
    def __getitem__(
        self, at: Sequence[int] | npt.NDArray[np.integer] | npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.object_]: ...

    def __getitem__(
        self, at: int | np.integer | Sequence[int] | npt.NDArray[np.integer] | npt.NDArray[np.bool_]
    ) -> str | npt.NDArray[np.object_]:
        """Row ``at``'s id, or for rows (positions or a mask) their ids as an object array."""
        if isinstance(at, (int, np.integer)):
            row = int(at)
            if row < 0:
                row += len(self)
            if not 0 <= row < len(self):
                raise IndexError(f"row {at} of {len(self)}")
            return self.strings[row]
        rows = np.asarray(at)
        if rows.dtype == np.bool_:
            rows = np.flatnonzero(rows)
        out = np.empty(len(rows), dtype=object)
        out[:] = self.take(rows.tolist())
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings.all())

    def take(self, rows: Sequence[int] | npt.NDArray[np.integer]) -> list[str]:
        """The ids of ``rows``, in that order (their offsets read at once)."""
        at = np.asarray(rows, dtype=np.intp)
        strings = self.strings
        blob, starts, ends = strings.blob, strings.at[at].tolist(), strings.at[at + 1] - 1
        spans = zip(starts, ends.tolist(), strict=True)
        return [blob[start:end].decode(*_ENCODING) for start, end in spans]

    def tolist(self) -> list[str]:
        """Every id, in row order."""
        return self.strings.all()

    @property
    def nbytes(self) -> int:
        """Bytes held: the blob and its offsets."""
        return len(self.strings.blob) + int(self.strings.at.nbytes)

    def extended(self, ids: Sequence[str]) -> IdColumn:
        """These ids followed by ``ids``."""
        if not ids:
            return self
        more = Strings.of(ids)
        strings = self.strings
        blob = strings.blob + b"\0" + more.blob if len(strings) else more.blob
        at = np.concatenate([strings.at, more.at[1:] + strings.at[-1]]) if len(strings) else more.at
        return IdColumn(Strings(blob, at))

    def kept(self, keep: npt.NDArray[np.bool_]) -> IdColumn:
        """The ids of the rows ``keep`` marks, in order (their bytes joined, not decoded)."""
        rows = np.flatnonzero(keep)
        strings = self.strings
        blob, starts, ends = strings.blob, strings.at[rows], strings.at[rows + 1] - 1
        at = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(ends - starts + 1, out=at[1:])
        spans = zip(starts.tolist(), ends.tolist(), strict=True)
        return IdColumn(Strings(b"\0".join(blob[start:end] for start, end in spans), at))

    def same(self, ids: Sequence[str]) -> bool:
        """Whether ``ids`` are exactly this column's, in order (one comparison of bytes)."""
        if len(ids) != len(self):
            return False
        # entries hold no NUL (they are joined by one), so equal blobs split alike
        return "\0".join(ids).encode(*_ENCODING) == self.strings.blob


class IdPositions(Mapping[str, int]):
    """The row of each id of an :class:`IdColumn` (its ids are unique)."""

    __slots__ = ("_column", "_hashes", "_rows")

    def __init__(self, column: IdColumn, ids: Sequence[str] | None = None) -> None:
        """``ids``: the column's ids if the caller has them as strings already."""
        listed = column.tolist() if ids is None else ids
        hashes = np.fromiter(map(hash, listed), dtype=np.int64, count=len(listed))
        order = np.argsort(hashes, kind="stable")
        self._set(column, hashes[order], order)

    def _set(
        self, column: IdColumn, hashes: npt.NDArray[np.int64], rows: npt.NDArray[np.integer]
    ) -> None:
        if len(column) > _MAX_ROWS:
            raise ValueError(f"{len(column)} rows: at most {_MAX_ROWS}")
        self._column = column
        self._hashes = hashes
        self._rows = rows.astype(np.int32)

    def extended(self, column: IdColumn, ids: Sequence[str]) -> IdPositions:
        """The positions of ``column``: these rows followed by ``ids`` (its last rows).
        The new hashes are merged in: nothing already here is hashed or sorted again."""
        codes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        order = np.argsort(codes, kind="stable")
        at = np.searchsorted(self._hashes, codes[order], side="right")
        out = IdPositions.__new__(IdPositions)
        first = len(self._column)
        out._set(column, np.insert(self._hashes, at, codes[order]),
                 np.insert(self._rows, at, (first + order).astype(np.int32)))  # fmt: skip
        return out

    def kept(self, column: IdColumn, keep: npt.NDArray[np.bool_]) -> IdPositions:
        """The positions of ``column``: the rows ``keep`` marks, renumbered in order."""
        renumbered = np.cumsum(keep) - 1
        stays = keep[self._rows]
        out = IdPositions.__new__(IdPositions)
        out._set(column, self._hashes[stays], renumbered[self._rows[stays]])
        return out

    def __len__(self) -> int:
        return len(self._column)

    def __iter__(self) -> Iterator[str]:
        return iter(self._column)

    def __contains__(self, memory_id: object) -> bool:
        return self.get(memory_id) is not None

    def __getitem__(self, memory_id: str) -> int:
        row = self.get(memory_id)
        if row is None:
            raise KeyError(memory_id)
        return row

    def get(self, memory_id: object, default: int | None = None) -> int | None:  # type: ignore[override]
        """The row of ``memory_id``, or ``default``."""
        if not isinstance(memory_id, str):
            return default
        code = hash(memory_id)
        hashes = self._hashes
        at = int(hashes.searchsorted(code))
        while at < len(hashes) and hashes[at] == code:
            row = int(self._rows[at])
            if self._column.strings[row] == memory_id:
                return row
            at += 1
        return default

    def rows_of(self, ids: Sequence[str]) -> npt.NDArray[np.intp]:
        """The row of each of ``ids`` (-1 for an id not here), with one search for all."""
        if not ids:
            return np.zeros(0, dtype=np.intp)
        codes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        hashes = self._hashes
        at = np.minimum(hashes.searchsorted(codes), max(len(hashes) - 1, 0))
        out = np.full(len(ids), -1, dtype=np.intp)
        if not len(hashes):
            return out
        match = np.flatnonzero(hashes[at] == codes)
        rows = self._rows[at[match]]
        strings = self._column.strings
        blob = strings.blob
        starts, ends = strings.at[rows].tolist(), (strings.at[rows + 1] - 1).tolist()
        for i, row, start, end in zip(match.tolist(), rows.tolist(), starts, ends, strict=True):
            if blob[start:end] == ids[i].encode(*_ENCODING):
                out[i] = row
            else:  # another id with the same hash first: the slow way
                found = self.get(ids[i])
                out[i] = -1 if found is None else found
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held beside the column: the sorted hashes and their rows."""
        return int(self._hashes.nbytes + self._rows.nbytes)
