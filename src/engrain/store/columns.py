"""A user's memories as columns, and their image kept between processes (issue 18).

Decoding 100,000 rows into ``Memory`` objects took most of a cold start (~1.5 s) and about
280 MB. A :class:`Columns` table holds every field of the rows a working set was loaded
with as arrays and UTF-8 blobs instead (texts, ids and hashes as one blob each; repeated
values such as projects, domains and provenance once, with a code per row); a ``Memory``
is built only for a row a call returns (:meth:`Columns.memory`). Two things are not part of
it: vectors (the working set's matrix) and access counts (changed by every ``context()``
without a revision: kept as arrays by the working set and read from the rows at load).

:func:`dump` and :func:`load` turn a table into bytes (arrays read in place, no pickle)
with a header saying what it was read from: the user's revision, the schema's applied
migrations, the rows' count and their rowids. The texts are not part of those bytes (only
their digest): a table loaded from them reads its texts from the rows when a call returns
them (``store/texts.py``), so an image is ~20 MB at 100,000 memories instead of ~53 MB,
read and checked at every cold start. The SQLite store keeps those bytes in
its ``derived_indexes`` table and uses them only when the header matches the file as it is
inside the same read transaction (the revision counts every write of the user's rows except
access counts, which are read from the rows anyway); anything else is read from the rows
and saved again. The source of this module is part of the header, so a change of format
invalidates every saved copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.errors import StoreError
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, as_utc

log = logging.getLogger(__name__)

Int64Array = npt.NDArray[np.int64]

#: A missing time in a column of microseconds.
NO_TIME = int(np.iinfo(np.int64).min)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TYPES = tuple(MemoryType)
_KINDS = tuple(Kind)
_ENCODING = ("utf-8", "surrogatepass")


def micros(value: datetime | None) -> int:
    """``value`` as microseconds since the epoch (:data:`NO_TIME` for ``None``)."""
    if value is None:
        return NO_TIME
    return (as_utc(value) - _EPOCH) // timedelta(microseconds=1)


def from_micros(value: int) -> datetime | None:
    """Inverse of :func:`micros` (an aware UTC datetime)."""
    return None if value == NO_TIME else _EPOCH + timedelta(microseconds=int(value))


def parse_micros(value: str | None) -> int:
    """An ISO-8601 time as the SQLite store writes it, in microseconds."""
    return NO_TIME if value is None else micros(datetime.fromisoformat(value))


def texts_digest(count: int, joined: bytes) -> bytes:
    """A digest of ``count`` texts given joined by NUL bytes (UTF-8, lone surrogates
    passed through): what a BM25 index built from them depends on besides the
    tokenizer."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(count.to_bytes(8, "little"))
    digest.update(joined)
    return digest.digest()


#: A missing ``content_tokens`` in its column (a row written before it was kept).
NO_COUNT = -1


def counts_array(values: Sequence[int | None]) -> npt.NDArray[np.int32]:
    """A column of counts (:data:`NO_COUNT` for ``None``)."""
    return np.fromiter((NO_COUNT if v is None else v for v in values), np.int32, len(values))


def _count(value: int) -> int | None:
    """A count read from its column (``None`` for :data:`NO_COUNT`)."""
    return None if value == NO_COUNT else value


def _datetimes(values: Int64Array) -> list[Any]:
    """:func:`from_micros` of each value (:data:`NO_TIME` is NumPy's "not a time")."""
    return [None if d is None else d.replace(tzinfo=UTC)
            for d in values.astype("datetime64[us]").tolist()]  # fmt: skip


class Strings:
    """An immutable list of strings kept as one UTF-8 blob: entry ``i`` is
    ``blob[at[i]:at[i + 1] - 1]`` (entries are joined by a NUL byte, so the blob of a list
    of texts is ``"\\0".join(texts)`` encoded: what the BM25 fingerprint hashes)."""

    __slots__ = ("at", "blob")

    def __init__(self, blob: bytes, at: Int64Array) -> None:
        self.blob = blob
        self.at = at

    @classmethod
    def of(cls, items: Sequence[str]) -> Strings:
        """The blob of ``items``."""
        encoded = [s.encode(*_ENCODING) for s in items]
        at = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)) + 1, out=at[1:])
        return cls(b"\0".join(encoded), at)

    def __len__(self) -> int:
        return len(self.at) - 1

    def __getitem__(self, i: int) -> str:
        return self.blob[self.at[i] : self.at[i + 1] - 1].decode(*_ENCODING)

    def all(self) -> list[str]:
        """Every entry, in order: one decode and one split of the entries' bytes when no
        entry holds a NUL (as many pieces as entries; UTF-8 never has a NUL byte inside a
        character, so the pieces are the entries' own decodings), else entry by entry."""
        if not len(self):
            return []
        start, end = int(self.at[0]), int(self.at[-1]) - 1
        pieces = self.blob[start:end].decode(*_ENCODING).split("\0")
        if len(pieces) == len(self):
            return pieces
        blob, at = self.blob, self.at.tolist()
        return [blob[at[i] : at[i + 1] - 1].decode(*_ENCODING) for i in range(len(at) - 1)]


class Codes:
    """A column of optional strings with few distinct values: the values once, a code per
    row (-1 for ``None``)."""

    __slots__ = ("codes", "values")

    def __init__(self, values: list[str], codes: npt.NDArray[np.int32]) -> None:
        self.values = values
        self.codes = codes

    @classmethod
    def of(cls, items: Iterable[str | None]) -> Codes:
        """The codes of ``items``."""
        index: dict[str | None, int] = {None: -1}
        values: list[str] = []
        codes = []
        for item in items:
            code = index.get(item)
            if code is None:
                assert item is not None
                code = index[item] = len(values)
                values.append(item)
            codes.append(code)
        return cls(values, np.array(codes, dtype=np.int32))

    def __getitem__(self, i: int) -> str | None:
        code = int(self.codes[i])
        return None if code < 0 else self.values[code]

    def objects(self) -> npt.NDArray[np.object_]:
        """The column as an object array (``None`` where missing)."""
        table = np.array([*self.values, None], dtype=object)
        return table[self.codes]  # -1 is the trailing None


class Unread:
    """The ``content`` column of a table loaded from an image, which holds no texts: their
    count only. The loader replaces it with a reader of the rows' texts
    (:func:`~engrain.store.texts.without_texts`) before the table is used."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> str:
        raise StoreError("an image's texts are read from the rows (store/texts.py)")

    def all(self) -> list[str]:
        """Never: see :meth:`__getitem__`."""
        raise StoreError("an image's texts are read from the rows (store/texts.py)")


@dataclass(frozen=True, eq=False)
class Columns:
    """Every field but the vector and the access count of ``n`` memories of one user, in
    the working set's row order; ``rowids`` are the SQLite rows they were read from (empty
    elsewhere). Never changed once built."""

    user_id: str
    ids: Strings
    content: Strings
    content_hash: Strings
    project: Codes
    session_id: Codes
    key: Codes
    source_session_id: Codes
    superseded_by: Codes
    domains: Codes  # JSON lists
    provenance: Codes  # JSON objects
    memory_type: npt.NDArray[np.int8]  # position in MemoryType
    kind: npt.NDArray[np.int8]  # position in Kind
    created: Int64Array  # microseconds
    updated: Int64Array
    event: Int64Array
    promoted: Int64Array
    importance: npt.NDArray[np.float64]
    confidence: npt.NDArray[np.float64]
    usefulness: npt.NDArray[np.float64]
    pinned: npt.NDArray[np.bool_]
    muted: npt.NDArray[np.bool_]
    compressed: npt.NDArray[np.bool_]
    compression_source: npt.NDArray[np.bool_]
    #: ``Memory.content_tokens`` (:data:`NO_COUNT` where the row has none).
    content_tokens: npt.NDArray[np.int32]
    rowids: Int64Array
    #: :func:`texts_digest` of ``content`` (saved with the image: no text is hashed to
    #: check a saved BM25 index).
    content_digest: bytes
    #: Decoded JSON per code, filled as rows are decoded (one value, one object).
    _domains: list[tuple[str, ...] | None] = field(init=False, repr=False)
    _provenances: list[Provenance | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_domains", [None] * len(self.domains.values))
        object.__setattr__(self, "_provenances", [None] * len(self.provenance.values))

    def __len__(self) -> int:
        return len(self.ids)

    def memory(
        self, row: int, embedding: Vector | None, access_count: int, last_accessed: int
    ) -> Memory:
        """The memory of ``row`` with this vector and access count (last access in
        microseconds)."""
        created, updated = from_micros(int(self.created[row])), from_micros(int(self.updated[row]))
        assert created is not None and updated is not None
        return Memory(
            id=self.ids[row], user_id=self.user_id, project=self.project[row],
            content=self.content[row], memory_type=_TYPES[self.memory_type[row]],
            kind=_KINDS[self.kind[row]], domains=self._domain(row),
            session_id=self.session_id[row], created_at=created, updated_at=updated,
            event_at=from_micros(int(self.event[row])), key=self.key[row],
            importance=float(self.importance[row]), confidence=float(self.confidence[row]),
            usefulness=float(self.usefulness[row]), access_count=int(access_count),
            last_accessed_at=from_micros(int(last_accessed)), pinned=bool(self.pinned[row]),
            muted=bool(self.muted[row]), promoted_at=from_micros(int(self.promoted[row])),
            compressed=bool(self.compressed[row]),
            compression_source=bool(self.compression_source[row]),
            source_session_id=self.source_session_id[row],
            superseded_by=self.superseded_by[row], provenance=self._provenance_of(row),
            content_hash=self.content_hash[row], embedding=embedding,
            content_tokens=_count(int(self.content_tokens[row])),
        )  # fmt: skip

    def memories(
        self,
        rows: Sequence[int],
        embeddings: Sequence[Vector | None],
        access_counts: Sequence[int],
        last_accessed: Sequence[int],
    ) -> list[Memory]:
        """:meth:`memory` of each row, built together: each column is read once for all
        of them (a third of the time of one by one)."""
        at = np.asarray(rows, dtype=np.int64)
        types, kinds = self.memory_type[at].tolist(), self.kind[at].tolist()
        created, updated = _datetimes(self.created[at]), _datetimes(self.updated[at])
        event, promoted = _datetimes(self.event[at]), _datetimes(self.promoted[at])
        last = _datetimes(np.asarray(last_accessed, dtype=np.int64))
        importance, confidence = self.importance[at].tolist(), self.confidence[at].tolist()
        usefulness = self.usefulness[at].tolist()
        pinned, muted = self.pinned[at].tolist(), self.muted[at].tolist()
        compressed, source = self.compressed[at].tolist(), self.compression_source[at].tolist()
        counts = self.content_tokens[at].tolist()
        out = []
        for i, row in enumerate(rows):
            out.append(Memory(
                id=self.ids[row], user_id=self.user_id, project=self.project[row],
                content=self.content[row], memory_type=_TYPES[types[i]], kind=_KINDS[kinds[i]],
                domains=self._domain(row), session_id=self.session_id[row],
                created_at=created[i], updated_at=updated[i], event_at=event[i],
                key=self.key[row], importance=importance[i], confidence=confidence[i],
                usefulness=usefulness[i], access_count=int(access_counts[i]),
                last_accessed_at=last[i], pinned=pinned[i], muted=muted[i],
                promoted_at=promoted[i], compressed=compressed[i],
                compression_source=source[i], source_session_id=self.source_session_id[row],
                superseded_by=self.superseded_by[row], provenance=self._provenance_of(row),
                content_hash=self.content_hash[row], embedding=embeddings[i],
                content_tokens=_count(counts[i]),
            ))  # fmt: skip
        return out

    def _domain(self, row: int) -> tuple[str, ...]:
        code = int(self.domains.codes[row])
        if code < 0:
            return ()
        found = self._domains[code]
        if found is None:
            found = self._domains[code] = tuple(json.loads(self.domains.values[code]))
        return found

    def _provenance_of(self, row: int) -> Provenance:
        code = int(self.provenance.codes[row])
        if code < 0:
            return Provenance()
        found = self._provenances[code]
        if found is None:
            found = Provenance.from_dict(json.loads(self.provenance.values[code]))
            self._provenances[code] = found
        return found


#: SQLite column positions (``MEMORY_COLUMNS``) of each field of a table.
_CODES: Mapping[str, int] = {
    "project": 2, "session_id": 7, "key": 11, "source_session_id": 22, "superseded_by": 26,
    "domains": 6, "provenance": 23,
}  # fmt: skip
_TIMES: Mapping[str, int] = {"created": 8, "updated": 9, "event": 10, "promoted": 19}
_FLOATS: Mapping[str, int] = {"importance": 12, "confidence": 13, "usefulness": 14}
_FLAGS: Mapping[str, int] = {"pinned": 17, "muted": 18, "compressed": 20,
                             "compression_source": 21}  # fmt: skip
_COUNTS: Mapping[str, int] = {"content_tokens": 27}
_ARRAYS = ("memory_type", "kind", *_TIMES, *_FLOATS, *_FLAGS, *_COUNTS)
_STRINGS = ("ids", "content", "content_hash")
#: The strings an image holds: not the texts (read from the rows on demand).
_SAVED_STRINGS = ("ids", "content_hash")
_SKIPPED = (1, 15, 16, 25)  # the user, the access count and time, the vector
_ROWID = 28


class ColumnsBuilder:
    """A :class:`Columns` table from SQLite rows (``MEMORY_COLUMNS`` order and the rowid;
    the vector and access columns are not kept), chunk by chunk."""

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self._parts: list[list[Any]] = [[] for _ in range(_ROWID)]
        self._rowids: list[int] = []

    def add(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """The next rows, in order: ``MEMORY_COLUMNS`` followed by the rowid."""
        if not rows:
            return
        for column, values in enumerate(zip(*rows, strict=True)):
            if column == _ROWID:
                self._rowids.extend(values)
            elif column not in _SKIPPED:
                self._parts[column].extend(values)

    def finish(self) -> Columns:
        """The table of every row added."""
        parts = self._parts
        types = {t.value: i for i, t in enumerate(_TYPES)}
        kinds = {k.value: i for i, k in enumerate(_KINDS)}
        fields: dict[str, Any] = {
            "ids": Strings.of(parts[0]),
            "content": Strings.of(parts[3]),
            "content_hash": Strings.of(parts[24]),
            "memory_type": np.array([types[v] for v in parts[4]], dtype=np.int8),
            "kind": np.array([kinds[v] for v in parts[5]], dtype=np.int8),
        }
        for name, col in _CODES.items():
            # "[]" and "{}", the common empty values, as missing: no JSON to decode
            empty = _EMPTY.get(name)
            fields[name] = Codes.of(None if v == empty else v for v in parts[col])
        for name, col in _TIMES.items():
            fields[name] = np.fromiter(map(parse_micros, parts[col]), np.int64, len(parts[col]))
        for name, col in _FLOATS.items():
            fields[name] = np.array(parts[col], dtype=np.float64)
        for name, col in _FLAGS.items():
            fields[name] = np.array(parts[col], dtype=bool)
        for name, col in _COUNTS.items():
            fields[name] = counts_array(parts[col])
        content: Strings = fields["content"]
        return Columns(
            user_id=self.user_id, rowids=np.array(self._rowids, dtype=np.int64),
            content_digest=texts_digest(len(content), content.blob), **fields,
        )  # fmt: skip


_EMPTY = {"domains": "[]", "provenance": "{}"}


# -- the saved image ---------------------------------------------------------------------

#: Users with fewer memories are read from their rows (well under 100 ms): no image.
PERSIST_MIN_ROWS = 5_000
_FORMAT = 2  # 2: without the texts


@lru_cache(maxsize=1)
def _source_digest() -> str:
    """A digest of this module: a saved image of another format is never read."""
    return hashlib.blake2b(Path(__file__).read_bytes(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Stamp:
    """What an image was read from: the user's revision and the schema's migrations."""

    revision: int
    migrations: tuple[str, ...]

    def header(self, count: int) -> dict[str, Any]:
        """The JSON header of an image of ``count`` rows with this stamp."""
        return {"format": _FORMAT, "source": _source_digest(), "revision": self.revision,
                "migrations": list(self.migrations), "rows": count}  # fmt: skip


_MAGIC = b"ENGRCOL1"
_FRAME = struct.Struct("<8sQQI")  # magic, header length, payload length, CRC-32 of both
_ALIGN = 8


def dump(columns: Columns, stamp: Stamp) -> bytes:
    """``columns`` (read at ``stamp``) as bytes: a frame (magic, lengths, CRC-32), a JSON
    header (the stamp, the user, the texts' digest, where each array is) and the arrays'
    bytes, each readable in place (:func:`load` copies nothing). The texts themselves are
    not saved (``columns.content`` is not read: it may be a reader of the rows)."""
    arrays: dict[str, npt.NDArray[Any]] = {"rowids": columns.rowids}
    for name in _SAVED_STRINGS:
        strings: Strings = getattr(columns, name)
        arrays[f"{name}.blob"] = np.frombuffer(strings.blob, np.uint8)
        arrays[f"{name}.at"] = strings.at
    for name in _CODES:
        codes: Codes = getattr(columns, name)
        values = Strings.of(codes.values)
        arrays[f"{name}.values"] = np.frombuffer(values.blob, np.uint8)
        arrays[f"{name}.values_at"] = values.at
        arrays[f"{name}.codes"] = codes.codes
    for name in _ARRAYS:
        arrays[name] = getattr(columns, name)
    parts: list[bytes] = []
    where: dict[str, list[Any]] = {}
    offset = 0
    for name, array in arrays.items():
        raw = np.ascontiguousarray(array).tobytes()
        where[name] = [array.dtype.str, list(array.shape), offset]
        parts.append(raw + bytes(-len(raw) % _ALIGN))
        offset += len(parts[-1])
    header = json.dumps({**stamp.header(len(columns)), "user_id": columns.user_id,
                         "content_digest": columns.content_digest.hex(),
                         "arrays": where}).encode()  # fmt: skip
    header += b" " * (-len(header) % _ALIGN)
    payload = b"".join(parts)
    crc = zlib.crc32(payload, zlib.crc32(header))
    return _FRAME.pack(_MAGIC, len(header), len(payload), crc) + header + payload


def load(data: bytes | None, stamp: Stamp, user_id: str) -> Columns | None:
    """The table :func:`dump` made if it was read at ``stamp`` for ``user_id`` by this
    format, else ``None`` (none saved, torn, damaged, or stale). Its arrays and strings are
    views of ``data``; its ``content`` is :class:`Unread` (the caller gives it a reader of
    the rows' texts). The caller still checks that its rowids are the user's rows."""
    if data is None or len(data) < _FRAME.size:
        return None
    magic, header_length, payload_length, crc = _FRAME.unpack_from(data)
    start = _FRAME.size + header_length
    if magic != _MAGIC or len(data) != start + payload_length:
        return None
    view = memoryview(data)
    if zlib.crc32(view[start:], zlib.crc32(view[_FRAME.size : start])) != crc:
        log.warning("saved working set damaged (CRC): reading the rows")
        return None
    try:
        header = json.loads(bytes(view[_FRAME.size : start]))
        if (header.get("user_id") != user_id
                or {k: v for k, v in header.items()
                    if k not in ("user_id", "content_digest", "arrays")}
                != stamp.header(int(header.get("rows", -1)))):  # fmt: skip
            return None
        count = int(header["rows"])

        def array(name: str) -> npt.NDArray[Any]:
            dtype, shape, offset = header["arrays"][name]
            size = int(np.prod(shape, dtype=np.int64))
            found = np.frombuffer(data, np.dtype(dtype), size, start + int(offset))
            return found.reshape(shape)

        def strings(name: str) -> Strings:
            # entries are read in place: the blob is ``data`` itself, offsets shifted
            _, (size,), offset = header["arrays"][f"{name}.blob"]
            at = array(f"{name}.at")
            if not len(at) or at[0] != 0 or at[-1] > size + 1:
                raise ValueError(f"{name}: offsets outside the texts")
            return Strings(data, at + (start + int(offset)))

        fields: dict[str, Any] = {name: strings(name) for name in _SAVED_STRINGS}
        fields["content"] = Unread(count)
        for name in _CODES:
            values = Strings(bytes(array(f"{name}.values")), array(f"{name}.values_at"))
            fields[name] = Codes(values.all(), array(f"{name}.codes"))
        for name in _ARRAYS:
            fields[name] = array(name)
        columns = Columns(
            user_id=user_id, rowids=array("rowids"),
            content_digest=bytes.fromhex(header["content_digest"]), **fields,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("saved working set unreadable (%s): reading the rows", exc)
        return None
    sizes = {len(columns.ids), len(columns.content), len(columns.content_hash),
             len(columns.rowids), *(len(getattr(columns, n).codes) for n in _CODES),
             *(len(getattr(columns, n)) for n in _ARRAYS)}  # fmt: skip
    return columns if sizes == {count} else None


@dataclass(frozen=True, eq=False)
class Table:
    """A working set as a store read it: the ``columns``, the vectors (``matrix``, one
    row each; zeros where ``has_vector`` is false) and the access counts and last accesses
    (microseconds) of every row."""

    columns: Columns
    matrix: npt.NDArray[np.float32]
    has_vector: npt.NDArray[np.bool_]
    access: Int64Array
    last: Int64Array
