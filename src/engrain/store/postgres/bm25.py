"""BM25 over PostgreSQL posting lists stored in blocks, scored in process.

A term's posting list is kept as rows of ``packed_blocks (user_id, term, first_seq,
data)``: each block packs up to :data:`BLOCK` postings, sorted by the memory's ``seq``
(``memories.seq``, the row's insertion number), as fixed-width binary records
(``postings.RECORD``: the seq's low 32 bits, term frequency, document length; 7 bytes,
escaped where a value does not fit; before migration 014, 14-byte records in
``posting_blocks``). A query reads, in one statement (one snapshot), the user's document
count and total length (``revisions``), each query term's document frequency
(``term_stats``) and every block of those terms: ~7 bytes a posting in a few thousand
rows instead of one row per posting (a million memories: a
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
from engrain.store.postgres import postings
from engrain.store.postgres.postings import BlockFormat, Postings

Seqs = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]

#: Postings per block at most: 256 packed records (7 bytes; 14 with an escape) stay in
#: the row (no TOAST).
BLOCK = 256
#: Term frequencies are stored as at most this.
MAX_TF = postings.MAX_TF
#: Scores accumulate in an array indexed by ``seq - lowest seq`` while the span of the
#: query's seqs is at most this (else by rank among the distinct seqs, which sorts them).
DENSE_SPAN = 1 << 21


def statistics_sql(fmt: BlockFormat | None = None) -> str:
    """The user's document count and total length, and for each query term that has
    documents its frequency and each of its blocks (``first_seq``, data); one snapshot."""
    table = (fmt or postings.current()).table
    return f"""SELECT st.documents, st.total_length, d.term, d.df, b.first_seq, b.data
    FROM revisions st
    CROSS JOIN unnest(%s::text[]) AS k(term)
    JOIN term_stats d ON d.user_id = st.user_id AND d.term = k.term
    JOIN {table} b ON b.user_id = st.user_id AND b.term = d.term
    WHERE st.user_id = %s AND st.documents > 0 AND d.df > 0"""


#: :func:`statistics_sql` of the packed blocks.
STATISTICS = statistics_sql(postings.PACKED)


def blocks_of_sql(fmt: BlockFormat | None = None) -> str:
    """For each ``(user_id, term, seq)`` given, the block a posting of that seq belongs
    to: the one with the greatest ``first_seq`` at or below it, else the term's first
    block. Distinct blocks, each with its data."""
    table = (fmt or postings.current()).table
    return f"""SELECT b.user_id, b.term, b.first_seq, b.data
    FROM (SELECT DISTINCT k.u, k.t, f.first_seq
          FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS k(u, t, s)
          CROSS JOIN LATERAL (
              SELECT coalesce(
                  (SELECT max(x.first_seq) FROM {table} x
                   WHERE x.user_id = k.u AND x.term = k.t AND x.first_seq <= k.s),
                  (SELECT min(x.first_seq) FROM {table} x
                   WHERE x.user_id = k.u AND x.term = k.t)) AS first_seq
          ) AS f) AS w
    JOIN {table} b ON b.user_id = w.u AND b.term = w.t AND b.first_seq = w.first_seq"""


def append_sql(fmt: BlockFormat | None = None) -> str:
    """Append postings to the last block of their term where they all follow its last
    posting and the block has room for them: for each ``(user_id, term, offset, size,
    lowest seq)`` of the arrays, the bytes ``substring(blob FROM offset + 1 FOR size)`` of
    the first parameter (one bytea for all). Returns the ``(user_id, term)`` appended to;
    the others go through :func:`changed_blocks`. Packed, the postings must lie in the
    block's epoch (the caller appends no others: :func:`appendable`), which this checks
    too; the last record of a block is never a wide one."""
    fmt = fmt or postings.current()
    width = fmt.width
    if fmt.epochs:
        last_seq = (
            f"(((b.first_seq >> {postings.EPOCH_BITS}) << {postings.EPOCH_BITS}) + "
            f"('x' || encode(substring(b.data FROM length(b.data) - {width - 1} FOR 4), "
            "'hex'))::bit(32)::bigint)"
        )
        same_epoch = f"AND b.first_seq >> {postings.EPOCH_BITS} = x.low >> {postings.EPOCH_BITS}"
    else:
        last_seq = (
            f"('x' || encode(substring(b.data FROM length(b.data) - {width - 1} FOR 8), "
            "'hex'))::bit(64)::bigint"
        )
        same_epoch = ""
    return f"""UPDATE {fmt.table} b SET data = b.data || substring(x.blob FROM x.o + 1 FOR x.n)
    FROM (SELECT %s::bytea AS blob, k.*
          FROM unnest(%s::text[], %s::text[], %s::int4[], %s::int4[], %s::int8[])
              AS k(u, t, o, n, low)) AS x
    WHERE b.user_id = x.u AND b.term = x.t
      AND b.first_seq = (SELECT max(y.first_seq) FROM {fmt.table} y
                         WHERE y.user_id = x.u AND y.term = x.t)
      AND length(b.data) + x.n <= {BLOCK * width}
      AND {last_seq} < x.low {same_epoch}
    RETURNING b.user_id, b.term"""


def appendable(seqs: Iterable[int], fmt: BlockFormat | None = None) -> bool:
    """Whether postings of these seqs may be appended to a block in SQL (packed: all in
    one epoch)."""
    if not (fmt or postings.current()).epochs:
        return True
    return len({s >> postings.EPOCH_BITS for s in seqs}) <= 1


def insert_blocks_sql(fmt: BlockFormat | None = None) -> str:
    """Insert blocks: ``(user_id, term, first_seq, offset, size)`` of the arrays, each
    block's data the bytes ``substring(blob FROM offset + 1 FOR size)`` of the first
    parameter."""
    return f"""INSERT INTO {(fmt or postings.current()).table} (user_id, term, first_seq, data)
    SELECT k.u, k.t, k.f, substring(x.blob FROM k.o + 1 FOR k.n)
    FROM (SELECT %s::bytea AS blob) AS x,
        unnest(%s::text[], %s::text[], %s::int8[], %s::int4[], %s::int4[]) AS k(u, t, f, o, n)"""


def delete_blocks_sql(fmt: BlockFormat | None = None) -> str:
    """Delete the blocks ``(user_id, term, first_seq)`` of the arrays."""
    return (
        f"DELETE FROM {(fmt or postings.current()).table} b "
        "USING unnest(%s::text[], %s::text[], %s::bigint[]) "
        "AS k(u, t, f) WHERE b.user_id = k.u AND b.term = k.t AND b.first_seq = k.f"
    )


def packed(parts: Sequence[bytes]) -> tuple[bytes, list[int], list[int]]:
    """``parts`` as one blob, with each part's offset and size in it."""
    sizes = [len(p) for p in parts]
    offsets = [0, *itertools.accumulate(sizes)][:-1]
    return b"".join(parts), offsets, sizes


#: One posting as packed records (``postings.RECORD``, escaped where it does not fit), in SQL.
_PACKED_POSTING = f"""CASE WHEN s.tf < {postings.WIDE_TF} AND s.doc_length < {postings.ESCAPED}
        THEN substring(int8send(s.seq) FROM 5) || substring(int2send(s.tf::int2) FROM 2)
            || substring(int4send(s.doc_length) FROM 3)
        ELSE int4send(s.doc_length) || int2send(least(s.tf, {MAX_TF})::int2) || '\\x00'::bytea
            || substring(int8send(s.seq) FROM 5) || '\\xffffff'::bytea END"""

#: Pack postings ``(user_id, term, seq, tf, doc_length)`` of the query ``source`` (SQL
#: text) into packed blocks, as bulk loaders do: rows of ``packed_blocks``.
PACK = """INSERT INTO packed_blocks (user_id, term, first_seq, data)
    SELECT user_id, term, min(seq), string_agg(record, ''::bytea ORDER BY seq)
    FROM (SELECT s.user_id, s.term, s.seq, {record} AS record, s.seq >> {epoch} AS epoch,
            (row_number() OVER (PARTITION BY s.user_id, s.term, s.seq >> {epoch} ORDER BY s.seq)
                - 1) / {block} AS block
          FROM ({source}) AS s) AS numbered
    GROUP BY user_id, term, epoch, block"""


def pack_sql(source: str) -> str:
    """:data:`PACK` over the postings that the query ``source`` returns."""
    return PACK.format(
        source=source, block=BLOCK, record=_PACKED_POSTING, epoch=postings.EPOCH_BITS
    )


def encode(seqs: npt.NDArray[np.int64], tfs: npt.NDArray[Any], lengths: npt.NDArray[Any]) -> bytes:
    """Postings (sorted by seq, within one block's bounds) as one block's data."""
    return postings.current().pack(seqs, tfs, lengths)[0]


def decode(data: bytes, first_seq: int) -> Postings:
    """A block's postings."""
    return postings.current().unpack([first_seq], [data])


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


def scores(
    terms: Sequence[str], rows: Sequence[Sequence[Any]], fmt: BlockFormat | None = None
) -> Scored:
    """Every memory with a posting of ``terms`` and its BM25 score, from the rows of
    :func:`statistics_sql`, in :meth:`LexicalIndex.scores`' arithmetic; the terms are summed
    in ``terms`` order.

    Each term's scores are added with ``np.add.at`` (one pass, in place) rather than
    ``out[docs] += weight`` (a gather into a temporary, an add, a scatter back): the same
    float32 additions in the same order, so the same bits, at about half the CPU and
    without the temporary (a million memories: ~420,000 postings a question;
    docs/postgres.md, "Session 28 … (h3)")."""
    if not rows:
        return Scored(np.zeros(0, dtype=np.float32), lambda i: i, [])
    unpack = (fmt or postings.current()).unpack
    documents, total = int(rows[0][0]), int(rows[0][1])
    by_term: dict[str, list[Sequence[Any]]] = defaultdict(list)
    for row in rows:
        by_term[row[2]].append(row)
    lists: list[tuple[int, Postings]] = []
    for term in terms:
        mine = by_term.get(term)
        if mine:
            blocks = unpack([r[4] for r in mine], [r[5] for r in mine])
            lists.append((int(mine[0][3]), blocks))
    numbers, size, to_seq = _numbered([p.seqs for _, p in lists])
    out = np.zeros(size, dtype=np.float32)
    matched = None
    average = np.float32(total) / np.float32(documents)
    for (df, found), docs in zip(lists, numbers, strict=True):
        idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
        weight = weights(found, idf, average)
        if matched is None and len(weight) and not weight.min() > 0:
            # a posting scoring 0 still matches: from here on marked, the memories
            # before it (all positive so far) being those not at 0
            matched = out != 0
        np.add.at(out, docs, weight)
        if matched is not None:
            matched[docs] = True
    return Scored(out, to_seq, numbers, matched)


def weights(found: Postings, idf: float, average: np.float32) -> Floats:
    """Each posting's term score, in :meth:`LexicalIndex.scores`' float32 arithmetic,
    ``idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))``: the same
    operations in the same order (each on float32, the lengths cast to float32 by the first
    multiplication), so the same bits."""
    tfs = found.tfs.astype(np.float32)
    norm: Floats = np.multiply(found.lengths, np.float32(B), dtype=np.float32)
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
    changes: Changes, blocks: Iterable[Sequence[Any]], fmt: BlockFormat | None = None
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int, bytes]]]:
    """The blocks to delete and the blocks to write after ``changes``, given the rows of
    :func:`blocks_of_sql` for the changes' seqs (``(user_id, term, first_seq, data)``):
    each change goes to the block it belongs to (or starts the term's first), which is
    rewritten in blocks of at most :data:`BLOCK` postings (``postings.bounds``); a block
    left empty is deleted."""
    fmt = fmt or postings.current()
    by_term: dict[tuple[str, str], list[tuple[int, bytes]]] = defaultdict(list)
    for user_id, term, first_seq, data in blocks:
        by_term[(user_id, term)].append((int(first_seq), bytes(data)))
    dropped: list[tuple[str, str, int]] = []
    written: list[tuple[str, str, int, bytes]] = []
    # terms without a block yet (most terms of a small user's write): their postings
    # encoded at once, in blocks of at most BLOCK
    fresh = [key for key, change in changes.items() if key not in by_term]
    columns = added_postings(changes, fresh)
    blob, ends = fmt.pack(columns[:, 0], columns[:, 1], columns[:, 2])
    offset = 0
    for key in fresh:
        count = sum(value is not None for value in changes[key].values())
        for start, stop in postings.bounds(columns[offset : offset + count, 0], BLOCK, fmt):
            low = int(ends[offset + start - 1]) if offset + start else 0
            data = blob[low : int(ends[offset + stop - 1])]
            written.append((*key, int(columns[offset + start, 0]), data))
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
            old = fmt.unpack([first], [data])
            added = [(s, *v) for s in mine.tolist() if (v := change[s]) is not None]
            new = np.asarray(added, dtype=np.int64).reshape(-1, 3)
            kept = ~np.isin(old.seqs, mine)
            merged_seqs = np.concatenate([old.seqs[kept], new[:, 0]])
            order = np.argsort(merged_seqs, kind="stable")
            merged_seqs = merged_seqs[order]
            tfs = np.concatenate([old.tfs[kept].astype(np.int64), new[:, 1]])[order]
            lengths = np.concatenate([old.lengths[kept].astype(np.int64), new[:, 2]])[order]
            for start, stop in postings.bounds(merged_seqs, BLOCK, fmt):
                part = slice(start, stop)
                data = fmt.pack(merged_seqs[part], tfs[part], lengths[part])[0]
                written.append((*key, int(merged_seqs[start]), data))
    return dropped, written
