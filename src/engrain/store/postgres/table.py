"""A large user's rows read as columns, and their vectors read back by id (issue 18).

A working set (``working.py``) read every row of the user into a
:class:`~engrain.model.Memory` and built the columns, the BM25 index and the graph from
those objects: the objects stayed alive as the rows of the working set (each with its own
float32 vector, its strings and its datetimes), beside the float32 matrix built from them:
~860 MB for a process serving a 100,000-memory user (docs/postgres.md, "Session 13"). The
SQLite store holds the same user in ~290 MB, because it reads a large user's rows into a
:class:`~engrain.store.columns.Table` (columns: the texts, ids and hashes as one blob each,
repeated values once with a code per row, numbers as arrays) and builds a ``Memory`` only
for a row a call returns; and once the approximate index holds every row, it drops the
float32 matrix and reads the vectors a search scores from the store's rows
(``store/cache.py``, "Vectors held once").

This module gives a PostgreSQL working set the same two things:

* :func:`read_table`: the user's rows as a :class:`Table`, read through a server-side
  cursor a chunk at a time (a chunk's tuples are dropped once copied), times converted to
  microseconds by the server (``extract(epoch …)`` is exact to the microsecond), the
  domains as the JSON the columns decode. ``None`` if the vectors are not all of one size
  (a model change half done): the caller reads objects then, as before.
* :func:`row_vectors`: a :class:`~engrain.store.arrays.RowVectors` reading the float32
  vectors of a search's candidates by their ids (the primary key), one statement per
  read; a row found only if it still holds that memory with a vector of the size asked.
  What the index's int8 copy cannot do (score exactly) is done with the stored vectors, so
  a result's score is the SQL path's.

The table's ``rowids`` are the rows' ``seq`` (the identity column): what the row was read
as, never used to read it back (ids are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.model import Kind, MemoryType
from engrain.store.columns import (
    NO_COUNT,
    NO_TIME,
    Codes,
    Columns,
    Strings,
    Table,
    counts_array,
    texts_digest,
)
from engrain.store.postgres.codec import WITH_ACCESS, Conn

#: Rows per fetch of the server-side cursor.
CHUNK = 4_096


def _micros(column: str) -> str:
    """SQL: a ``timestamptz`` as microseconds since the epoch (:data:`NO_TIME` if NULL)."""
    return f"coalesce((extract(epoch FROM {column}) * 1000000)::bigint, {NO_TIME})"


#: Each field of the table and the SQL reading it, in the order read.
FIELDS: tuple[tuple[str, str], ...] = (
    ("ids", "m.id"),
    ("content", "m.content"),
    ("content_hash", "m.content_hash"),
    ("project", "m.project"),
    ("session_id", "m.session_id"),
    ("key", "m.key"),
    ("source_session_id", "m.source_session_id"),
    ("superseded_by", "m.superseded_by"),
    # empty lists as NULL: no JSON to decode (a missing code reads as no domains)
    ("domains", "CASE WHEN cardinality(m.domains) > 0 THEN array_to_json(m.domains)::text END"),
    ("provenance", "m.provenance::text"),
    ("memory_type", "m.memory_type"),
    ("kind", "m.kind"),
    ("created", _micros("m.created_at")),
    ("updated", _micros("m.updated_at")),
    ("event", _micros("m.event_at")),
    ("promoted", _micros("m.promoted_at")),
    ("importance", "m.importance"),
    ("confidence", "m.confidence"),
    ("usefulness", "m.usefulness"),
    ("pinned", "m.pinned"),
    ("muted", "m.muted"),
    ("compressed", "m.compressed"),
    ("compression_source", "m.compression_source"),
    ("content_tokens", f"coalesce(m.content_tokens, {NO_COUNT})"),
    ("rowids", "m.seq"),
    ("access", "coalesce(a.access_count, 0)"),
    ("last", _micros("a.last_accessed_at")),
    ("embedding", "vector_send(m.embedding)"),
)
_AT = {name: i for i, (name, _) in enumerate(FIELDS)}
#: Every row of a user, in id order (equal scores rank by id, as in SQL).
SELECT_TABLE = (
    f"SELECT {', '.join(sql for _, sql in FIELDS)} FROM memories m {WITH_ACCESS} "
    "WHERE m.user_id = %s ORDER BY m.id"
)
_STRINGS = ("ids", "content", "content_hash")
_CODES = ("project", "session_id", "key", "source_session_id", "superseded_by", "domains",
          "provenance")  # fmt: skip
_INTS = ("created", "updated", "event", "promoted", "rowids", "access", "last")
_FLOATS = ("importance", "confidence", "usefulness")
_FLAGS = ("pinned", "muted", "compressed", "compression_source")
_COUNTS = ("content_tokens",)
#: The type of each array field.
_DTYPES: dict[str, Any] = {
    **dict.fromkeys(_INTS, np.int64), **dict.fromkeys(_FLOATS, np.float64),
    **dict.fromkeys(_FLAGS, np.bool_), **dict.fromkeys(_COUNTS, np.int32),
    "memory_type": np.int8, "kind": np.int8,
}  # fmt: skip
_TYPES = {t.value: i for i, t in enumerate(MemoryType)}
_KINDS = {k.value: i for i, k in enumerate(Kind)}


class TableBuilder:
    """A :class:`Table` from rows read with :data:`SELECT_TABLE`, chunk by chunk, each
    chunk made compact as it comes: its vectors copied into one matrix (``expected``: the
    rows announced, the matrix's first size), its strings encoded into a blob, its repeated
    values coded, its numbers and flags into arrays. No Python object of a row outlives its
    chunk, so the load's small allocations are reused chunk after chunk instead of piling
    up between what stays (kept per field until :meth:`finish`, they left ~90 MB freed but
    resident in glibc's heap at 100,000 rows: docs/postgres.md, "Session 14")."""

    def __init__(self, user_id: str, expected: int) -> None:
        self.user_id = user_id
        self.expected = max(0, expected)
        self._strings: dict[str, list[Strings]] = {name: [] for name in _STRINGS}
        self._codes: dict[str, dict[str, int]] = {name: {} for name in _CODES}
        self._coded: dict[str, list[npt.NDArray[np.int32]]] = {name: [] for name in _CODES}
        self._arrays: dict[str, list[npt.NDArray[Any]]] = {
            name: [] for name in (*_INTS, *_FLOATS, *_FLAGS, *_COUNTS, "memory_type", "kind")
        }
        self._matrix: npt.NDArray[np.float32] | None = None
        self._has_vector: list[npt.NDArray[np.bool_]] = []
        self._rows = 0
        self.uniform = True

    def add(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """The next rows, in order."""
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        for name in _STRINGS:
            self._strings[name].append(Strings.of(columns[_AT[name]]))
        for name in _CODES:
            index = self._codes[name]
            codes = [
                -1 if v is None else index.setdefault(v, len(index)) for v in columns[_AT[name]]
            ]
            self._coded[name].append(np.array(codes, dtype=np.int32))
        arrays = self._arrays
        for name in (*_INTS, *_FLOATS, *_FLAGS):
            arrays[name].append(np.array(columns[_AT[name]], dtype=_DTYPES[name]))
        for name in _COUNTS:
            arrays[name].append(counts_array(columns[_AT[name]]))
        arrays["memory_type"].append(
            np.array([_TYPES[v] for v in columns[_AT["memory_type"]]], dtype=np.int8)
        )
        arrays["kind"].append(np.array([_KINDS[v] for v in columns[_AT["kind"]]], dtype=np.int8))
        self._vectors(columns[_AT["embedding"]])

    def _vectors(self, found: Sequence[bytes | None]) -> None:
        """The chunk's vectors, in pgvector's binary form (a 4-byte header, then big-endian
        float32s): one join and one conversion for the chunk."""
        start, self._rows = self._rows, self._rows + len(found)
        present = np.fromiter((v is not None for v in found), bool, len(found))
        self._has_vector.append(present)
        if not self.uniform or not present.any():
            return
        block = [v for v in found if v is not None]
        size = len(block[0])
        dim = (size - 4) // 4
        if self._matrix is None:
            self._matrix = np.zeros((max(self.expected, self._rows), dim), dtype=np.float32)
        if any(len(v) != size for v in block) or self._matrix.shape[1] != dim:
            self.uniform = False
            return
        if self._rows > len(self._matrix):  # more rows than announced: grow
            grown = np.zeros((max(self._rows, 2 * len(self._matrix)), dim), dtype=np.float32)
            grown[: len(self._matrix)] = self._matrix
            self._matrix = grown
        floats = np.frombuffer(b"".join(block), dtype=">f4").reshape(len(block), dim + 1)
        self._matrix[start : self._rows][present] = floats[:, 1:]

    def finish(self) -> Table | None:
        """The table of every row added; ``None`` if the vectors are not all of one size."""
        if not self.uniform:
            return None
        n = self._rows
        matrix = self._matrix
        if matrix is None:
            matrix = np.zeros((n, 0), dtype=np.float32)
        elif len(matrix) > n:
            matrix = matrix[:n].copy()
        matrix.flags.writeable = False
        fields: dict[str, Any] = {name: _joined(self._strings[name]) for name in _STRINGS}
        for name in _CODES:
            fields[name] = Codes(
                list(self._codes[name]), _concatenated(self._coded[name], np.int32)
            )
        arrays = {name: _concatenated(parts, _DTYPES[name]) for name, parts in self._arrays.items()}
        for name in (*_FLOATS, *_FLAGS, *_COUNTS, "memory_type", "kind", "created", "updated",
                     "event", "promoted", "rowids"):  # fmt: skip
            fields[name] = arrays[name]
        content: Strings = fields["content"]
        columns = Columns(
            user_id=self.user_id,
            content_digest=texts_digest(len(content), content.blob),
            **fields,
        )
        has_vector = _concatenated(self._has_vector, np.bool_)
        return Table(columns, matrix, has_vector, arrays["access"], arrays["last"])


def _concatenated(parts: Sequence[npt.NDArray[Any]], empty: Any) -> npt.NDArray[Any]:
    """The chunks' arrays as one (an empty one of type ``empty`` for no chunk)."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype=empty)


def _joined(parts: Sequence[Strings]) -> Strings:
    """The chunks' strings as one list: their blobs joined by a NUL, their offsets moved."""
    if not parts:
        return Strings.of([])
    at = [parts[0].at]
    offset = len(parts[0].blob) + 1
    for part in parts[1:]:
        at.append(part.at[1:] + offset)
        offset += len(part.blob) + 1
    return Strings(b"\0".join(part.blob for part in parts), np.concatenate(at))


def read_table(cur: Any, user_id: str, expected: int) -> Table | None:
    """Every row of the user as a :class:`Table` (``None``: vectors of several sizes),
    through ``cur``, a cursor inside the caller's transaction (one snapshot): a named,
    binary cursor is opened on its connection and read :data:`CHUNK` rows at a time."""
    builder = TableBuilder(user_id, expected)
    with cur.connection.cursor(name="engrain_ws_rows", binary=True) as rows:
        rows.execute(SELECT_TABLE, (user_id,))
        while chunk := rows.fetchmany(CHUNK):
            builder.add(chunk)
    return builder.finish()


#: The vectors (pgvector's binary form: ``vector_send``) and, asked for, the texts of
#: memories by id.
_VECTORS = "SELECT id, vector_send(embedding){} FROM memories WHERE user_id = %s AND id = ANY(%s)"


def row_vectors(
    connect: Callable[[], AbstractContextManager[Conn]], user_id: str
) -> Callable[..., tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32], list[str | None] | None]]:
    """A :class:`~engrain.store.arrays.RowVectors` over the user's rows: the vectors of the
    memories asked for (``ids``; ``rowids`` are not needed, the ids are the key), one
    statement; a memory counts as found only if its row is there with a vector of the
    size asked (else zeros: the working set falls back on its index's copy). The vectors
    come as pgvector's binary form (a 4-byte header, then big-endian float32s), joined and
    converted at once: half the client CPU of a numpy array made per row (1,000 vectors:
    3.5 against 7.7 ms, docs/postgres.md "Session 14")."""

    def read(
        rowids: npt.NDArray[np.int64], ids: Sequence[str], dim: int, *, texts: bool = False
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32], list[str | None] | None]:
        del rowids  # read by id
        found = np.zeros(len(ids), dtype=bool)
        vectors = np.zeros((len(ids), dim), dtype=np.float32)
        content: list[str | None] | None = [None] * len(ids) if texts else None
        if not ids:
            return found, vectors, content
        where: dict[str, list[int]] = {}  # an id's positions in ``ids``
        for position, memory_id in enumerate(ids):
            where.setdefault(memory_id, []).append(position)
        with connect() as conn, conn.cursor(binary=True) as cur:
            cur.execute(_VECTORS.format(", content" if texts else ""), (user_id, list(where)))
            rows = cur.fetchall()
        size = 4 + 4 * dim  # the header (dimension, unused) and the floats
        at: list[int] = []
        blobs: list[bytes] = []
        for row in rows:
            blob = row[1]
            if blob is None or len(blob) != size:
                continue
            for i in where[row[0]]:
                at.append(i)
                blobs.append(blob)
                if content is not None:
                    content[i] = row[2]
        if at:
            block = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(at), dim + 1)
            vectors[at] = block[:, 1:]
            found[at] = True
        return found, vectors, content

    return read
