"""The learnings' HNSW graph on PostgreSQL is built with a candidate list as wide as the one
their search walks it with (migration ``007_learnings_graph``, ``docs/postgres.md``
"Session 12"): a database that has the graph already gains the setting, and the graph is
rebuilt in the migration only while pgvector can build it in memory."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from engrain.errors import MigrationError
from engrain.model import Kind, MemoryType
from engrain.store import MemoryFilter

from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graphed = postgres.graphed
schema = postgres.schema
PostgresStore = postgres.PostgresStore

#: An older tree's migrations, with 009's ``content_tokens`` column, which today's writes
#: fill (applied out of order: each migration stands on its own).
_BEFORE = [
    *schema.MIGRATIONS[: [n for n, _ in schema.MIGRATIONS].index("007_learnings_graph")],
    ("009_content_tokens", schema._m009_content_tokens),
    (graphed.MIGRATION, dict(schema.MIGRATIONS)[graphed.MIGRATION]),  # the ``graphed`` flags
]
_OPTIONS = "SELECT reloptions FROM pg_class WHERE oid = 'memories_learnings_hnsw'::regclass"
_FILE = "SELECT pg_relation_filenode('memories_learnings_hnsw'::regclass)"


def _learnings(count: int, seed: int = 3) -> list[Any]:
    """``count`` decisions with random vectors of the indexed size (and as many facts)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((2 * count, schema.INDEXED_DIM)).astype(np.float32)
    decisions = [
        mem(f"d{i}", kind=Kind.DECISION, memory_type=MemoryType.SEMANTIC, vector=vectors[i])
        for i in range(count)
    ]
    facts = [mem(f"f{i}", vector=vectors[count + i]) for i in range(count)]
    return decisions + facts


def _one(store: Any, text: str) -> Any:
    (row,) = store._read(text)
    return row[0]


def test_a_new_database_builds_the_learnings_graph_with_the_wide_list(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    try:
        options = _one(store, _OPTIONS) or []
        assert f"ef_construction={schema.LEARNINGS_EF_CONSTRUCTION}" in options
        assert schema.LEARNINGS_EF_CONSTRUCTION == 4 * 100  # 4 per row × the gate's 100
    finally:
        store.close()


def test_a_populated_database_migrates_its_graph_and_older_trees_refuse_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    typed = MemoryFilter(kinds=(Kind.DECISION,))
    query = np.random.default_rng(9).standard_normal(schema.INDEXED_DIM).astype(np.float32)
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        patch.setattr(postgres.writes, "_stamp_changes", lambda cur, changed: None)  # 008
        old = PostgresStore(pg_url, pool_size=1, exact_search_below=10**9)
        try:
            old.write(_learnings(40))
            assert not _one(old, _OPTIONS)
            graph = _one(old, _FILE)
            before = [(m.id, round(s, 6)) for m, s in old.search("alice", query, 10, typed)]
        finally:
            old.close()
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=10**9)
    try:
        options = _one(store, _OPTIONS) or []
        assert f"ef_construction={schema.LEARNINGS_EF_CONSTRUCTION}" in options
        assert _one(store, _FILE) != graph  # rebuilt: the graph fits maintenance_work_mem
        after = [(m.id, round(s, 6)) for m, s in store.search("alice", query, 10, typed)]
        assert after == before
        assert store.count("alice") == 80
        rows = _one(
            store,
            "SELECT count(*) FROM memories WHERE kind = 'decision' AND "
            "vector_dims(embedding) = 384",
        )
        assert rows == 40
    finally:
        store.close()
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(pg_url, pool_size=1)


def test_a_graph_too_large_to_build_in_memory_is_left_for_a_concurrent_reindex(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        patch.setattr(postgres.writes, "_stamp_changes", lambda cur, changed: None)  # 008
        old = PostgresStore(pg_url, pool_size=1)
        try:
            old.write(_learnings(5))
            graph = _one(old, _FILE)
        finally:
            old.close()
    monkeypatch.setattr(schema, "learnings_graph_fits", lambda db: False)
    with caplog.at_level(logging.WARNING, logger=schema.__name__):
        store = PostgresStore(pg_url, pool_size=1)
    try:
        options = _one(store, _OPTIONS) or []
        assert f"ef_construction={schema.LEARNINGS_EF_CONSTRUCTION}" in options
        assert _one(store, _FILE) == graph  # not rebuilt
        assert "REINDEX INDEX CONCURRENTLY memories_learnings_hnsw" in caplog.text
    finally:
        store.close()


def test_whether_the_graph_fits_compares_its_size_with_maintenance_work_mem(
    pg_url: str,
) -> None:
    # searched through the graphs from the first row: the rows enter them (graphed.py)
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    try:
        store.write(_learnings(800))
        with psycopg.connect(pg_url, autocommit=True) as db:
            size = db.execute(
                "SELECT pg_relation_size('memories_learnings_hnsw'::regclass)"
            ).fetchone()[0]
            assert size > 1024 * 1024  # larger than the smallest maintenance_work_mem
            db.execute("SET maintenance_work_mem = '1MB'")
            assert not schema.learnings_graph_fits(db)
            db.execute(f"SET maintenance_work_mem = '{size // 1024 + 1}kB'")
            assert schema.learnings_graph_fits(db)
    finally:
        store.close()
