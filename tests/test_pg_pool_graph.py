"""The pool's HNSW graph rebuilt with a wide candidate list (``store/postgres/graph.py``,
``engrain migrate --pool-graph``) and the walk a store then chooses by how the graph in use
was built (docs/postgres.md, "Session 18 … (h3)")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engrain.errors import StoreError
from engrain.model import Kind
from engrain.store import MemoryFilter

from . import test_cli
from .pg import hnsw_settings_sent
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graph = postgres.graph
PostgresStore = postgres.PostgresStore
invoke = test_cli.invoke  # the CLI's fixture (its runner is conftest's)

_INDEXES = (
    "SELECT c.relname, c.reloptions, i.indisvalid FROM pg_index i "
    "JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE i.indrelid = 'memories'::regclass AND c.relname LIKE 'memories_embedding%' "
    "ORDER BY 1"
)


def test_the_walk_follows_how_the_pool_graph_was_built() -> None:
    """Built wide (200), the pool's graph is walked with 150 candidates below 200,000 rows
    and 3 per row asked for; built any narrower, as before (200, 4 per row); the learnings'
    own graph and larger graphs are not affected."""
    from engrain.recall.gate import LEARNING_KINDS

    pool, learnings = MemoryFilter(), MemoryFilter(kinds=LEARNING_KINDS)
    facts = MemoryFilter(kinds=(Kind.DECISION, Kind.EVENT))  # walks the pool's graph
    assert graph.DEFAULT_EF_CONSTRUCTION == 64 and graph.WIDE_EF_CONSTRUCTION == 200
    assert postgres.ef_for_search(100_000, 50, pool) == 200  # the default graph
    assert postgres.ef_for_search(100_000, 50, pool, 64) == 200
    assert postgres.ef_for_search(100_000, 50, pool, 199) == 200
    assert postgres.ef_for_search(100_000, 50, pool, 200) == 150
    assert postgres.ef_for_search(100_000, 50, facts, 200) == 150
    assert postgres.ef_for_search(200_000, 50, pool, 200) == 150
    assert postgres.ef_for_search(100_000, 20, pool, 200) == 150
    assert postgres.ef_for_search(100_000, 80, pool, 400) == 240
    assert postgres.ef_for_search(200_001, 50, pool, 200) == postgres.EF_SEARCH == 400
    assert postgres.ef_for_search(1_000_000, 300, pool, 200) == 900
    assert postgres.ef_for_search(100_000, 100, learnings, 200) == 300
    assert postgres.ef_for_search(100_000, 100, learnings, 64) == 300


def _indexes(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as db:
        return db.execute(_INDEXES).fetchall()


def _store_with_vectors(url: str, count: int = 60) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((count, 384)).astype(np.float32)
    store = PostgresStore(url, pool_size=1, exact_search_below=0, indexed_share=0.0)
    store.write([mem(f"m{i:03d}", vector=v) for i, v in enumerate(vectors)])
    return store, vectors


def test_a_rebuild_swaps_in_a_wide_graph_under_the_same_name(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph is built beside the one in use and takes its name; it says how it was
    built, so a store's next plan walks it with the narrower list (sent with the search);
    searches return the same rows; a second rebuild leaves it as it is."""
    sent = hnsw_settings_sent(monkeypatch)
    store, vectors = _store_with_vectors(pg_url)
    try:
        assert _indexes(pg_url) == [("memories_embedding_hnsw", None, True)]
        before = [[m.id for m, _ in store.search("alice", v, 10)] for v in vectors[:5]]
        store.search("alice", vectors[0], 50)
        assert sent[-1] == "SET LOCAL hnsw.ef_search = 200"
    finally:
        store.close()
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0, indexed_share=0.0)
    try:
        assert store.rebuild_pool_graph() is True
        assert _indexes(pg_url) == [("memories_embedding_hnsw", ["ef_construction=200"], True)]
        with psycopg.connect(pg_url, autocommit=True) as db:
            assert graph.built_with(db) == 200
        after = [[m.id for m, _ in store.search("alice", v, 10)] for v in vectors[:5]]
        assert after == before  # 60 rows: every walk finds the exact ten
        store.search("alice", vectors[0], 50)
        assert sent[-1] == "SET LOCAL hnsw.ef_search = 150"
        assert store.rebuild_pool_graph() is False
        assert _indexes(pg_url) == [("memories_embedding_hnsw", ["ef_construction=200"], True)]
    finally:
        store.close()


def test_an_interrupted_build_is_dropped_and_a_failed_one_leaves_the_graph_in_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = _store_with_vectors(pg_url, 20)
    try:
        with psycopg.connect(pg_url, autocommit=True) as db:  # as a stopped build leaves it
            db.execute(f"CREATE INDEX {graph.BUILDING} ON memories (seq)")
        monkeypatch.setattr(graph, "wide_index_sql", lambda name: "CREATE INDEX nonsense")
        with pytest.raises(StoreError, match="rebuilding the pool's graph"):
            store.rebuild_pool_graph()
        assert _indexes(pg_url) == [("memories_embedding_hnsw", None, True)]
        monkeypatch.undo()
        assert store.rebuild_pool_graph() is True
        assert _indexes(pg_url) == [("memories_embedding_hnsw", ["ef_construction=200"], True)]
    finally:
        store.close()


def test_one_rebuild_at_a_time(pg_url: str) -> None:
    store, _ = _store_with_vectors(pg_url, 5)
    try:
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (graph._REBUILD_LOCK,))
            with pytest.raises(StoreError, match="another rebuild"):
                store.rebuild_pool_graph()
        assert _indexes(pg_url) == [("memories_embedding_hnsw", None, True)]
    finally:
        store.close()


def test_the_wide_index_is_the_pool_index_with_the_wide_list() -> None:
    sql = graph.wide_index_sql("g")
    assert sql == (
        "CREATE INDEX CONCURRENTLY g ON memories USING hnsw ((embedding::vector(384)) "
        "vector_cosine_ops) WITH (ef_construction = 200) WHERE vector_dims(embedding) = 384 "
        "AND graphed"  # the rows of graphed users only (migration 015)
    )


def test_migrate_pool_graph_rebuilds_once_and_refuses_sqlite(invoke: Any, pg_url: str) -> None:
    """``engrain migrate --pool-graph``: what an operator runs (docs/postgres.md)."""
    json_lines, ok = test_cli.json_lines, test_cli.ok
    ok(invoke("--url", pg_url, "remember", "the deploy moved to noon"))
    done = ok(invoke("--url", pg_url, "migrate", "--pool-graph", "--maintenance-work-mem", "64MB"))
    assert done.stdout.endswith("; rebuilt the pool's graph\n")
    assert _indexes(pg_url) == [("memories_embedding_hnsw", ["ef_construction=200"], True)]
    [row] = json_lines(invoke("--url", pg_url, "--json", "migrate", "--pool-graph"))
    assert row["pool_graph_rebuilt"] is False
    refused = invoke("migrate", "--pool-graph")  # the default SQLite store
    assert refused.exit_code == 2 and "for a PostgreSQL store" in refused.stderr


def test_a_missing_pool_graph_is_built_wide(pg_url: str) -> None:
    """A database whose pool graph was dropped (a bulk load stopped before building it)
    gets the wide one under its name."""
    store, _ = _store_with_vectors(pg_url, 5)
    try:
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute("DROP INDEX memories_embedding_hnsw")
        assert store.rebuild_pool_graph() is True
        assert _indexes(pg_url) == [("memories_embedding_hnsw", ["ef_construction=200"], True)]
    finally:
        store.close()
