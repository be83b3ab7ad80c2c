"""What a ``context()`` costs PostgreSQL in round trips: an access count and a state
document are one round trip each (BEGIN, the statement and COMMIT in one pipeline), with
the same meaning as before — only memories that exist are counted, a count that finds
none does not move the access clock, and a transaction whose body fails leaves nothing
written and its connection idle (``docs/postgres.md``, "Round trips and the search's
candidate list")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from engrain.store import MemoryFilter, State

from .conftest import NOW
from .pg import hnsw_settings_sent
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore
from psycopg._pipeline_base import BasePipeline  # noqa: E402


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:
    store = PostgresStore(pg_url, pool_size=1)
    yield store
    store.close()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a pipeline asks the server to process what was sent (a round trip
    each), counted from now."""
    count = [0]
    original = BasePipeline._enqueue_sync

    def counted(self: Any) -> None:
        count[0] += 1
        original(self)

    monkeypatch.setattr(BasePipeline, "_enqueue_sync", counted)
    return count


def _one(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(query, params).fetchone()
        return None if row is None else row[0]


def test_an_access_count_and_a_state_document_are_one_round_trip_each(
    pg: Any, syncs: list[int]
) -> None:
    pg.write([mem("a"), mem("b")])
    syncs[0] = 0
    pg.record_access("alice", ["a", "b", "a"], NOW)
    assert syncs[0] == 1
    syncs[0] = 0
    pg.write(state=[State("alice", "contexts", "c1", {"ids": ["a", "b"]})])
    assert syncs[0] == 1
    assert pg.get_state("alice", "contexts", "c1") == {"ids": ["a", "b"]}
    got = {m.id: m.access_count for m in pg.get("alice", ["a", "b"])}
    assert got == {"a": 2, "b": 1}


def test_an_access_count_counts_only_memories_that_exist(pg: Any) -> None:
    pg.write([mem("a"), mem("b")])
    pg.record_access("alice", ["a", "gone", "b", "b"], NOW)
    clock = _one(pg.url, "SELECT clock FROM access_clocks WHERE user_id = 'alice'")
    assert {m.id: m.access_count for m in pg.get("alice", ["a", "b"])} == {"a": 1, "b": 2}
    assert _one(pg.url, "SELECT count(*) FROM access WHERE id = 'gone'") == 0
    # none of them exists: nothing counted, the clock stays
    pg.record_access("alice", ["gone", "never"], NOW)
    pg.record_access("bob", ["a"], NOW)
    assert _one(pg.url, "SELECT clock FROM access_clocks WHERE user_id = 'alice'") == clock
    assert _one(pg.url, "SELECT count(*) FROM access_clocks WHERE user_id = 'bob'") == 0
    assert _one(pg.url, "SELECT count(*) FROM access") == 2
    # a deleted memory is not brought back by counting it
    pg.write(deletes=[mem("a")])
    pg.record_access("alice", ["a"], NOW)
    assert pg.get("alice", ["a"]) == []
    assert _one(pg.url, "SELECT count(*) FROM access WHERE id = 'a'") == 0


def test_a_failing_body_writes_nothing_and_leaves_the_connection_idle(pg: Any) -> None:
    pg.write([mem("a")])

    def body(conn: Any) -> None:
        conn.execute(
            "INSERT INTO state (user_id, namespace, key, value, updated_at) "
            "VALUES ('alice', 'ns', 'k', '{}', now())"
        )
        raise RuntimeError("the body fails after queueing a statement")

    with pytest.raises(RuntimeError):
        pg._transaction(body)
    assert pg.get_state("alice", "ns", "k") is None
    # the pool's one connection is idle again: the next write and read work
    with pg._pool.connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    pg.write(state=[State("alice", "ns", "k", {"v": 1})])
    assert pg.get_state("alice", "ns", "k") == {"v": 1}


def test_the_candidate_list_follows_the_graphs_size(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, syncs: list[int]
) -> None:
    """With no ``ef_search`` of its own a store sizes the walk's candidate list by the
    graph (``EF_BY_GRAPH_ROWS``) and the rows asked for (``EF_PER_ROW``): a table that
    gives this graph a list of 10 misses some of the exact 10 nearest, one that gives it
    1,000 finds them; the SET LOCAL travels in the search's one round trip and the pooled
    connection keeps its own setting."""
    import numpy as np

    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((600, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((20, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    store.write([mem(f"m{i:03d}", vector=None).evolve(embedding=v) for i, v in enumerate(vectors)])
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("ANALYZE memories")
    assert "memories_embedding_hnsw" in store.explain_search("alice", vectors[0], 10)

    def recall() -> float:
        hits = 0
        for query in queries:
            found = {m.id for m, _ in store.search("alice", query, 10)}
            hits += len(found & {f"m{i:03d}" for i in np.argsort(-(vectors @ query))[:10]})
        return hits / (10 * len(queries))

    monkeypatch.setattr(postgres.plans, "EF_PER_ROW", 1)
    monkeypatch.setattr(postgres.plans, "EF_BY_GRAPH_ROWS", ((100, 1000), (10_000, 10)))
    assert postgres.ef_for_graph(600) == 10 and postgres.ef_for_graph(50) == 1000
    assert recall() < 0.95
    monkeypatch.setattr(postgres.plans, "EF_BY_GRAPH_ROWS", ((10_000, 1000),))
    assert recall() >= 0.98
    # a list of 10 per row asked for: 100 candidates for k = 10, whatever the table says
    monkeypatch.setattr(postgres.plans, "EF_BY_GRAPH_ROWS", ((10_000, 10),))
    monkeypatch.setattr(postgres.plans, "EF_PER_ROW", 100)
    assert recall() >= 0.98
    syncs[0] = 0
    store.search("alice", queries[0], 10)
    assert syncs[0] == 1
    assert postgres.ef_for_graph(10**9) == postgres.EF_SEARCH
    assert store._read("SHOW hnsw.ef_search") == [(str(postgres.EF_SEARCH),)]
    store.close()


def test_the_learnings_own_graph_is_walked_with_three_candidates_per_row() -> None:
    """The gate's learnings' search (k = 100 on their own graph, built with a wide list)
    walks with 300 candidates below 200,000 rows, where the pool's graph keeps 4 per row;
    a filter with any kind outside the learnings' walks the pool's graph; larger graphs
    keep the wide list for both (docs/postgres.md, "Session 15")."""
    from engrain.model import Kind
    from engrain.recall.gate import LEARNING_KINDS

    learnings = MemoryFilter(kinds=LEARNING_KINDS)
    assert postgres.learnings_graph(learnings)
    assert postgres.learnings_graph(MemoryFilter(kinds=(Kind.DECISION,)))
    assert not postgres.learnings_graph(MemoryFilter(kinds=(Kind.DECISION, Kind.EVENT)))
    assert not postgres.learnings_graph(MemoryFilter())
    assert not postgres.learnings_graph(MemoryFilter(kinds=()))
    assert postgres.ef_for_search(100_000, 100, learnings) == 300
    assert postgres.ef_for_search(100_000, 150, learnings) == 450
    assert postgres.ef_for_search(100_000, 100, MemoryFilter()) == 400
    assert postgres.ef_for_search(100_000, 50, MemoryFilter()) == 200
    assert postgres.ef_for_search(100_000, 20, learnings) == 200
    assert postgres.ef_for_search(1_000_000, 100, learnings) == 400
    assert postgres.ef_for_search(1_000_000, 200, learnings) == 600
    assert postgres.ef_for_search(1_000_000, 150, MemoryFilter()) == 600


def test_a_search_sets_the_candidate_list_of_the_graph_it_walks(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list a search sends (``SET LOCAL hnsw.ef_search``) is the one of the graph its
    filter walks: 300 for the learnings' 100, none (the connection's 400) for 100 of the
    pool's; a store's own ``ef_search`` wins, raised to ``k``."""
    from engrain.model import Kind
    from engrain.recall.gate import LEARNING_KINDS

    sent = hnsw_settings_sent(monkeypatch)
    vector = [1.0] + [0.0] * 383
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0, indexed_share=0.0)
    kinds = [Kind.DECISION, Kind.EVENT] * 3
    store.write([mem(f"m{i}", kind=kind, vector=vector) for i, kind in enumerate(kinds)])
    store.search("alice", vector, 100, MemoryFilter(kinds=LEARNING_KINDS))
    assert sent == ["SET LOCAL hnsw.ef_search = 300"]
    sent.clear()
    store.search("alice", vector, 100)
    assert sent == []
    store.close()
    sent.clear()
    fixed = PostgresStore(
        pg_url, pool_size=1, exact_search_below=0, indexed_share=0.0, ef_search=40
    )
    fixed.search("alice", vector, 100, MemoryFilter(kinds=LEARNING_KINDS))
    fixed.search("alice", vector, 20, MemoryFilter(kinds=LEARNING_KINDS))
    assert sent == ["SET LOCAL hnsw.ef_search = 100", "SET LOCAL hnsw.ef_search = 40"]
    fixed.close()


def test_bounded_reads_probe_the_access_counts_row_by_row(pg: Any) -> None:
    """A search, BM25's check of its best matches and a fetch by ids read the access
    counts of their rows by primary key, never by hashing the user's whole ``access``
    table (which grows with every memory ever counted); the counts read are the same."""
    import numpy as np

    from engrain.store.postgres import sql

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((400, 4)).astype(np.float32)
    pg.write([mem(f"m{i:03d}", vector=tuple(v)) for i, v in enumerate(vectors)])
    every = [f"m{i:03d}" for i in range(400)]
    pg.record_access("alice", every + every[:7], NOW)
    with psycopg.connect(pg.url, autocommit=True) as db:
        db.execute("ANALYZE")
    flt = MemoryFilter()
    reads = [
        sql.search_sql("alice", vectors[0], 20, flt, indexed=False),
        sql.best_rows_sql("alice", {seq: 1.0 / seq for seq in range(1, 60)}, flt, 20),
        (sql.FETCH, ["alice", every[:30]]),
    ]
    for text, params in reads:
        plan = "\n".join(r[0] for r in pg._read("EXPLAIN " + text, params))
        assert "Seq Scan on access" not in plan and "access_pkey on access x" in plan, plan
    found = {m.id: m.access_count for m, _ in pg.search("alice", vectors[0], 400)}
    assert found == {i: 2 if i in every[:7] else 1 for i in every}


def test_a_lexical_search_is_two_statements(pg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25's statistics and blocks in one statement, then the best matches' full rows,
    filtered and ordered, in another (no separate check of versions, no third read)."""
    from engrain.model import Kind

    pg.write([mem(f"m{i}", content=f"kafka retries topic {i} note", kind=Kind.FACT)
              for i in range(30)])  # fmt: skip
    pg.write([mem(f"x{i}", content="kafka kafka", kind=Kind.EVENT) for i in range(5)])
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def counted(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    found = pg.lexical_search("alice", "kafka retries", 10)
    assert len(sent) == 2
    ranked = [(-score, m.id) for m, score in found]
    assert len(found) == 10 and ranked == sorted(ranked)
    assert all(m.id.startswith("m") for m, _ in found)  # both terms beat "kafka" twice
    # a filter that leaves fewer than k among the best deepens the search
    only = pg.lexical_search("alice", "kafka retries", 10, MemoryFilter(kinds=(Kind.EVENT,)))
    assert sorted(m.id for m, _ in only) == [f"x{i}" for i in range(5)]


def test_only_context_records_and_promotions_commit_without_waiting_for_the_flush(
    pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record a ``context()`` writes after every call (namespace ``contexts``) and the
    promotions it makes (patches of ``promoted_at`` alone), alone or together, commit with
    ``synchronous_commit = off``; a write that changes anything else of a memory, or holds
    any other document, still waits for the WAL flush. What a lazy write wrote is read
    back at once by another connection, like any commit."""
    from engrain import feedback
    from engrain.store import Patch, base

    assert feedback.CONTEXTS in base.LAZY_NAMESPACES
    assert {"promoted_at"} == base.LAZY_PATCH_FIELDS
    pg.write([mem("a"), mem("c")])
    sent: list[str] = []
    original = psycopg.Cursor.execute

    def recorded(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return original(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    lazy = "SET LOCAL synchronous_commit = off"
    record = State("alice", feedback.CONTEXTS, "c1", {"memory_ids": ["a"]})
    later = NOW + timedelta(minutes=1)
    lazily = [
        {"state": [record]},
        {"patches": [Patch("alice", "c", {"promoted_at": later})]},
        {"state": [record], "patches": [Patch("alice", "a", {"promoted_at": NOW})]},
    ]
    for write in lazily:
        sent.clear()
        pg.write(**write)
        assert lazy in sent, write
    assert _one(pg.url, "SELECT value::text FROM state WHERE key = 'c1'") == '{"memory_ids": ["a"]}'
    assert _one(pg.url, "SELECT promoted_at FROM memories WHERE id = 'c'") == later
    muting = Patch("alice", "c", {"muted": True})
    others = [
        {"state": [record, State("alice", "cooccurrence", "pairs", {"x": 1})]},
        {"patches": [Patch("alice", "a", {"promoted_at": NOW, "pinned": True})]},
        {"patches": [Patch("alice", "a", {"promoted_at": NOW}), muting]},
        {"state": [State("alice", "cooccurrence", "pairs", {"x": 2})]},
        {"upserts": [mem("b")], "state": [record]},
        {"upserts": [mem("b")], "patches": [Patch("alice", "a", {"promoted_at": NOW})]},
        {"deletes": [mem("b")], "patches": [Patch("alice", "a", {"promoted_at": NOW})]},
    ]
    for write in others:
        sent.clear()
        pg.write(**write)
        assert sent and lazy not in sent, write
    assert pg.get_state("alice", "cooccurrence", "pairs") == {"x": 2}
    assert pg.get("alice", ["a"])[0].promoted_at == NOW
    assert pg.get("alice", ["a"])[0].pinned and pg.get("alice", ["c"])[0].muted
