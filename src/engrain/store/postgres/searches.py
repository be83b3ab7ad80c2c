"""The PostgreSQL store's searches: vector search (from a user's working set, held
learnings or pool index where those serve it, else by SQL through the HNSW graph or
exactly, as the user's kept plan says: ``plans.py``) and BM25 (``bm25.py``): the package
docstring tells which serves whom.

A search reads in one statement and snapshot (or one transaction, where it sets the walk's
candidate list for itself), so it never sees half of a write. The plan kept per user only
chooses between forms that return the same rows: a plan a little out of date costs time
or a sliver of approximate recall, never a wrong row.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

from engrain.model import Memory, Vector
from engrain.store.base import ALL, MemoryFilter
from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25, outcome
from engrain.store.postgres import graph as pool_graph
from engrain.store.postgres.codec import EF_SEARCH, Conn, from_row
from engrain.store.postgres.learnings import Learnings
from engrain.store.postgres.listings import Listings
from engrain.store.postgres.plans import PLAN_SECONDS, PLANS_KEPT, ef_for_search, learnings_graph
from engrain.store.postgres.projected import Projected
from engrain.store.postgres.schema import INDEXED_DIM
from engrain.store.postgres.sql import best_rows_sql, search_sql
from engrain.store.postgres.working import WorkingSets
from engrain.store.reads import SharedThreads

#: Threads running the other searches of :meth:`Searches.search_many`, shared by
#: every store in the process (a ``context()`` runs two searches).
SEARCH_THREADS = 8

_search_threads = SharedThreads(SEARCH_THREADS, "engrain-search")


def _unit(vector: Vector) -> Vector:
    """``vector`` scaled to length 1 (a working set's dot products are then the cosine
    similarities the SQL search returns: stored vectors are unit vectors)."""
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    return query / norm if norm > 0 else query


class Searches(Listings):
    """Vector and BM25 searches, with each user's search plan kept for
    :data:`~engrain.store.postgres.plans.PLAN_SECONDS`."""

    #: Reads may run from several threads at once, each on its own pooled connection.
    concurrent_reads: bool
    exact_search_below: int
    indexed_share: float
    ef_search: int | None
    #: Per user: the rows of the graph its searches walk (``None``: exact), its
    #: memories, and when that was read (:meth:`_graph_rows`).
    _plans: OrderedDict[str, tuple[int | None, int, float]]
    #: How the pool's graph was built, as the last plan read it (graph.BUILT_SQL)
    _pool_built: int
    _working: WorkingSets | None
    _learnings: Learnings | None
    _projected: Projected | None
    #: The learnings' graphs of the users whose learnings are too many for ``_learnings``
    _learnings_graph: Projected | None

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, all at once: the first in the calling
        thread, each other one on its own pooled connection in a search thread, so the
        database walks the graphs (the pool's and the learnings') in parallel instead of
        one after the other. With ``concurrent_reads`` false, one after the other."""
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.search_many(_unit(vector), searches)
        if len(searches) < 2 or not self.concurrent_reads:
            return [self.search(user_id, vector, k, flt) for k, flt in searches]
        # no thread holds a connection while it waits for another: the calling thread's
        # search returns its connection before the others' results are asked for
        others = [
            _search_threads().submit(self.search, user_id, vector, k, flt)
            for k, flt in searches[1:]
        ]
        try:
            first = self.search(user_id, vector, *searches[0])
        finally:
            results = [future.result() for future in others]
        return [first, *results]

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories most cosine-similar to ``vector`` among those passing ``flt``,
        best first, with their cosine similarity (1 − pgvector's cosine distance); from the
        user's working set when it is current (``working.py``)."""
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or query.ndim != 1 or query.shape[0] == 0:
            return []
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.search(_unit(query), k, flt)
        if self._learnings is not None and query.shape[0] == INDEXED_DIM and learnings_graph(flt):
            found = self._learnings.search(user_id, _unit(query), k, flt)
            if found is None and self._learnings_graph is not None:
                found = self._learnings_graph.search(user_id, query, k, flt)
            if found is not None:
                return found
        if (
            self._projected is not None
            and query.shape[0] == INDEXED_DIM
            and not learnings_graph(flt)
        ):
            found = self._projected.search(user_id, query, k, flt)
            if found is not None:
                return found
        return self._sql_search(user_id, query, k, flt)

    def _sql_search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """:meth:`search` by SQL: through the HNSW graph or exactly (module docstring)."""
        query = np.asarray(vector, dtype=np.float32)
        if k <= 0 or query.ndim != 1 or query.shape[0] == 0:
            return []
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            ef = self._ef(cur, user_id, query.shape[0], k, flt)
            rows: list[Any] = []
            if ef is not None and self._learnings is not None and learnings_graph(flt):
                self._learnings.start_load(user_id)  # the next calls search them in process
                if self._learnings_graph is not None and self._learnings.refused(user_id):
                    # too many to rank in process: the next calls walk a graph of them here
                    self._learnings_graph.start_load(user_id)
            elif ef is not None and self._projected is not None:
                # the next calls rank a projection (or walk a held graph, if it is large)
                self._projected.start_load(user_id, rows=self._user_rows(user_id))
            if ef is not None:
                text, params = search_sql(user_id, query, k, flt, indexed=True)
                if ef == EF_SEARCH:  # the connection's own setting (configure)
                    cur.execute(text, params)
                else:
                    # for this search only (SET LOCAL), in the search's round trip
                    def walk(c: Conn) -> psycopg.Cursor[Any]:
                        c.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                        return c.cursor(binary=True).execute(text, params)

                    cur = outcome.in_one_transaction(conn, walk)
                rows = cur.fetchall()
            if ef is None or len(rows) < k:
                cur.execute(*search_sql(user_id, query, k, flt, indexed=False))
                rows = cur.fetchall()
        rows.sort(key=lambda r: r[-1])  # relaxed_order: the index may return near-sorted rows
        return [(from_row(r), 1.0 - float(r[-1])) for r in rows]

    def _ef(
        self, cur: psycopg.Cursor[Any], user_id: str, dim: int, k: int, flt: MemoryFilter
    ) -> int | None:
        """The ``hnsw.ef_search`` of this user's indexed search for ``k`` rows under
        ``flt`` (``None``: searched exactly): this store's ``ef_search`` if set (at least
        ``k``), else :func:`ef_for_search` of the graph's size."""
        rows = self._graph_rows(cur, user_id, dim)
        if rows is None:
            return None
        if self.ef_search is not None:
            return max(self.ef_search, k)
        return ef_for_search(rows, k, flt, self._pool_built)

    def _indexed(self, cur: psycopg.Cursor[Any], user_id: str, dim: int) -> bool:
        """Whether a search of this user goes through the HNSW index (module docstring)."""
        return self._graph_rows(cur, user_id, dim) is not None

    def _user_rows(self, user_id: str) -> int | None:
        """The user's memories as their last plan read them (``None``: no plan kept)."""
        with self._lock:
            kept = self._plans.get(user_id)
        return None if kept is None else kept[1]

    def _graph_rows(self, cur: psycopg.Cursor[Any], user_id: str, dim: int) -> int | None:
        """The rows of the HNSW graph a search of this user walks, or ``None`` if the
        search is exact (module docstring). The answer is kept for :data:`PLAN_SECONDS`:
        it only chooses between two forms that both return the right rows (exact search;
        the index scan, which falls back to exact search when it finds fewer than ``k``)
        and a candidate list by recall, so an answer a little out of date costs time or a
        sliver of approximate recall at most, never a wrong result."""
        if dim != INDEXED_DIM:
            return None
        now = time.monotonic()
        with self._lock:
            kept = self._plans.get(user_id)
        if kept is not None and now - kept[2] < PLAN_SECONDS:
            return kept[0]
        # the table's size as the planner knows it (ANALYZE, autovacuum): no count needed;
        # and how the pool's graph was built (graph.py), for every user's next walks
        cur.execute(
            "SELECT r.documents, greatest(c.reltuples, 0), (" + pool_graph.BUILT_SQL + "), "
            "r.graphed "
            "FROM revisions r, pg_class c "
            "WHERE r.user_id = %s AND c.oid = 'memories'::regclass",
            (user_id,),
        )
        found = cur.fetchone()
        if found is not None:
            self._pool_built = int(found[2])
        if found is not None and self._working is not None:
            self._working.saw_size(user_id, int(found[0]))
        # a user whose rows are not in the graphs (graphed.py) is searched exactly, whatever
        # this process's threshold says
        indexed = (
            found is not None
            and bool(found[3])
            and found[0] >= max(self.exact_search_below, self.indexed_share * found[1])
        )
        graph = int(max(found[0], found[1])) if found is not None and indexed else None
        with self._lock:
            self._plans[user_id] = (graph, int(found[0]) if found is not None else 0, now)
            self._plans.move_to_end(user_id)
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return graph

    def explain_search(
        self,
        user_id: str,
        vector: Vector,
        k: int,
        flt: MemoryFilter = ALL,
        *,
        indexed: bool | None = None,
        analyze: bool = False,
    ) -> str:
        """The query plan of the vector search :meth:`search` runs for this user (or, with
        ``indexed``, of the HNSW form or the exact form), to check what serves it."""
        query = np.asarray(vector, dtype=np.float32)
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            if indexed is None:
                indexed = self._indexed(cur, user_id, query.shape[0])
            text, params = search_sql(user_id, query, k, flt, indexed=indexed)
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
            cur.execute(prefix + text, params)
            return "\n".join(r[0] for r in cur.fetchall())

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories passing ``flt`` with the highest BM25 score for ``text`` over
        the user's own term statistics; the scores equal :class:`LexicalIndex`'s."""
        # LexicalIndex.scores sums the terms in sorted order; so does bm25.scores.
        terms = sorted(set(tokenize(text)))
        if k <= 0 or not terms:
            return []
        held = None if self._working is None else self._working.current(user_id)
        if held is not None:
            return held.lexical_search(text, k, flt)
        statistics = self._read(bm25.statistics_sql(), (terms, user_id))
        if statistics and self._working is not None:
            self._working.saw_size(user_id, int(statistics[0][0]))
        scored = bm25.scores(terms, statistics)
        depth = 2 * k
        while True:
            best = scored.best(depth)
            rows = self._read(*best_rows_sql(user_id, best, flt, k))
            if len(rows) >= k or len(best) >= len(scored):
                break
            depth *= 4
        return [(from_row(r[:-1]), best[r[-1]]) for r in rows]
