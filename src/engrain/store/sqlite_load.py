"""Reading one user's working set from the SQLite file (issue 18).

Two ways, inside one read transaction the caller opened (so every read sees one state of
the file):

- **From the saved image.** A user with :data:`~engrain.store.columns.PERSIST_MIN_ROWS` or
  more memories has an image of their columns in ``derived_indexes`` (kind ``columns``),
  stamped with the revision and the migrations it was read at. It is used only if the stamp
  equals the file's now and the user's rowids, read in the same transaction with the
  vectors and access counts (which the image does not hold), are the image's. The revision
  is bumped by every write of the user's rows except counted uses, and counted uses are
  read here with the rows (from ``uses``, ``store/sqlite_uses.py``), so a matching image
  holds what the rows hold. The image holds no
  texts: the table reads them from the rows when a call returns them (``store/texts.py``),
  so a caller without such a reader reads the rows.
- **From the rows**, in chunks of rowids (``ORDER BY rowid`` over the user index made
  SQLite sort whole rows, vectors included, in a temporary b-tree), into columns: no
  ``Memory`` is built. The caller saves the image of a large user afterwards.

Rows whose vectors are not all of one size (a model change half done) are read as
``Memory`` objects instead, as before this module.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from engrain.model import Memory
from engrain.store import columns as image
from engrain.store import heap, sqlite_uses
from engrain.store.ann_stamp import IndexStamp
from engrain.store.arrays import HeldTable
from engrain.store.base import MEMORY_COLUMNS
from engrain.store.columns import ColumnsBuilder, Stamp, Strings, Table, parse_micros
from engrain.store.texts import ReadTexts, without_texts

#: Rows per chunk of a read by rowid range.
LOAD_CHUNK = 4_096
_FULL = (
    f"SELECT {sqlite_uses.SELECT_LIST}, m.rowid FROM memories m NOT INDEXED "
    "LEFT JOIN uses u ON u.user_id = m.user_id AND u.id = m.id "
    "WHERE m.rowid BETWEEN ? AND ? AND m.user_id = ? ORDER BY m.rowid"
)
_LIVE = (
    "SELECT m.rowid, m.embedding FROM memories m NOT INDEXED "
    "WHERE m.rowid BETWEEN ? AND ? AND m.user_id = ? ORDER BY m.rowid"
)
#: :data:`_LIVE` with each vector's length instead of its bytes (SQLite reads a blob's
#: length from the record's header: the vector is not copied).
_LIVE_SIZES = _LIVE.replace("m.embedding FROM", "length(m.embedding) FROM")
#: The rowid and uses of each of the user's memories ever used (the others' are 0 and
#: none): read from ``uses`` (most memories are never used: ~5 % of the 100,000-memory
#: bench store), instead of joining ``uses`` to every row of the scan (a lookup a row:
#: ~0.22 s of a 0.44 s scan at 100,000; docs/scale.md, "Session 21 … (h10)").
_USED = (
    "SELECT m.rowid, u.access_count, u.last_accessed_at FROM uses u "
    "JOIN memories m ON m.user_id = u.user_id AND m.id = u.id "
    "WHERE u.user_id = ? AND (u.access_count != 0 OR u.last_accessed_at IS NOT NULL)"
)
#: The user's rowids as one text value (SQLite answers it from a user index: its
#: ``(user_id, …)`` entries carry the rowid; no row of the table is read).
_ROWIDS = "SELECT group_concat(rowid) FROM memories WHERE user_id = ?"
_EMBEDDING = MEMORY_COLUMNS.index("embedding")
_ACCESS = MEMORY_COLUMNS.index("access_count")
_LAST = MEMORY_COLUMNS.index("last_accessed_at")


@dataclass(frozen=True)
class Loaded:
    """A working set as read: a ``table`` (columns), or ``memories`` (objects: vectors of
    several sizes); ``save`` is the image to keep for next time, if one should be."""

    table: Table | HeldTable | None
    memories: list[Memory] | None
    save: Callable[[], bytes] | None = None
    #: The user's revision in the read transaction (what the working set holds).
    revision: int = 0
    #: The read's stamp (revision and migrations).
    stamp: Stamp | None = None


def read(
    db: sqlite3.Connection,
    user_id: str,
    saved: Callable[[], bytes | None],
    decode: Callable[[tuple[Any, ...]], Memory],
    texts: Callable[[npt.NDArray[np.int64], Strings], ReadTexts] | None = None,
    held: Callable[[Stamp], IndexStamp | None] | None = None,
) -> Loaded:
    """The user's working set, inside the read transaction the caller holds. ``saved``
    reads the user's image (or ``None``); ``decode`` makes a memory of a full row;
    ``texts`` reads the texts of a table loaded from the image on demand (the image holds
    none: without ``texts`` the rows are read). ``held``: given the read's stamp, the stamp
    of a saved approximate index that holds every row's vector at that stamp, if one
    does (``store/ann_stamp.py``): a table loaded from a matching image then reads no
    vector (a :class:`~engrain.store.arrays.HeldTable`: the caller reads them through
    that index), and no row of ``memories`` at all if the stamp says which rows have one
    (:func:`_vouched`)."""
    revision = db.execute("SELECT revision FROM revisions WHERE user_id = ?", (user_id,))
    rows = revision.fetchall()
    names = [r[0] for r in db.execute("SELECT name FROM migrations ORDER BY name").fetchall()]
    stamp = Stamp(int(rows[0][0]) if rows else 0, tuple(names))
    count = int(db.execute("SELECT count(*) FROM memories WHERE user_id = ?", (user_id,))
                .fetchall()[0][0])  # fmt: skip
    large = count >= image.PERSIST_MIN_ROWS
    if large:  # the load's transients mapped apart from what stays (store/heap.py)
        heap.map_large_blocks(count)
    if large and texts is not None:
        columns = image.load(saved(), stamp, user_id)
        if columns is not None and len(columns) == count:
            # copied out first: the image's bytes are freed before the scan of the rows
            # allocates the vectors' matrix (a lower peak)
            columns = without_texts(columns, texts)
            vouched = None if held is None else held(stamp)
            table = _live(db, user_id, columns, vouched)
            if table is not None:
                return Loaded(table, None, revision=stamp.revision, stamp=stamp)
    rowids = [r[0] for r in db.execute(
        "SELECT rowid FROM memories WHERE user_id = ? ORDER BY rowid", (user_id,)
    ).fetchall()]  # fmt: skip
    builder = ColumnsBuilder(user_id)
    vectors = _Vectors(len(rowids))
    access: list[int] = []
    last: list[str | None] = []
    for part in _ranges(rowids):
        chunk = db.execute(_FULL, (*part, user_id)).fetchall()
        builder.add(chunk)
        vectors.add([r[_EMBEDDING] for r in chunk])
        access.extend(r[_ACCESS] for r in chunk)
        last.extend(r[_LAST] for r in chunk)
    matrix = vectors.finish()
    if matrix is None:  # vectors of several sizes: objects, as the rows say
        memories: list[Memory] = []
        for part in _ranges(rowids):
            memories.extend(decode(r[:-1]) for r in db.execute(_FULL, (*part, user_id)))
        return Loaded(None, memories, revision=stamp.revision, stamp=stamp)
    columns = builder.finish()
    table = Table(columns, *matrix, np.array(access, dtype=np.int64), _times(last))
    save = (lambda: image.dump(columns, stamp)) if large else None
    return Loaded(table, None, save, stamp.revision, stamp)


def _live(
    db: sqlite3.Connection,
    user_id: str,
    columns: image.Columns,
    vouched: IndexStamp | None = None,
) -> Table | HeldTable | None:
    """The table of a saved image with the vectors and access counts the rows have now;
    ``None`` if the user's rows are not the image's (its rowids) or their vectors are not
    of one size. ``vouched``: the stamp of a saved index holding every row's vector: only
    which rows have one is read (a :class:`~engrain.store.arrays.HeldTable`; taken from
    the stamp itself when it keeps it, :func:`_vouched`), and a vector of another size
    makes it ``None`` too (the caller reads the rows)."""
    if vouched is not None:
        has_vector = vouched.vectors_for(columns.rowids)
        if has_vector is not None:
            return _vouched(db, user_id, columns, has_vector, vouched.dim)
    held = None if vouched is None else vouched.dim
    rowids: list[int] = []
    vectors = _Vectors(len(columns.rowids))
    sizes: list[int | None] = []
    for part in _ranges(columns.rowids.tolist()):
        chunk = db.execute(_LIVE if held is None else _LIVE_SIZES, (*part, user_id)).fetchall()
        if chunk:
            ids, found = zip(*chunk, strict=True)
            rowids.extend(ids)
            if held is None:
                vectors.add(found)
            else:
                sizes.extend(found)
    if len(rowids) != len(columns.rowids) or not np.array_equal(rowids, columns.rowids):
        return None
    uses = _uses(db, user_id, columns.rowids)
    if uses is None:
        return None
    counts_read, times = uses
    if held is not None:
        width = np.array([-1 if n is None else n for n in sizes], dtype=np.int64)
        has_vector = width == 4 * held
        if held <= 0 or not np.all(has_vector | (width < 0)):
            return None
        return HeldTable(columns, has_vector, counts_read, times, held)
    matrix = vectors.finish()
    if matrix is None:
        return None
    return Table(columns, *matrix, counts_read, times)


def _vouched(
    db: sqlite3.Connection,
    user_id: str,
    columns: image.Columns,
    has_vector: npt.NDArray[np.bool_],
    dim: int,
) -> HeldTable | None:
    """The table of a saved image whose revision a saved index's stamp vouches for too,
    with which rows have a vector as the stamp keeps it (for these rowids), read without
    visiting a row of ``memories``: the user's rowids from the user index (:data:`_ROWIDS`:
    its pages only, ~1 % of the table's at a million memories) and the uses of the rows
    used. ``None`` if the rowids are not the image's (the caller reads the rows). The
    revision alone already says the rows are the image's (every write of them but
    counted uses bumps it, in its own transaction); the rowids are checked anyway, as
    the scan of the rows checked them."""
    if dim <= 0 or len(has_vector) != len(columns.rowids):
        return None
    if not np.array_equal(_rowids(db, user_id), columns.rowids):
        return None
    uses = _uses(db, user_id, columns.rowids)
    if uses is None:
        return None
    counts_read, times = uses
    return HeldTable(columns, has_vector, counts_read, times, dim)


def _rowids(db: sqlite3.Connection, user_id: str) -> npt.NDArray[np.int64]:
    """The user's rowids, ascending, read from a user index without a row of the table
    (one text value: a million rowids as Python ints cost ~5 times as much)."""
    text = db.execute(_ROWIDS, (user_id,)).fetchall()[0][0]
    if not text:
        return np.zeros(0, dtype=np.int64)
    found = np.array(np.fromstring(text, dtype=np.int64, sep=","), dtype=np.int64)
    found.sort()
    return found


def _uses(
    db: sqlite3.Connection, user_id: str, rowids: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Each row's access count and last use (microseconds, :data:`~engrain.store.columns.
    NO_TIME` for none), for the user's rows ``rowids`` (sorted, just read in the same
    transaction): 0 and none but for the memories used (:data:`_USED`); ``None`` if a used
    memory's row is not among ``rowids``."""
    used = db.execute(_USED, (user_id,)).fetchall()
    counts = np.zeros(len(rowids), dtype=np.int64)
    times = np.full(len(rowids), image.NO_TIME, dtype=np.int64)
    if not used:
        return counts, times
    at, count, last = zip(*used, strict=True)
    where = np.searchsorted(rowids, np.array(at, dtype=np.int64))
    if np.any(where >= len(rowids)) or not np.array_equal(rowids[where], at):
        return None
    counts[where] = count
    times[where] = _times(last)
    return counts, times


def _ranges(rowids: Sequence[int]) -> list[tuple[int, int]]:
    """The rowid ranges of consecutive chunks of ``rowids`` (sorted)."""
    return [
        (rowids[start], rowids[min(start + LOAD_CHUNK, len(rowids)) - 1])
        for start in range(0, len(rowids), LOAD_CHUNK)
    ]


def _times(values: Sequence[str | None]) -> npt.NDArray[np.int64]:
    """Each time as microseconds (:data:`~engrain.store.columns.NO_TIME` for none): most
    rows were never used (no time) and the others share few distinct times, so each
    distinct one is parsed once."""
    parsed: dict[str | None, int] = {None: image.NO_TIME}
    out = np.fromiter(
        (parsed[v] if v in parsed else parsed.setdefault(v, parse_micros(v)) for v in values),
        np.int64, len(values),
    )  # fmt: skip
    return out


class _Vectors:
    """The rows' vectors copied chunk by chunk into one matrix (zeros for rows without
    one): a chunk's blobs are dropped once copied, so a load never holds every row's
    blob beside the matrix."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.matrix: npt.NDArray[np.float32] | None = None
        self.has_vector = np.zeros(count, dtype=bool)
        self.row = 0
        self.uniform = True

    def add(self, blobs: Sequence[bytes | None]) -> None:
        """The vectors of the next rows."""
        start, self.row = self.row, self.row + len(blobs)
        if not self.uniform or self.row > self.count:
            self.uniform = False
            return
        if self.matrix is not None and blobs and None not in blobs:
            # every row has a vector (the usual case): one join, checked by its lengths
            full = cast("Sequence[bytes]", blobs)
            width = 4 * self.matrix.shape[1]
            if min(map(len, full)) == width == max(map(len, full)):
                self.has_vector[start : self.row] = True
                block = np.frombuffer(b"".join(full), np.float32)
                self.matrix[start : self.row] = block.reshape(len(full), -1)
                return
        sizes = {len(b) for b in blobs if b is not None}
        if self.matrix is None and sizes:
            self.matrix = np.zeros((self.count, min(sizes) // 4), dtype=np.float32)
        if self.matrix is None:
            return
        width = 4 * self.matrix.shape[1]
        if sizes - {width}:
            self.uniform = False
            return
        present = np.fromiter((b is not None for b in blobs), bool, len(blobs))
        self.has_vector[start : self.row] = present
        joined = b"".join(b for b in blobs if b is not None)
        target = self.matrix[start : self.row]
        target[present] = np.frombuffer(joined, np.float32).reshape(-1, self.matrix.shape[1])

    def finish(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]] | None:
        """The read-only matrix and which rows have a vector; ``None`` if the vectors are
        of several sizes (or rows were not as many as announced)."""
        if not self.uniform or self.row != self.count:
            return None
        matrix = self.matrix
        if matrix is None:
            matrix = np.zeros((self.count, 0), dtype=np.float32)
        matrix.flags.writeable = False
        return matrix, self.has_vector
