"""A saved approximate index's stamp: the store revision at which it holds every row
(issue 18, session 15; docs/scale.md "Session 15 … (h3)").

Without a stamp, a process that opens a large user checks its saved usearch index row by
row against every vector the rows hold (``IndexSlot.prepare``), so it must read every
vector first: at 1,000,000 memories 1.5 GB through SQLite, most of a 14 s cold start. A
stamp says *"the saved copy with this CRC-32 and length holds the vector of every row with
a vector of this user at this revision (and migrations)"*. A process whose read
transaction sees the same revision and migrations, and whose columns image matches them
too, takes the rows' vectors as held without reading any: the working set is loaded
without its float32 matrix (a candidate's vector is read by rowid, as an indexed user's
always is) and the first call searches through the index.

**Written only when true.** A process writes the stamp (a row of ``derived_indexes``,
kind ``<index kind>-stamp``) at close, in a write transaction that finds the user's
revision still the one its working set holds, and only if its working set's record says
the index holds every row with a vector and the index is unchanged since it was saved or
loaded (``VectorIndex.saved``). Every write of a user's rows bumps the revision (counted
uses excepted: they change no vector), so a commit after the stamp (this process's or
another's, a crash before the next stamp included) makes it stale, and a stale stamp is
ignored: that open checks row by row as before. The saved copy is matched by its CRC and
length: another process's later save of the index (last writer wins) makes the stamp
name a copy that is no longer there, and it is ignored too.

**The keys.** The stamp also keeps each row's index key (:func:`~engrain.store.ann.
memory_keys` of its id, in rowid order) for the rowids it was written for (their
digest): hashing a million ids takes ~0.6 s of CPU.

**Which rows have a vector** (session 27, h6): a stamp written now (``ENGRSTP2``) also
keeps one bit a row, in the same order, saying whether the row has a vector at that
revision (125 KB at a million), so a process taking the stamp need not read any row of
``memories`` to learn it (the lengths of a million vectors: every page of the table,
~3 s of CPU). A stamp written before (``ENGRSTP1``) has none: its open reads the
lengths as before.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engrain.store.ann import Keys

_MAGIC = b"ENGRSTP2"
#: A stamp written before which rows have a vector was kept (read, never written).
_MAGIC_KEYS_ONLY = b"ENGRSTP1"
# magic, header length, keys' length, CRC-32 of the header, keys (and rows' bits)
_FRAME = struct.Struct("<8sQQI")
#: The suffix of a stamp's kind among the user's derived indexes.
SUFFIX = "-stamp"


@dataclass(frozen=True)
class IndexStamp:
    """What a saved index holds: every row with a vector at ``revision`` (with these
    ``migrations``), as the saved copy with this ``crc`` and ``length``; ``dim`` its
    vectors' size; ``keys`` each row's key for rows with rowids of ``rowids_digest``."""

    revision: int
    migrations: tuple[str, ...]
    crc: int
    length: int
    dim: int
    rowids_digest: str
    keys: Keys
    #: Whether each row has a vector (``None``: a stamp written before this was kept).
    vectors: npt.NDArray[np.bool_] | None = None

    def vouches_for(self, revision: int, migrations: tuple[str, ...]) -> bool:
        """Whether the stamp was written at this revision and migrations."""
        return self.revision == revision and self.migrations == migrations

    def names(self, saved: tuple[int, int] | None) -> bool:
        """Whether ``saved`` (a loaded index's :attr:`~engrain.store.ann.VectorIndex.
        saved`) is the copy this stamp was written for."""
        return saved == (self.crc, self.length)

    def keys_for(self, rowids: npt.NDArray[np.int64]) -> Keys | None:
        """The rows' keys if ``rowids`` are the rows the stamp was written for."""
        if len(rowids) != len(self.keys) or rowids_digest(rowids) != self.rowids_digest:
            return None
        return self.keys

    def vectors_for(self, rowids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
        """Which of the rows have a vector, if ``rowids`` are the rows the stamp was
        written for and it says (a copy: the caller may keep it)."""
        if self.vectors is None or self.keys_for(rowids) is None:
            return None
        return self.vectors.copy()


def rowids_digest(rowids: npt.NDArray[np.int64]) -> str:
    """A digest of a user's rowids in order."""
    data = np.ascontiguousarray(rowids, dtype="<i8").tobytes()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def dump(stamp: IndexStamp) -> bytes:
    """``stamp`` as bytes: a frame (magic, lengths, CRC-32), a JSON header, the keys."""
    header = json.dumps({
        "revision": stamp.revision, "migrations": list(stamp.migrations), "crc": stamp.crc,
        "length": stamp.length, "dim": stamp.dim, "rowids": stamp.rowids_digest,
    }).encode()  # fmt: skip
    keys = np.ascontiguousarray(stamp.keys, dtype="<u8").tobytes()
    if stamp.vectors is None or len(stamp.vectors) != len(stamp.keys):
        raise ValueError("a stamp keeps which of its rows have a vector")
    bits = np.packbits(stamp.vectors).tobytes()
    crc = zlib.crc32(bits, zlib.crc32(keys, zlib.crc32(header)))
    return _FRAME.pack(_MAGIC, len(header), len(keys), crc) + header + keys + bits


def load(data: bytes | None) -> IndexStamp | None:
    """The stamp :func:`dump` made, or ``None`` (none, torn or damaged: ignored)."""
    if data is None or len(data) < _FRAME.size:
        return None
    magic, header_length, keys_length, crc = _FRAME.unpack_from(data)
    start = _FRAME.size + header_length
    end = start + keys_length
    rows = keys_length // 8
    bits = (rows + 7) // 8 if magic == _MAGIC else 0
    if magic not in (_MAGIC, _MAGIC_KEYS_ONLY) or len(data) != end + bits or keys_length % 8:
        return None
    view = memoryview(data)
    if zlib.crc32(view[start:], zlib.crc32(view[_FRAME.size : start])) != crc:
        return None
    try:
        head = json.loads(bytes(view[_FRAME.size : start]))
        keys = np.frombuffer(data, dtype="<u8", count=rows, offset=start).astype(np.uint64)
        vectors = None
        if magic == _MAGIC:
            packed = np.frombuffer(data, dtype=np.uint8, offset=end)
            vectors = np.unpackbits(packed, count=rows).astype(bool)
        return IndexStamp(
            int(head["revision"]), tuple(str(m) for m in head["migrations"]), int(head["crc"]),
            int(head["length"]), int(head["dim"]), str(head["rowids"]), keys, vectors,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None
