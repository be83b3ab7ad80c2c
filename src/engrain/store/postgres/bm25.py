"""BM25 over PostgreSQL postings, scored in process from posting lists cached per term.

Exhaustive BM25 in one SQL aggregate sorts and groups every posting of the query's terms
(33,000 rows for a typical question over 100,000 notes: ~40 ms). Here the database serves
what only it knows — each term's document frequency and *stamp* (``term_stats``, written in
the transaction of every write that adds or removes a posting of the term), the user's
document count and total length (``revisions``) — and the posting lists of the query terms
whose stamp differs from the one this process cached, all from one statement (one
snapshot). The scores are computed with numpy in the arithmetic of
:class:`~engrain.store.lexical.LexicalIndex` (float32, terms in the same set order), so
they are the same numbers.

A stamp comes from a sequence and is never reused: a cached list whose term still has its
stamp is the list the database holds. The cache is bounded by postings
(:data:`CACHED_POSTINGS`, ~12 bytes each), least recently used first.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.store.lexical import K1, B

#: Postings kept across all users and terms (~12 bytes each, plus the ids' strings).
CACHED_POSTINGS = 4_000_000
#: A user with at least this many memories gets the posting lists of their most frequent
#: terms read in the background after their first lexical search in a process
#: (:data:`WARM_TERMS`): the first query with a common term would read a list of tens of
#: thousands of postings (10–60 ms at 100,000 memories); a small user's lists are short.
WARM_ABOVE = 5_000
#: ... the most frequent terms whose lists hold this many postings together, at most.
WARM_POSTINGS = CACHED_POSTINGS // 16

#: The user's document count and total length, and for each query term that has
#: documents its frequency, its stamp and — when the stamp is not the one given — its
#: posting list as three arrays; one snapshot.
STATISTICS = """SELECT st.documents, st.total_length, d.term, d.df, d.stamp,
        p.ids, p.tfs, p.lengths
    FROM revisions st
    CROSS JOIN unnest(%s::text[], %s::bigint[]) AS k(term, known)
    JOIN term_stats d ON d.user_id = st.user_id AND d.term = k.term
    CROSS JOIN LATERAL (
        SELECT array_agg(p.memory_id) AS ids, array_agg(p.tf) AS tfs,
            array_agg(p.doc_length) AS lengths
        FROM postings p
        WHERE p.user_id = st.user_id AND p.term = d.term AND d.stamp <> k.known
    ) p
    WHERE st.user_id = %s AND st.documents > 0 AND d.df > 0"""


#: The statistics of :data:`STATISTICS` for the user's most frequent terms, each with its
#: posting list: the terms by document frequency (ties by term) while their lists hold at
#: most a given number of postings together; one snapshot.
WARM_TERMS = """SELECT st.documents, st.total_length, d.term, d.df, d.stamp,
        p.ids, p.tfs, p.lengths
    FROM revisions st
    JOIN (
        SELECT t.user_id, t.term, t.df, t.stamp,
            sum(t.df) OVER (ORDER BY t.df DESC, t.term) AS running
        FROM term_stats t WHERE t.user_id = %s AND t.df > 0
    ) d ON d.user_id = st.user_id
    CROSS JOIN LATERAL (
        SELECT array_agg(p.memory_id) AS ids, array_agg(p.tf) AS tfs,
            array_agg(p.doc_length) AS lengths
        FROM postings p
        WHERE p.user_id = st.user_id AND p.term = d.term
    ) p
    WHERE st.user_id = %s AND st.documents > 0 AND d.running <= %s"""


@dataclass(frozen=True)
class _Postings:
    """One term's posting list: document numbers (see :class:`_Numbers`), term
    frequencies and document lengths, as of ``stamp``."""

    stamp: int
    docs: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.float32]
    lengths: npt.NDArray[np.float32]


class _Numbers:
    """A user's memory ids numbered densely, so scores accumulate in one array."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.number: dict[str, int] = {}

    def of(self, ids: Sequence[str]) -> npt.NDArray[np.int32]:
        number, known = self.number, self.ids
        out = np.empty(len(ids), dtype=np.int32)
        for i, memory_id in enumerate(ids):
            n = number.get(memory_id)
            if n is None:
                n = number[memory_id] = len(known)
                known.append(memory_id)
            out[i] = n
        return out


class PostingsCache:
    """Posting lists by ``(user_id, term)`` with their stamps, and each user's numbering."""

    def __init__(self, capacity: int = CACHED_POSTINGS) -> None:
        self.capacity = capacity
        self._lists: OrderedDict[tuple[str, str], _Postings] = OrderedDict()
        self._numbers: dict[str, _Numbers] = {}
        self._size = 0
        self._warmed: set[str] = set()
        self._lock = threading.Lock()

    def claim_warming(self, user_id: str) -> bool:
        """True the first time it is asked for a user (until :meth:`release_warming`):
        the caller then warms the user's lists, once per process."""
        with self._lock:
            if user_id in self._warmed:
                return False
            self._warmed.add(user_id)
            return True

    def release_warming(self, user_id: str) -> None:
        """Let the user be warmed again (a warm-up that failed)."""
        with self._lock:
            self._warmed.discard(user_id)

    def warm(self, user_id: str, rows: Sequence[Sequence[Any]]) -> int:
        """Cache the posting lists of the rows of :data:`WARM_TERMS` (each term's list
        replaces a cached one of another stamp; one term at a time under the lock, so
        searches are never held for long); how many postings were cached."""
        cached = 0
        for row in rows:
            with self._lock:
                numbers = self._numbers.setdefault(user_id, _Numbers())
                entry = self._list(user_id, row[2], row, numbers)
            cached += 0 if entry is None else len(entry.docs)
        return cached

    def cached(self, user_id: str) -> dict[str, int]:
        """The stamp of each term of the user whose list is cached."""
        with self._lock:
            return {t: e.stamp for (u, t), e in self._lists.items() if u == user_id}

    def known(self, user_id: str, terms: Sequence[str]) -> list[int]:
        """The stamp cached for each term (-1: none)."""
        with self._lock:
            return [
                hit.stamp if (hit := self._lists.get((user_id, t))) is not None else -1
                for t in terms
            ]

    def scores(
        self, user_id: str, terms: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> Scored | None:
        """Every memory with a posting of ``terms`` and its BM25 score, from the rows of
        :data:`STATISTICS` (postings cached or read there), in
        :meth:`LexicalIndex.scores`' arithmetic; the terms are summed in ``terms`` order.
        ``None`` if a list the rows left out (its stamp was known) is no longer cached."""
        if not rows:
            return Scored([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        documents, total = int(rows[0][0]), int(rows[0][1])
        by_term = {r[2]: r for r in rows}
        with self._lock:
            numbers = self._numbers.setdefault(user_id, _Numbers())
            if len(numbers.ids) > 2 * documents + 1_000:  # mostly ids of deleted memories
                self._forget(user_id)
                return None
            lists: list[tuple[int, _Postings]] = []
            for term in terms:
                row = by_term.get(term)
                if row is None:
                    continue
                entry = self._list(user_id, term, row, numbers)
                if entry is None:
                    return None
                lists.append((int(row[3]), entry))
            ids = numbers.ids  # append-only: the numbers below stay valid after the lock
            size = len(ids)
        out = np.zeros(size, dtype=np.float32)
        touched = np.zeros(size, dtype=bool)
        average = np.float32(total) / np.float32(documents)
        for df, entry in lists:
            idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
            norm = K1 * (1.0 - B + B * entry.lengths / average)
            out[entry.docs] += idf * entry.tfs * (K1 + 1.0) / (entry.tfs + norm)
            touched[entry.docs] = True
        hits = np.flatnonzero(touched)
        return Scored(ids, hits, out[hits])

    def _forget(self, user_id: str) -> None:
        """Drop the user's lists and numbering."""
        for key in [k for k in self._lists if k[0] == user_id]:
            self._size -= len(self._lists.pop(key).docs)
        self._numbers.pop(user_id, None)

    def _list(
        self, user_id: str, term: str, row: Sequence[Any], numbers: _Numbers
    ) -> _Postings | None:
        """The term's list: the one cached if its stamp matches, else the row's (cached);
        ``None`` if the row has none and the cache no longer has it."""
        key = (user_id, term)
        stamp = int(row[4])
        hit = self._lists.get(key)
        if hit is not None and hit.stamp == stamp:
            self._lists.move_to_end(key)
            return hit
        if row[5] is None:
            return None
        entry = _Postings(
            stamp,
            numbers.of(row[5]),
            np.asarray(row[6], dtype=np.float32),
            np.asarray(row[7], dtype=np.float32),
        )
        if hit is not None:
            self._size -= len(hit.docs)
        self._lists[key] = entry
        self._size += len(entry.docs)
        while self._size > self.capacity and len(self._lists) > 1:
            (user, _), old = self._lists.popitem(last=False)
            self._size -= len(old.docs)
            if not any(u == user for u, _ in self._lists):
                self._numbers.pop(user, None)
        return entry


@dataclass(frozen=True)
class Scored:
    """The memories a query matches: ``ids[numbers[i]]`` has ``scores[i]``."""

    ids: Sequence[str]
    numbers: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.scores)

    def best(self, n: int) -> list[tuple[float, str]]:
        """The ``n`` best ``(score, id)`` pairs, best first, ties by id (and every pair
        that ties with the ``n``-th, so the order never depends on which was cut)."""
        scores = self.scores
        if len(scores) > n:
            cut = np.partition(scores, len(scores) - n)[len(scores) - n]
            picked = np.flatnonzero(scores >= cut)
        else:
            picked = np.arange(len(scores))
        ids, numbers = self.ids, self.numbers
        pairs = [(float(scores[i]), ids[numbers[i]]) for i in picked.tolist()]
        return sorted(pairs, key=lambda p: (-p[0], p[1]))
