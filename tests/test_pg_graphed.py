"""The HNSW graphs hold the rows of users searched through them only (``graphed.py``,
migration 015): a small user's rows stay out, the write that takes a user past its
writer's ``exact_search_below`` puts every row of it in, and every process, whatever its
own threshold, finds every row."""

from __future__ import annotations

import logging
import multiprocessing as mp
import threading
import time
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind, MemoryType
from engrain.store import MemoryFilter

from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graphed = postgres.graphed
schema = postgres.schema
PostgresStore = postgres.PostgresStore

POOL, LEARNINGS = "memories_embedding_hnsw", "memories_learnings_hnsw"


def _memories(user: str, start: int, count: int, seed: int = 5) -> list[Any]:
    """``count`` memories of ``user`` with random vectors of the indexed size, every
    third a decision (a learning: the learnings' graph)."""
    rng = np.random.default_rng(seed + start)
    vectors = rng.standard_normal((count, schema.INDEXED_DIM)).astype(np.float32)
    return [
        mem(
            f"{user}-{start + i}",
            user,
            vector=vectors[i],
            memory_type=MemoryType.SEMANTIC,
            kind=Kind.DECISION if (start + i) % 3 == 0 else Kind.FACT,
        )
        for i in range(count)
    ]


def _one(store: Any, text: str, *params: Any) -> Any:
    (row,) = store._read(text, params)
    return row[0]


def _size(store: Any, index: str) -> int:
    return int(_one(store, "SELECT pg_relation_size(%s::regclass)", index))


def _exact(store: Any, user: str, query: Any, k: int) -> list[str]:
    """The ``k`` nearest ids by cosine, computed here from the stored rows."""
    rows = store._read("SELECT id, embedding FROM memories WHERE user_id = %s ORDER BY id", (user,))
    ids = [r[0] for r in rows]
    matrix = np.array([np.asarray(r[1], dtype=np.float32) for r in rows])
    sims = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    return [ids[i] for i in np.argsort(-sims, kind="stable")[:k]]


def _walks_the_graph(store: Any, user: str, query: Any, k: int) -> bool:
    """Whether this store's search of ``user`` is planned through the pool's graph and
    the planner uses the index for it."""
    with store._connection() as conn, conn.cursor(binary=True) as cur:
        if store._ef(cur, user, schema.INDEXED_DIM, k, MemoryFilter()) is None:
            return False
        text, params = postgres.sql.search_sql(user, query, k, MemoryFilter(), indexed=True)
        with conn.transaction():  # the planner told to prefer an index, this plan only
            cur.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in cur.execute("EXPLAIN " + text, params).fetchall())
    return POOL in plan


def test_a_small_users_rows_enter_the_graphs_only_when_it_is_searched_through_them(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, pool_size=2, exact_search_below=30)
    query = np.random.default_rng(1).standard_normal(schema.INDEXED_DIM).astype(np.float32)
    try:
        empty = {index: _size(store, index) for index in (POOL, LEARNINGS)}
        store.write(_memories("alice", 0, 29))
        # searched exactly: none of its 29 rows (10 learnings) went into either graph
        assert {index: _size(store, index) for index in (POOL, LEARNINGS)} == empty
        assert not _one(store, "SELECT graphed FROM revisions WHERE user_id = 'alice'")
        assert not _walks_the_graph(store, "alice", query, 10)
        assert [m.id for m, _ in store.search("alice", query, 10)] == _exact(
            store, "alice", query, 10
        )
        store.write(_memories("alice", 29, 2))  # 31 memories: past the store's 30
        assert _one(store, "SELECT graphed FROM revisions WHERE user_id = 'alice'")
        assert _one(store, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
        assert _size(store, POOL) > empty[POOL] and _size(store, LEARNINGS) > empty[LEARNINGS]
        store._plans.clear()
        assert _walks_the_graph(store, "alice", query, 10)
        found = [m.id for m, _ in store.search("alice", query, 10)]
        assert found == _exact(store, "alice", query, 10)
        learned = store.search("alice", query, 5, MemoryFilter(kinds=(Kind.DECISION,)))
        assert len(learned) == 5 and {m.kind for m, _ in learned} == {Kind.DECISION}
    finally:
        store.close()


def test_a_process_with_another_threshold_finds_every_row(pg_url: str) -> None:
    writer = PostgresStore(pg_url, pool_size=1)  # the default: 2,000 before the graphs
    reader = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    query = np.random.default_rng(2).standard_normal(schema.INDEXED_DIM).astype(np.float32)
    try:
        writer.write(_memories("bob", 0, 40))
        # the reader would walk the graph for any user; bob is not in it: searched exactly
        assert not _walks_the_graph(reader, "bob", query, 8)
        assert [m.id for m, _ in reader.search("bob", query, 8)] == _exact(reader, "bob", query, 8)
        reader.write(_memories("bob", 40, 1))  # its threshold, 0: bob enters the graphs
        assert _one(reader, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
        reader._plans.clear()
        assert _walks_the_graph(reader, "bob", query, 8)
        assert [m.id for m, _ in reader.search("bob", query, 8)] == _exact(reader, "bob", query, 8)
        # the default writer's next rows of bob are graphed: the flag never goes back
        writer.write(_memories("bob", 41, 3))
        assert _one(writer, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
    finally:
        writer.close()
        reader.close()


def test_concurrent_writers_crossing_the_threshold_leave_every_row_graphed(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, pool_size=4, exact_search_below=25)
    errors: list[BaseException] = []

    def write(thread: int) -> None:
        try:
            for i in range(10):
                store.write(_memories("carol", 100 * thread + i, 1))
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert _one(store, "SELECT count(*) FROM memories WHERE user_id = 'carol'") == 40
        assert _one(store, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
        assert _one(store, "SELECT graphed FROM revisions WHERE user_id = 'carol'")
    finally:
        store.close()


def _as_before_015(store: Any) -> None:
    """The database as a tree before migration 015 left it: no flags, both graphs over
    every row, 015 not applied."""
    with psycopg.connect(store.url, autocommit=True) as db:
        db.execute("ALTER TABLE memories DROP COLUMN graphed")  # and the partial graphs
        db.execute("ALTER TABLE revisions DROP COLUMN graphed")
        db.execute(schema._HNSW_001_SQL)
        db.execute(schema._LEARNINGS_004_SQL)
        db.execute("DELETE FROM migrations WHERE name = %s", (graphed.MIGRATION,))


def _definition(store: Any, index: str) -> str:
    return str(_one(store, "SELECT pg_get_indexdef(%s::regclass)", index))


@pytest.mark.parametrize("rebuilt", [True, False])
def test_a_populated_database_migrates_with_its_rows_graphed(
    pg_url: str, rebuilt: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    query = np.random.default_rng(3).standard_normal(schema.INDEXED_DIM).astype(np.float32)
    old = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    try:
        old.write(_memories("dana", 0, 30))
        _as_before_015(old)
    finally:
        old.close()
    if not rebuilt:
        monkeypatch.setattr(graphed, "REBUILD_MAX", 10)
    with caplog.at_level(logging.WARNING, logger=graphed.__name__):
        store = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    try:
        assert _one(store, "SELECT graphed FROM revisions WHERE user_id = 'dana'")
        assert _one(store, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
        for index in (POOL, LEARNINGS):
            assert ("graphed" in _definition(store, index)) == rebuilt
        assert ("left both HNSW graphs" in caplog.text) == (not rebuilt)
        assert _walks_the_graph(store, "dana", query, 10)
        assert [m.id for m, _ in store.search("dana", query, 10)] == _exact(
            store, "dana", query, 10
        )
        # a new small user written by a default store: searched exactly, found
        small = PostgresStore(pg_url, pool_size=1)
        try:
            small.write(_memories("eve", 0, 12))
        finally:
            small.close()
        assert not _walks_the_graph(store, "eve", query, 4)
        assert [m.id for m, _ in store.search("eve", query, 4)] == _exact(store, "eve", query, 4)
    finally:
        store.close()


SPAWN = mp.get_context("spawn")


def _flip_then_wait(url: str, flipped: Any) -> None:
    """A writer process: 15 memories of fay acknowledged, then a write taking fay past its
    threshold (20) that stops once the server has run the flip, before its commit."""
    from engrain.store.postgres import writes

    store = PostgresStore(url, pool_size=1, exact_search_below=20)
    store.write(_memories("fay", 0, 15))
    stamp = writes._stamp_changes

    def stalled(cur: Any, changed: Any) -> None:  # runs after the flip (write_body)
        stamp(cur, changed)
        cur.execute("SELECT 1")
        cur.fetchall()  # a sync: the server has run every statement queued so far
        flipped.set()
        time.sleep(600)

    writes._stamp_changes = stalled
    store.write(_memories("fay", 15, 10))


def test_a_writer_killed_inside_the_flip_leaves_the_user_as_before(pg_url: str) -> None:
    flipped = SPAWN.Event()
    proc = SPAWN.Process(target=_flip_then_wait, args=(pg_url, flipped))
    proc.start()
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=20)
    try:
        assert flipped.wait(120), "the writer never reached the flip"
        # readers meanwhile: the 15 acknowledged rows, fay not graphed (all or nothing)
        assert _one(store, "SELECT count(*) FROM memories WHERE user_id = 'fay'") == 15
        assert not _one(store, "SELECT graphed FROM revisions WHERE user_id = 'fay'")
        proc.kill()  # SIGKILL
        proc.join(60)
        assert _one(store, "SELECT count(*) FROM memories WHERE user_id = 'fay'") == 15
        assert not _one(store, "SELECT graphed FROM revisions WHERE user_id = 'fay'")
        assert _one(store, "SELECT count(*) FROM memories WHERE graphed") == 0
        store.write(_memories("fay", 15, 10))  # the same write again, whole: flipped
        assert _one(store, "SELECT count(*) FROM memories WHERE user_id = 'fay'") == 25
        assert _one(store, "SELECT count(*) FROM memories WHERE NOT graphed") == 0
        assert _one(store, "SELECT graphed FROM revisions WHERE user_id = 'fay'")
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        store.close()


def test_a_graph_built_wider_is_rebuilt_partial_as_wide(pg_url: str) -> None:
    """Migration 015 rebuilds each graph partial on ``graphed`` with the ``ef_construction``
    it was built with (``engrain migrate --pool-graph`` builds the pool's at 200): the
    rebuild keeps the recall the operator chose (``graphed.built_ef`` / ``with_ef``, which
    nothing tested)."""
    old = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    try:
        old.write(_memories("gus", 0, 12))
        _as_before_015(old)
    finally:
        old.close()
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(f"DROP INDEX {POOL}")
        db.execute(graphed.with_ef(schema._HNSW_001_SQL, 200))
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    try:
        pool, learnings = _definition(store, POOL), _definition(store, LEARNINGS)
        assert "ef_construction='200'" in pool and "graphed" in pool
        assert "ef_construction='200'" not in learnings and "graphed" in learnings
    finally:
        store.close()
