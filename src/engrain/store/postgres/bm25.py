"""BM25 over PostgreSQL posting lists stored in blocks, scored in process.

A term's posting list is kept as rows of ``posting_blocks (user_id, term, first_seq,
data)``: each block packs up to :data:`BLOCK` postings, sorted by the memory's ``seq``
(``memories.seq``, the row's insertion number), as fixed-width binary records
(:data:`RECORD`: seq, term frequency, document length). A query reads, in one statement
(one snapshot), the user's document count and total length (``revisions``), each query
term's document frequency (``term_stats``) and every block of those terms: ~14 bytes a
posting in a few thousand rows instead of one row per posting (a million memories: a
question's ~400,000 postings arrive in ~30 ms instead of ~330 ms, and numpy scores them in
a few milliseconds). The scores are computed in the arithmetic of
:class:`~engrain.store.lexical.LexicalIndex` (float32, terms summed in the same sorted order),
so they are the same numbers.

Writes keep the blocks exact in the write's own transaction (:func:`changed_blocks`):
each posting added or removed goes to the block whose ``first_seq`` is the greatest at or
below its seq (the first block if none), the block is rewritten and split when it grows
past :data:`BLOCK`; the writers of one user queue on the user's revision row, so two never
rewrite a block at once.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.store.lexical import K1, B

Seqs = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]

#: Postings per block at most: 256 records of 14 bytes stay in the row (no TOAST).
BLOCK = 256
#: One posting: the memory's seq, the term's frequency in it, its length in tokens
#: (big-endian, what ``int8send`` / ``int2send`` / ``int4send`` produce).
RECORD = np.dtype([("seq", ">i8"), ("tf", ">i2"), ("length", ">i4")])
#: Term frequencies are stored as int2: a larger count is stored as this.
MAX_TF = 32_767
#: Scores accumulate in an array indexed by ``seq - lowest seq`` while the span of the
#: query's seqs is at most this (else by rank among the distinct seqs, which sorts them).
DENSE_SPAN = 1 << 21

#: The user's document count and total length, and for each query term that has
#: documents its frequency and each of its blocks; one snapshot.
STATISTICS = """SELECT st.documents, st.total_length, d.term, d.df, b.data
    FROM revisions st
    CROSS JOIN unnest(%s::text[]) AS k(term)
    JOIN term_stats d ON d.user_id = st.user_id AND d.term = k.term
    JOIN posting_blocks b ON b.user_id = st.user_id AND b.term = d.term
    WHERE st.user_id = %s AND st.documents > 0 AND d.df > 0"""

#: For each ``(user_id, term, seq)`` given, the block a posting of that seq belongs to:
#: the one with the greatest ``first_seq`` at or below it, else the term's first block.
#: Distinct blocks, each with its data.
BLOCKS_OF = """SELECT b.user_id, b.term, b.first_seq, b.data
    FROM (SELECT DISTINCT k.u, k.t, f.first_seq
          FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS k(u, t, s)
          CROSS JOIN LATERAL (
              SELECT coalesce(
                  (SELECT max(x.first_seq) FROM posting_blocks x
                   WHERE x.user_id = k.u AND x.term = k.t AND x.first_seq <= k.s),
                  (SELECT min(x.first_seq) FROM posting_blocks x
                   WHERE x.user_id = k.u AND x.term = k.t)) AS first_seq
          ) AS f) AS w
    JOIN posting_blocks b ON b.user_id = w.u AND b.term = w.t AND b.first_seq = w.first_seq"""


def append_sql() -> str:
    """Append postings to the last block of their term where they all follow its last
    posting and the block has room for them: for each ``(user_id, term, offset, size,
    lowest seq)`` of the arrays, the bytes ``substring(blob FROM offset + 1 FOR size)`` of
    the first parameter (one bytea for all). Returns the ``(user_id, term)`` appended to;
    the others go through :func:`changed_blocks`."""
    width = RECORD.itemsize
    last_seq = (
        f"('x' || encode(substring(b.data FROM length(b.data) - {width - 1} FOR 8), 'hex'))"
        "::bit(64)::bigint"
    )
    return f"""UPDATE posting_blocks b SET data = b.data || substring(x.blob FROM x.o + 1 FOR x.n)
    FROM (SELECT %s::bytea AS blob, k.*
          FROM unnest(%s::text[], %s::text[], %s::int4[], %s::int4[], %s::int8[])
              AS k(u, t, o, n, low)) AS x
    WHERE b.user_id = x.u AND b.term = x.t
      AND b.first_seq = (SELECT max(y.first_seq) FROM posting_blocks y
                         WHERE y.user_id = x.u AND y.term = x.t)
      AND length(b.data) + x.n <= {BLOCK * width}
      AND {last_seq} < x.low
    RETURNING b.user_id, b.term"""


#: Insert blocks: ``(user_id, term, first_seq, offset, size)`` of the arrays, each block's
#: data the bytes ``substring(blob FROM offset + 1 FOR size)`` of the first parameter.
INSERT_BLOCKS = """INSERT INTO posting_blocks (user_id, term, first_seq, data)
    SELECT k.u, k.t, k.f, substring(x.blob FROM k.o + 1 FOR k.n)
    FROM (SELECT %s::bytea AS blob) AS x,
        unnest(%s::text[], %s::text[], %s::int8[], %s::int4[], %s::int4[]) AS k(u, t, f, o, n)"""


def packed(parts: Sequence[bytes]) -> tuple[bytes, list[int], list[int]]:
    """``parts`` as one blob, with each part's offset and size in it."""
    sizes = [len(p) for p in parts]
    offsets = [0, *itertools.accumulate(sizes)][:-1]
    return b"".join(parts), offsets, sizes


#: Pack postings ``(user_id, term, seq, tf, doc_length)`` of the query ``source`` (SQL
#: text) into blocks, as the migration and bulk loaders do: rows of ``posting_blocks``.
PACK = """INSERT INTO posting_blocks (user_id, term, first_seq, data)
    SELECT user_id, term, min(seq),
        string_agg(int8send(seq) || int2send(least(tf, {max_tf})::int2) || int4send(doc_length),
                   ''::bytea ORDER BY seq)
    FROM (SELECT s.user_id, s.term, s.seq, s.tf, s.doc_length,
            (row_number() OVER (PARTITION BY s.user_id, s.term ORDER BY s.seq) - 1)
                / {block} AS block
          FROM ({source}) AS s) AS numbered
    GROUP BY user_id, term, block"""


def pack_sql(source: str) -> str:
    """:data:`PACK` over the postings that the query ``source`` returns."""
    return PACK.format(source=source, block=BLOCK, max_tf=MAX_TF)


def encode(seqs: npt.NDArray[np.int64], tfs: npt.NDArray[Any], lengths: npt.NDArray[Any]) -> bytes:
    """Postings (sorted by seq) as one block's data."""
    out = np.empty(len(seqs), dtype=RECORD)
    out["seq"] = seqs
    out["tf"] = np.minimum(tfs, MAX_TF)
    out["length"] = lengths
    return out.tobytes()


def decode(data: bytes) -> npt.NDArray[np.void]:
    """A block's postings (a structured array of :data:`RECORD`)."""
    return np.frombuffer(data, dtype=RECORD)


@dataclass(frozen=True)
class Scored:
    """The memories a query matches and their scores, as the scoring left them: the memory
    of seq ``to_seq(i)`` scores ``out[i]``, for every ``i`` that ``matched`` marks (where
    every term score is positive, as for every posting the writes store, ``matched`` is
    ``None``: a memory matched where ``out`` is not 0). ``lists`` holds each term's
    indexes into ``out`` (the memories of one list are distinct)."""

    out: Floats
    to_seq: Callable[[Seqs], Seqs]
    lists: list[Seqs]
    matched: npt.NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        return int(np.count_nonzero(self.out if self.matched is None else self.matched))

    def best(self, n: int) -> dict[int, float]:
        """The seqs of the ``n`` best scores with their scores (and every seq that ties
        with the ``n``-th, so which are kept never depends on the order of the ties), in
        seq order.

        Only the memories scoring at least a floor of the ``n``-th best score are ranked,
        as :meth:`LexicalIndex.top` does: the ``n``-th best score among one term's memories
        (the shortest list holding ``n``; they are distinct, so at least ``n`` memories
        score that much). A million memories' questions match ~300,000, which are then no
        longer gathered and partitioned."""
        out = self.out
        floor = 0.0
        for docs in sorted(self.lists, key=len):
            if len(docs) >= n > 0:
                floor = float(np.partition(out[docs], len(docs) - n)[len(docs) - n])
                break
        if floor > 0.0:
            rows = np.flatnonzero(out >= floor)  # every match scoring at least the floor
        elif self.matched is None:
            rows = np.flatnonzero(out)
        else:
            rows = np.flatnonzero(self.matched)
        scores = out[rows]
        if len(scores) > n:
            cut = np.partition(scores, len(scores) - n)[len(scores) - n]
            picked = np.flatnonzero(scores >= cut)
            rows, scores = rows[picked], scores[picked]
        return dict(zip(self.to_seq(rows).tolist(), scores.tolist(), strict=True))


def scores(terms: Sequence[str], rows: Sequence[Sequence[Any]]) -> Scored:
    """Every memory with a posting of ``terms`` and its BM25 score, from the rows of
    :data:`STATISTICS`, in :meth:`LexicalIndex.scores`' arithmetic; the terms are summed in
    ``terms`` order."""
    if not rows:
        return Scored(np.zeros(0, dtype=np.float32), lambda i: i, [])
    documents, total = int(rows[0][0]), int(rows[0][1])
    parts: dict[str, list[bytes]] = defaultdict(list)
    frequency: dict[str, int] = {}
    for row in rows:
        parts[row[2]].append(row[4])
        frequency[row[2]] = int(row[3])
    lists = [(t, decode(b"".join(parts[t]))) for t in terms if t in parts]
    seqs = [p["seq"].astype(np.int64) for _, p in lists]
    numbers, size, to_seq = _numbered(seqs)
    out = np.zeros(size, dtype=np.float32)
    matched = None
    average = np.float32(total) / np.float32(documents)
    for (term, postings), docs in zip(lists, numbers, strict=True):
        df = frequency[term]
        idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
        weight = weights(postings, idf, average)
        if matched is None and len(weight) and not weight.min() > 0:
            # a posting scoring 0 still matches: from here on marked, the memories
            # before it (all positive so far) being those not at 0
            matched = out != 0
        out[docs] += weight
        if matched is not None:
            matched[docs] = True
    return Scored(out, to_seq, numbers, matched)


def weights(postings: npt.NDArray[np.void], idf: float, average: np.float32) -> Floats:
    """Each posting's term score, in :meth:`LexicalIndex.scores`' float32 arithmetic,
    ``idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))``: the same
    operations in the same order (each in place, on float32), so the same bits."""
    tfs = postings["tf"].astype(np.float32)
    norm = postings["length"].astype(np.float32)
    norm *= B
    norm /= average
    norm += 1.0 - B
    norm *= K1
    norm += tfs
    out: Floats = tfs * np.float32(idf)
    out *= K1 + 1.0
    out /= norm
    return out


def _numbered(
    seqs: Sequence[Seqs],
) -> tuple[list[Seqs], int, Callable[[Seqs], Seqs]]:
    """Each list's seqs as indexes into one score array, its size, and the map from
    indexes back to seqs: the offset from the lowest seq while the span is small
    (:data:`DENSE_SPAN`), else the rank among the distinct seqs (which sorts them). The
    seqs' arrays are the caller's: on the dense path they become the indexes in place."""
    count = sum(len(s) for s in seqs)
    if not count:
        return [s.astype(np.int64) for s in seqs], 0, lambda i: i
    low = min(int(s.min()) for s in seqs if len(s))
    high = max(int(s.max()) for s in seqs if len(s))
    if high - low < max(DENSE_SPAN, 4 * count):
        for s in seqs:
            s -= low
        return list(seqs), high - low + 1, lambda i: i + low
    every = np.concatenate(seqs)
    known, inverse = np.unique(every, return_inverse=True)
    bounds = np.cumsum([0, *(len(s) for s in seqs)])
    numbers = [inverse[a:b] for a, b in itertools.pairwise(bounds)]
    return numbers, len(known), lambda i: known[i]


#: A change of one term's postings of one user: seq → (tf, doc_length) to add, or ``None``
#: to remove.
Changes = dict[tuple[str, str], dict[int, tuple[int, int] | None]]


def added_postings(changes: Changes, keys: Sequence[tuple[str, str]]) -> npt.NDArray[np.int64]:
    """The postings ``changes`` adds under ``keys`` (removals skipped), key after key and in
    seq order within a key, as rows of (seq, tf, length): what :func:`encode` packs."""
    flat = [
        (seq, *value)
        for key in keys
        for seq in sorted(changes[key])
        if (value := changes[key][seq]) is not None
    ]
    return np.asarray(flat, dtype=np.int64).reshape(-1, 3)


def changed_blocks(
    changes: Changes, blocks: Iterable[Sequence[Any]]
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int, bytes]]]:
    """The blocks to delete and the blocks to write after ``changes``, given the rows of
    :data:`BLOCKS_OF` for the changes' seqs (``(user_id, term, first_seq, data)``): each
    change goes to the block it belongs to (or starts the term's first), which is rewritten
    in blocks of at most :data:`BLOCK` postings; a block left empty is deleted."""
    by_term: dict[tuple[str, str], list[tuple[int, bytes]]] = defaultdict(list)
    for user_id, term, first_seq, data in blocks:
        by_term[(user_id, term)].append((int(first_seq), bytes(data)))
    dropped: list[tuple[str, str, int]] = []
    written: list[tuple[str, str, int, bytes]] = []
    # terms without a block yet (most terms of a small user's write): their postings
    # encoded at once, in blocks of at most BLOCK
    fresh = [key for key, change in changes.items() if key not in by_term]
    columns = added_postings(changes, fresh)
    blob, offset = encode(columns[:, 0], columns[:, 1], columns[:, 2]), 0
    for key in fresh:
        count = sum(value is not None for value in changes[key].values())
        for start in range(offset, offset + count, BLOCK):
            stop = min(start + BLOCK, offset + count)
            data = blob[start * RECORD.itemsize : stop * RECORD.itemsize]
            written.append((*key, int(columns[start, 0]), data))
        offset += count
    for key, change in changes.items():
        if key not in by_term:
            continue
        found = sorted(by_term[key])
        starts = np.asarray([first for first, _ in found], dtype=np.int64)
        seqs = np.fromiter(change, dtype=np.int64, count=len(change))
        # each change to its block: the greatest first_seq at or below it, else the first
        at = np.maximum(np.searchsorted(starts, seqs, side="right") - 1, 0)
        for block in np.unique(at).tolist():
            mine = seqs[at == block]
            first, data = found[block]
            dropped.append((*key, first))
            old = decode(data)
            added = [(s, *v) for s in mine.tolist() if (v := change[s]) is not None]
            new = np.asarray(added, dtype=[("seq", "i8"), ("tf", "i8"), ("length", "i8")])
            kept = old[~np.isin(old["seq"], mine)]
            merged_seqs = np.concatenate([kept["seq"].astype(np.int64), new["seq"]])
            order = np.argsort(merged_seqs, kind="stable")
            merged_seqs = merged_seqs[order]
            tfs = np.concatenate([kept["tf"].astype(np.int64), new["tf"]])[order]
            lengths = np.concatenate([kept["length"].astype(np.int64), new["length"]])[order]
            for start in range(0, len(merged_seqs), BLOCK):
                part = slice(start, start + BLOCK)
                written.append((*key, int(merged_seqs[start]),
                                encode(merged_seqs[part], tfs[part], lengths[part])))  # fmt: skip
    return dropped, written
