"""How a PostgreSQL vector search is planned: exactly through the ``(user_id, …)`` b-tree,
or through an HNSW graph with a candidate list (``hnsw.ef_search``) sized by the graph's
rows and the rows asked for (the package docstring, "Vectors of any size"). Constants and
pure functions: the store keeps each user's plan (``searches.py``)."""

from __future__ import annotations

from engrain.store.base import MemoryFilter
from engrain.store.postgres import graph as pool_graph
from engrain.store.postgres import schema
from engrain.store.postgres.codec import EF_SEARCH

#: Users with fewer memories are searched exactly: reading their rows through the b-tree
#: and sorting by distance (~2 µs a row here) beats a graph walk at that size.
EXACT_SEARCH_BELOW = 2_000
#: ... and so are users holding less than this share of the table: one global graph is
#: mostly other users' rows, and a filtered walk visits about k / share of them.
INDEXED_SHARE = 0.01
#: Seconds a user's search plan (HNSW or exact, :meth:`PostgresStore._indexed`) is kept.
PLAN_SECONDS = 10.0
#: Users whose search plan is kept, least recently used dropped first.
PLANS_KEPT = 10_000
#: ``hnsw.ef_search`` by the size of the graph a search walks: (most rows, ef), the first
#: that holds; larger graphs get :data:`EF_SEARCH`. Measured R@50 of the pool's search
#: against exact search (``bench/pg_scale.py``, 100 queries of the model's vectors): at
#: 100,000 rows 0.980 / 0.993 / 0.996 at ef 100 / 200 / 400; at 1,000,000 0.923 at 200,
#: 0.980 at 400. Between the two nothing is measured, hence the bound at 200,000.
EF_BY_GRAPH_ROWS: tuple[tuple[int, int], ...] = ((200_000, 200),)
#: ... and at least this many candidates per row asked for: the learnings' search (k = 100)
#: had R@100 0.908 / 0.948 / 0.969 at ef 100 / 200 / 400 at 100,000 memories on their
#: graph as first built (``ef_construction`` 64), so a list of 200 lost recall the pool's
#: k = 50 kept (0.993). The pool's graph is still built so.
EF_PER_ROW = 4
#: ... except on the learnings' own graph, built with a wide list (``ef_construction``
#: 400, ``schema.LEARNINGS_EF_CONSTRUCTION``, migration 007): there 3 per row, ef 300 for
#: the gate's 100. R@100 against exact search at ef 200 / 300 / 400, session 15: real
#: vectors (bench/latency.py's 100,000 notes) 0.984 / 0.991 / 0.994 and, other questions,
#: 0.980 / 0.989 / 0.993; derived vectors 0.998 / 0.999 / 0.999. 300 keeps ≥ 0.98 with a
#: margin for ~20% less of the server's CPU a walk than 400 (docs/postgres.md, "Session 15").
LEARNINGS_EF_PER_ROW = 3
#: The pool's graph built wide (``graph.WIDE_EF_CONSTRUCTION``, ``engrain migrate
#: --pool-graph``): (most rows, ef) as :data:`EF_BY_GRAPH_ROWS`, and 3 candidates per row.
#: R@50 against exact search, 100,000 real-vector memories, 60 questions each of seed 8
#: (the tune set) / seed 99, session 18: the wide graph at ef 100 / 150 / 200 0.9900 /
#: 0.9959 / 0.9967 and 0.9838 / 0.9930 / 0.9956; the default graph at its 200 0.9906 and
#: 0.9884. 150 is the least list measured whose recall is not below the default graph's on
#: the tune set (100 is, by 0.0006, and by 0.005 on the other), for ~0.9 ms less of the
#: server's CPU a walk (docs/postgres.md, "Session 18 … (h3)"). Larger graphs are not
#: measured: they keep the wide list.
WIDE_EF_BY_GRAPH_ROWS: tuple[tuple[int, int], ...] = ((200_000, 150),)
WIDE_EF_PER_ROW = 3


def ef_for_graph(rows: int) -> int:
    """The ``hnsw.ef_search`` for a walk of a graph of ``rows`` rows
    (:data:`EF_BY_GRAPH_ROWS`): the smallest candidate list measured to keep R@50 ≥ 0.98
    with a margin."""
    for most, ef in EF_BY_GRAPH_ROWS:
        if rows <= most:
            return ef
    return EF_SEARCH


def learnings_graph(flt: MemoryFilter) -> bool:
    """Whether a search under ``flt`` walks the learnings' own graph
    (``memories_learnings_hnsw``, partial on their kinds): its kinds are all learning
    kinds, which is what lets the planner prove the index's predicate."""
    return bool(flt.kinds) and all(k.value in schema.LEARNING_KINDS for k in flt.kinds or ())


def ef_for_search(
    rows: int, k: int, flt: MemoryFilter, pool_built: int = pool_graph.DEFAULT_EF_CONSTRUCTION
) -> int:
    """The ``hnsw.ef_search`` of an indexed search for ``k`` rows under ``flt`` in a graph
    of ``rows`` rows: :func:`ef_for_graph`, and at least :data:`EF_PER_ROW` candidates per
    row asked for (:data:`LEARNINGS_EF_PER_ROW` on the learnings' own graph); on the pool's
    graph built with ``pool_built`` ≥ ``graph.WIDE_EF_CONSTRUCTION``,
    :data:`WIDE_EF_BY_GRAPH_ROWS` and :data:`WIDE_EF_PER_ROW` instead."""
    if learnings_graph(flt):
        return max(ef_for_graph(rows), LEARNINGS_EF_PER_ROW * k)
    if pool_built >= pool_graph.WIDE_EF_CONSTRUCTION:
        wide = next((ef for most, ef in WIDE_EF_BY_GRAPH_ROWS if rows <= most), EF_SEARCH)
        return max(wide, WIDE_EF_PER_ROW * k)
    return max(ef_for_graph(rows), EF_PER_ROW * k)
