"""The bytes of a BM25 posting block: the packed records of migration 014 and the
14-byte records before them.

A block holds up to ``bm25.BLOCK`` postings of one term of one user, sorted by the memory's
``seq``. **Packed** (:data:`PACKED`, table ``packed_blocks``, migration 014): a posting is a
7-byte record (:data:`RECORD`, big-endian): the low 32 bits of its seq, its term frequency
in one byte and its memory's length in tokens in two. The high bits of every seq of a block
are those of the block's ``first_seq`` (a block never spans a multiple of 2**32 seqs:
:func:`bounds` cuts it there), so the records need no base that only the block knows, and
a writer appends postings to a block it has not read. A posting whose tf or length does not
fit (tf ≥ 255, length ≥ 65,535) is **escaped**: its record's length field is
:data:`ESCAPED` and the record just before it, in the same block, is a :data:`WIDE` record
holding its real length (4 bytes) and tf (2) and a zero byte. A wide record's bytes 5–6 are
``(tf's low byte, 0)``, never :data:`ESCAPED`, so the escaped records are exactly those
whose length field is :data:`ESCAPED`, found in one vectorised comparison; the last record
of a block is never a wide one (a writer reads the last seq from it).

**Legacy** (:data:`LEGACY`, table ``posting_blocks``, migrations 005–013): 14-byte records
(:data:`LEGACY_RECORD`: seq, tf, length). Kept to convert an existing store's blocks
(``repack.py``) and for migrations 011–013, which run on them before 014 does.

A question over 1,000,000 memories reads ~420,000 postings: 5.9 MB in the legacy format,
2.9 MB packed (docs/postgres.md, "Session 27: fewer bytes a posting").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[Any]

#: A packed posting: the low 32 bits of its seq, its tf, its memory's length (big-endian).
RECORD = np.dtype([("low", ">u4"), ("tf", "u1"), ("length", ">u2")])
#: The record before an escaped posting: its length and tf, and a zero byte.
WIDE = np.dtype([("length", ">u4"), ("tf", ">u2"), ("zero", "u1")])
#: A packed record's length field alone, read in the machine's byte order: comparing it with
#: :data:`ESCAPED` (the same bytes either way) needs no byte swap, ~0.3 of the check's ~0.7 ms
#: over a million memories' ~420,000 postings a question.
LENGTH_FIELD = np.dtype({"names": ["length"], "formats": ["u2"], "offsets": [5], "itemsize": 7})
#: A packed record's length field when its tf and length are in the :data:`WIDE` record
#: before it (a length of 65,535 or more is stored so too).
ESCAPED = 0xFFFF
#: The least tf a packed record does not hold in its one byte.
WIDE_TF = 0xFF
#: A posting before migration 014: seq, tf, length (what ``int8send`` / ``int2send`` /
#: ``int4send`` produce).
LEGACY_RECORD = np.dtype([("seq", ">i8"), ("tf", ">i2"), ("length", ">i4")])
#: Term frequencies are stored as at most this (int2 in the legacy format; the packed
#: format keeps the same bound, so both score alike).
MAX_TF = 32_767
#: A packed block's seqs share their bits above these (:func:`bounds`).
EPOCH_BITS = 32


@dataclass(frozen=True)
class Postings:
    """Postings as columns: each one's seq, term frequency and memory length (the arrays
    are the caller's to change)."""

    seqs: npt.NDArray[np.int64]
    tfs: Ints
    lengths: Ints

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, index: Any) -> Postings:
        """The postings at ``index`` (a slice, a mask or indexes)."""
        return Postings(self.seqs[index], self.tfs[index], self.lengths[index])


def pack(seqs: Ints, tfs: Ints, lengths: Ints) -> tuple[bytes, npt.NDArray[np.int64]]:
    """Postings (sorted by seq, all within one epoch: :func:`bounds`) as packed records, and
    the byte offset where each posting's records end (a block of postings ``i`` to ``j`` is
    the bytes from ``ends[i - 1]`` to ``ends[j - 1]``)."""
    tfs = np.minimum(np.asarray(tfs, dtype=np.int64), MAX_TF)
    lengths = np.asarray(lengths, dtype=np.int64)
    wide = (tfs >= WIDE_TF) | (lengths >= ESCAPED)
    at = np.arange(len(tfs)) + np.cumsum(wide)  # each posting's record, after its wide one
    out = np.zeros(len(tfs) + int(np.count_nonzero(wide)), dtype=RECORD)
    out["low"][at] = np.asarray(seqs, dtype=np.int64) & 0xFFFF_FFFF
    out["tf"][at] = np.where(wide, WIDE_TF, tfs)
    out["length"][at] = np.where(wide, ESCAPED, lengths)
    if wide.any():
        before = out.view(WIDE)
        before["length"][at[wide] - 1] = lengths[wide]
        before["tf"][at[wide] - 1] = tfs[wide]
    return out.tobytes(), (at + 1) * RECORD.itemsize


def unpack(first_seqs: Sequence[int], datas: Sequence[bytes]) -> Postings:
    """The postings of packed blocks (each block's ``first_seq`` and data), block after
    block: numpy over all of them at once, no loop per posting."""
    blob = b"".join(datas)
    records = np.frombuffer(blob, dtype=RECORD)
    seqs = records["low"].astype(np.int64)
    if first_seqs and max(first_seqs) >> EPOCH_BITS:  # seqs past 2**32: each block's high bits
        counts = [len(d) // RECORD.itemsize for d in datas]
        high = np.asarray(first_seqs, dtype=np.int64) >> EPOCH_BITS << EPOCH_BITS
        seqs += np.repeat(high, counts)
    tfs: Ints = records["tf"]
    lengths: Ints = records["length"]
    escaped = np.flatnonzero(np.frombuffer(blob, dtype=LENGTH_FIELD)["length"] == ESCAPED)
    if len(escaped):
        wide = np.frombuffer(blob, dtype=WIDE)[escaped - 1]
        tfs, lengths = tfs.astype(np.int64), lengths.astype(np.int64)
        tfs[escaped], lengths[escaped] = wide["tf"], wide["length"]
        kept = np.ones(len(records), dtype=np.bool_)
        kept[escaped - 1] = False
        seqs, tfs, lengths = seqs[kept], tfs[kept], lengths[kept]
    return Postings(seqs, tfs, lengths)


def legacy_pack(seqs: Ints, tfs: Ints, lengths: Ints) -> tuple[bytes, npt.NDArray[np.int64]]:
    """:func:`pack` in the legacy format (14 bytes a posting)."""
    out = np.empty(len(seqs), dtype=LEGACY_RECORD)
    out["seq"] = seqs
    out["tf"] = np.minimum(np.asarray(tfs, dtype=np.int64), MAX_TF)
    out["length"] = lengths
    return out.tobytes(), (np.arange(len(out), dtype=np.int64) + 1) * LEGACY_RECORD.itemsize


def legacy_unpack(first_seqs: Sequence[int], datas: Sequence[bytes]) -> Postings:
    """:func:`unpack` of legacy blocks (their ``first_seq`` is not needed)."""
    records = np.frombuffer(b"".join(datas), dtype=LEGACY_RECORD)
    return Postings(records["seq"].astype(np.int64), records["tf"], records["length"])


@dataclass(frozen=True)
class BlockFormat:
    """How blocks are stored: their table, their records, and whether a block must keep
    within one epoch of seqs (:func:`bounds`)."""

    table: str
    pack: Callable[[Ints, Ints, Ints], tuple[bytes, npt.NDArray[np.int64]]]
    unpack: Callable[[Sequence[int], Sequence[bytes]], Postings]
    epochs: bool
    #: bytes of one posting without escapes
    width: int


#: The blocks every process of this tree reads and writes (migration 014 on).
PACKED = BlockFormat("packed_blocks", pack, unpack, True, RECORD.itemsize)
#: The blocks of migrations 005–013 (converted by 014).
LEGACY = BlockFormat("posting_blocks", legacy_pack, legacy_unpack, False, LEGACY_RECORD.itemsize)


def bounds(seqs: npt.NDArray[np.int64], block: int, fmt: BlockFormat) -> list[tuple[int, int]]:
    """Sorted postings (their seqs) cut into blocks: at most ``block`` postings each, and,
    for a format that needs it, never across a multiple of 2**32 seqs."""
    cuts = set(range(block, len(seqs), block))
    if fmt.epochs and len(seqs) and int(seqs[0]) >> EPOCH_BITS != int(seqs[-1]) >> EPOCH_BITS:
        epoch = seqs >> EPOCH_BITS
        changes = (np.flatnonzero(epoch[1:] != epoch[:-1]) + 1).tolist()
        cuts = set()
        start = 0
        for stop in [*changes, len(seqs)]:
            cuts.update(range(start, stop, block))
            start = stop
        cuts.discard(0)
    edges = [0, *sorted(cuts), len(seqs)]
    return [(a, b) for a, b in itertools.pairwise(edges) if b > a]


#: The format this tree's store reads and writes (a test of an older tree sets
#: :data:`LEGACY`, with the migrations before 014).
CURRENT = PACKED


def current() -> BlockFormat:
    """:data:`CURRENT`, read when called."""
    return CURRENT
