"""The typed learnings of a PostgreSQL user too many to rank in process (``learnings.py``
refuses them on the count: a million memories hold ~220,000) proposed by an HNSW graph of
their own held in process (``held_graph.LEARNINGS``, served by ``projected.py``): the
database scores the candidates and every row changed since, filter applied, so the rows and
scores are the SQL path's own; it never returns a learning forgotten before the call, finds
one another store committed, is kept in a file of its own beside the pool's, and is never
built for a user whose learnings are held. A change made through a *second* store is a
change another process makes (its caches are its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.model import Kind
from engrain.store.base import ALL

from .conftest import NOW, make_settings
from .test_pg_learnings import TYPED, _corpus, _vector
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
held_graph = postgres.held_graph
projected = postgres.projected
PostgresStore = postgres.PostgresStore

DIM = postgres.INDEXED_DIM


@pytest.fixture(autouse=True)
def _small_users_get_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' users are small: hold their graphs all the same."""
    monkeypatch.setattr(held_graph, "MIN_ROWS", 1)


def _store(url: str, graph_dir: Path | None, **options: Any) -> Any:
    """A store that walks the graphs for any user (every user is "large" here), holding
    graphs, whose learnings bound holds no user's (1 byte) unless given."""
    options.setdefault("learnings_bytes", 1)
    return PostgresStore(
        url, pool_size=3, exact_search_below=1, indexed_share=0.0, pool_index="graph",
        projected_bytes=projected.GRAPH_BYTES, graph_dir=graph_dir, **options,
    )  # fmt: skip


@pytest.fixture
def stores(pg_url: str, tmp_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    """This process's store, another "process's" store (nothing held), and the SQL path's
    exact search as the truth."""
    mine = _store(pg_url, tmp_path)
    other = PostgresStore(pg_url, pool_size=2, learnings_bytes=0, projected_bytes=0)
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    yield mine, other, truth
    for store in (mine, other, truth):
        store.close()


def _graphed(store: Any, user: str = "alice") -> Any:
    """The user's learnings refused in process, then their graph loaded: the first search
    counts them (too many), the next starts the graph's load."""
    store.search(user, np.ones(DIM, dtype=np.float32), 1, TYPED)
    assert not store.wait_for_learnings(user, timeout=60)
    assert store._learnings.refused(user)
    store.search(user, np.ones(DIM, dtype=np.float32), 1, TYPED)
    assert store.wait_for_learnings_graph(user, timeout=60)
    return store._learnings_graph


def _same(found: list[tuple[Any, float]], expected: list[tuple[Any, float]]) -> None:
    assert [m.id for m, _ in found] == [m.id for m, _ in expected]
    assert [m for m, _ in found] == [m for m, _ in expected]  # every field, counts included
    assert [s for _, s in found] == [s for _, s in expected]  # pgvector's own distances


def test_refused_learnings_are_searched_through_a_graph_of_their_own(stores: Any) -> None:
    mine, _, truth = stores
    corpus = _corpus(300)
    mine.write(corpus)
    graph = _graphed(mine)
    learnings = {m.id for m in corpus if m.kind.value in postgres.schema.LEARNING_KINDS}
    held = graph.held("alice")
    assert len(held.index) == len(learnings) == 150  # the learnings only, not the pool
    served = graph.calls["served"]
    rng = np.random.default_rng(5)
    # k = 100: the graph proposes 1.5 × 100 + 16 rows, every learning of these (random,
    # so a graph's hard case) vectors: what is compared is the database's scoring
    kinds = (Kind.DECISION, Kind.PREFERENCE, Kind.PATTERN)
    for changes in ({}, {"kinds": kinds}, {"include_muted": False}):
        flt = TYPED.update(**changes)
        query = _vector(rng)
        _same(mine.search("alice", query, 100, flt), truth.search("alice", query, 100, flt))
    assert graph.calls["served"] == served + 3  # none of them walked the database's graph
    # a filter few rows pass among the candidates: the call goes to SQL, still right
    few = TYPED.update(pinned=True)
    assert {m.id for m, _ in mine.search("alice", query, 5, few)} <= learnings
    # the pool's searches are the pool graph's, which holds every row
    mine.search("alice", np.ones(DIM, dtype=np.float32), 1, ALL)
    assert mine.wait_for_projection("alice", timeout=60)
    assert len(mine._projected.held("alice").index) == 300


def test_writes_of_another_store_are_seen_in_the_call(stores: Any) -> None:
    mine, other, truth = stores
    mine.write(_corpus(200))
    graph = _graphed(mine)
    query = _vector(np.random.default_rng(9))
    nearest = mine.search("alice", query, 60, TYPED)  # 106 proposed: every learning
    # another process forgets the nearest learning and adds one nearer than any
    other.write(deletes=[nearest[0][0]])
    other.write([mem("new", kind=Kind.INVARIANT, vector=query, minutes=999)])
    found = mine.search("alice", query, 60, TYPED)
    assert found[0][0].id == "new"
    assert nearest[0][0].id not in {m.id for m, _ in found}
    _same(found, truth.search("alice", query, 60, TYPED))
    assert graph.held("alice").revision < mine.revision("alice")  # not caught up: scored


def test_kept_in_a_file_of_its_own_and_read_by_the_next_process(
    pg_url: str, tmp_path: Path
) -> None:
    first = _store(pg_url, tmp_path)
    try:
        first.write(_corpus(200))
        _graphed(first)
        first.search("alice", np.ones(DIM, dtype=np.float32), 1, ALL)
        assert first.wait_for_projection("alice", timeout=60)
        files = first._learnings_graph._files
        pool, learned = files.path("alice"), files.path(held_graph.LEARNINGS.file_key("alice"))
        assert pool != learned and pool.is_file() and learned.is_file()
    finally:
        first.close()
    second = _store(pg_url, tmp_path)
    try:
        graph = _graphed(second)
        assert graph.graphs == {"from_file": 1, "built": 0}
        assert len(graph.held("alice").index) == 100
    finally:
        second.close()


def test_learnings_held_in_process_get_no_graph(pg_url: str, tmp_path: Path) -> None:
    store = _store(pg_url, tmp_path, learnings_bytes=postgres.learnings.LEARNINGS_BYTES)
    try:
        store.write(_corpus(100))
        store.search("alice", np.ones(DIM, dtype=np.float32), 1, TYPED)
        assert store.wait_for_learnings("alice", timeout=60)
        assert not store._learnings.refused("alice")
        store.search("alice", np.ones(DIM, dtype=np.float32), 1, TYPED)
        assert not store.wait_for_learnings_graph("alice", timeout=60)
        assert store._learnings_graph._loader.get("alice") is None  # never started
    finally:
        store.close()


def test_the_loads_an_engine_call_asks_for_begin_once_it_has_answered(
    pg_url: str, tmp_path: Path
) -> None:
    """A store's first calls are served by SQL; the loads they ask for (the learnings
    counted, the pool's graph read) serve the calls after, so they begin once the call has
    answered instead of taking the cores and the GIL beside it (``loader.Answering``)."""
    store = _store(pg_url, tmp_path / "graphs")
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    try:
        store.write(_corpus(200))
        query = _vector(np.random.default_rng(5))
        with engine.gate.call():  # what every public call of the engine runs inside
            pool = store.search("alice", query, 20, ALL)
            learned = store.search("alice", query, 20, TYPED)
            # served by the database's walk, which asked for the loads: none begun yet
            assert store._projected._loader.get("alice") is None
            assert store._learnings._loader.get("alice") is None
        assert [m.id for m, _ in pool] == [m.id for m, _ in truth.search("alice", query, 20)]
        assert [m.id for m, _ in learned] == [
            m.id for m, _ in truth.search("alice", query, 20, TYPED)
        ]
        assert store.wait_for_projection("alice", timeout=60)  # begun as the call ended
        assert not store.wait_for_learnings("alice", timeout=60)
        assert store._learnings.refused("alice")
        # a whole call: its learnings' search asks for their graph, read once it answered
        engine.context("what did we decide?", "alice", now=NOW)
        assert store.wait_for_learnings_graph("alice", timeout=60)
        served = dict(store._projected.calls)
        engine.context("what did we decide about the tests?", "alice", now=NOW)
        assert store._projected.calls["served"] == served["served"] + 1
        # held by then (this small user's deep search is then handed to SQL: too few pass)
        assert sum(store._learnings_graph.calls.values()) == 1
    finally:
        engine.close()
        truth.close()
