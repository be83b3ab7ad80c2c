"""A large PostgreSQL user's pool search through a projection held in process
(``store/postgres/projected.py``): the database scores the candidates the projection
ranks, and every row changed since it, exactly, so the rows and scores are the SQL path's
own; never returns a memory forgotten or muted before the call, finds one another store
committed, hands a call it cannot serve to SQL, and is bounded by bytes. A change made
through a *second* store is a change another process makes (its caches are its own)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engrain.errors import ConfigError
from engrain.store.base import ALL, MemoryFilter, Patch

from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
projected = postgres.projected
held_graph = postgres.held_graph
PostgresStore = postgres.PostgresStore

DIM = postgres.INDEXED_DIM
VISIBLE = ALL.update(include_muted=False)


def _unit(v: Any) -> Any:
    return (v / np.linalg.norm(v)).astype(np.float32)


def _low_rank(n: int, seed: int = 0, rank: int = 24) -> list[Any]:
    """``n`` vectors that lie (up to a little noise) in a ``rank``-dimension subspace, as
    real embeddings mostly do: a projection onto the sample's main directions keeps their
    products."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((DIM, rank)))[0]
    return [
        _unit(basis @ rng.standard_normal(rank) + 0.01 * rng.standard_normal(DIM)) for _ in range(n)
    ]


def _corpus(vectors: list[Any], user: str = "alice", prefix: str = "m") -> list[Any]:
    return [
        mem(f"{prefix}-{i:05d}", user, minutes=i, vector=v, muted=i % 13 == 5)
        for i, v in enumerate(vectors)
    ]


@pytest.fixture(autouse=True)
def _small_users_get_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' users are small: hold their graphs all the same."""
    monkeypatch.setattr(held_graph, "MIN_ROWS", 1)


def _store(url: str, **options: Any) -> Any:
    """A store that walks the graph for any user (every user is "large" here)."""
    options.setdefault("learnings_bytes", 0)
    options.setdefault("projected_bytes", projected.PROJECTED_BYTES)  # off by default
    options.setdefault("graph_dir", None)  # graphs kept in files: test_pg_graph_file.py
    options.setdefault("pool_index", "projection")  # say which, whatever the default
    return PostgresStore(url, pool_size=3, exact_search_below=1, indexed_share=0.0, **options)


@pytest.fixture(params=projected.KINDS)
def stores(pg_url: str, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, Any]]:
    """This process's store (holding each kind of pool index in turn), another "process's"
    store (none), and the SQL path's exact search as the truth."""
    mine, other = _store(pg_url, pool_index=request.param), _store(pg_url, projected_bytes=0)
    assert mine._projected.kind == request.param
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    yield mine, other, truth
    for store in (mine, other, truth):
        store.close()


def _held(store: Any, user: str = "alice") -> Any:
    """Load the user's projection (the first pool search walks the graph and starts it)."""
    store.search(user, np.ones(DIM, dtype=np.float32), 1, ALL)
    assert store.wait_for_projection(user, timeout=60)
    return store._projected


def _same(found: list[tuple[Any, float]], expected: list[tuple[Any, float]]) -> None:
    assert [m.id for m, _ in found] == [m.id for m, _ in expected]
    assert [m for m, _ in found] == [m for m, _ in expected]  # every field, counts included
    for (mine, _), (theirs, _) in zip(found, expected, strict=True):  # (== skips vectors)
        assert mine.embedding is not None and theirs.embedding is not None
        assert mine.embedding.tobytes() == theirs.embedding.tobytes()
    assert [s for _, s in found] == [s for _, s in expected]  # pgvector's own distances


def test_projected_search_equals_the_sql_exact_search(stores: Any) -> None:
    mine, _, truth = stores
    vectors = _low_rank(1_500)
    mine.write(_corpus(vectors))
    held = _held(mine)
    if held.kind == "projection":
        assert held.held("alice").rows.shape == (1_500, min(projected.DIMS, 1_500))
    else:
        assert len(held.held("alice").index) == 1_500
    rng = np.random.default_rng(7)
    for at in rng.choice(len(vectors), 6, replace=False):
        query = _unit(vectors[at] + 0.3 * _low_rank(1, seed=int(at) + 1)[0])
        for k, flt in ((10, ALL), (25, VISIBLE), (5, VISIBLE)):
            _same(mine.search("alice", query, k, flt), truth.search("alice", query, k, flt))
    assert held.calls == {"served": 18, "by_sql": 0}  # none of them walked the graph


def test_candidates_are_the_best_by_the_projected_product() -> None:
    vectors = np.asarray(_low_rank(2_000, seed=3))
    basis, kept = projected.basis_of(vectors[::4])
    assert kept > 0.99  # 24 directions hold it all, up to the noise
    np.testing.assert_allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-4)
    projection = projected.Projection(
        1, np.arange(2_000, dtype=np.int64) * 3, vectors @ basis, basis
    )
    rng = np.random.default_rng(4)
    for _ in range(10):
        query = _unit(rng.standard_normal(DIM))
        exact = set((np.argsort(-(vectors @ query))[:10] * 3).tolist())
        found = projection.candidates(query, 10)
        assert len(found) == projected.CANDIDATES_PER_ROW * 10
        assert exact <= set(found.tolist())
        assert set(projection.candidates(query * 7.5, 10).tolist()) == set(found.tolist())


def test_candidates_of_the_graph_hold_the_nearest_and_ignore_the_length() -> None:
    from engrain.store.ann import VectorIndex

    vectors = np.asarray(_low_rank(3_000, seed=5))
    seqs = np.arange(3_000, dtype=np.uint64) * 3 + 1
    graph = held_graph.PoolGraph(1, VectorIndex.build(seqs, vectors), 0)
    rng = np.random.default_rng(6)
    for k in (1, 10, 40):
        for _ in range(5):
            query = _unit(vectors[rng.integers(3_000)] + 0.2 * rng.standard_normal(DIM))
            exact = set((np.argsort(-(vectors @ query))[:k] * 3 + 1).tolist())
            found = graph.candidates(query, k)
            assert found.dtype == np.int64
            assert len(found) == math.ceil(held_graph.GRAPH_PER_ROW * k) + held_graph.GRAPH_EXTRA
            assert exact <= set(found.tolist())
            assert set(graph.candidates(query * 7.5, k).tolist()) == set(found.tolist())
    assert len(graph.candidates(vectors[0], 0)) == 0


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``node`` of an ``EXPLAIN (FORMAT JSON)`` plan and every node under it."""
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def test_the_kept_rows_are_read_where_the_ranking_found_them(pg_url: str) -> None:
    """The statement a held graph's candidates go to reads the ``k`` rows it keeps by the
    tuple its ranking scored (one snapshot: the same version), not by a second probe of
    the memories' primary key each; that key is probed only for rows changed since the
    graph's revision (none here). Its rows are the SQL path's all the same."""
    import psycopg

    from engrain.store.postgres.sql import array_literal

    store = _store(pg_url, pool_index="graph")
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    try:
        vectors = _low_rank(600, seed=9)
        store.write(_corpus(vectors))
        graph = _held(store).held("alice")
        for at, k in ((5, 20), (300, 60)):
            query = vectors[at]
            seqs = array_literal(graph.candidates(query, k).tolist())
            text, params = projected.nearest_sql("alice", query, k, VISIBLE, seqs, graph.revision)
            with psycopg.connect(pg_url) as db:
                postgres.configure(db)
                plan = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()
            assert plan is not None
            nodes = list(_plan_nodes(plan[0][0]["Plan"]))
            by_key = [n for n in nodes if n.get("Index Name") == "memories_pkey"]
            assert sum(n["Actual Loops"] for n in by_key) == 0
            assert max(n["Actual Rows"] for n in nodes) >= k  # it did rank the candidates
            _same(
                store.search("alice", query, k, VISIBLE), truth.search("alice", query, k, VISIBLE)
            )
    finally:
        store.close()
        truth.close()


def test_writes_of_another_store_are_seen_in_the_call(stores: Any) -> None:
    mine, other, truth = stores
    vectors = _low_rank(800, seed=1)
    mine.write(_corpus(vectors))
    held = _held(mine)
    query = vectors[10]
    first = mine.search("alice", query, 5, VISIBLE)
    assert first[0][0].id == "m-00010"
    # another process forgets the nearest, mutes the second, adds a memory nearer than
    # all, and moves a far memory's vector onto the query: a projection cannot know
    other.write(deletes=[first[0][0]])
    other.write(patches=[Patch("alice", first[1][0].id, {"muted": True})])
    far = min(range(800), key=lambda i: float(vectors[i] @ query))
    other.write([mem("new", "alice", vector=_unit(query + 0.01)), mem(f"m-{far:05d}", "alice",
                 minutes=far, vector=_unit(query + 0.02))])  # fmt: skip
    found = mine.search("alice", query, 5, VISIBLE)
    _same(found, truth.search("alice", query, 5, VISIBLE))
    ids = [m.id for m, _ in found]
    assert "m-00010" not in ids and first[1][0].id not in ids
    assert {"new", f"m-{far:05d}"} <= set(ids)
    assert held.calls["by_sql"] == 0


def test_too_few_passing_or_too_many_changes_go_to_sql(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other, truth = stores
    vectors = _low_rank(600, seed=2)
    mine.write(_corpus(vectors))
    held = _held(mine)
    only = MemoryFilter(key="k3")  # one memory has it: 4 × k candidates cannot hold 5
    other.write([mem("keyed", "alice", vector=vectors[0], key="k3")])
    query = vectors[300]
    _same(mine.search("alice", query, 5, only), truth.search("alice", query, 5, only))
    assert held.calls == {"served": 0, "by_sql": 1}
    monkeypatch.setattr(projected, "DELTA_ROWS", 3)
    monkeypatch.setattr(projected, "RELOAD_ROWS", 2)
    monkeypatch.setattr(projected, "RELOAD_PAUSE", 0.0)
    held._loader.get("alice").not_before = 0.0  # the pause after the first load: passed
    other.write([mem(f"more-{i}", "alice", vector=vectors[i]) for i in range(4)])
    before = held.held("alice").revision
    _same(mine.search("alice", query, 8, ALL), truth.search("alice", query, 8, ALL))
    assert held.calls["by_sql"] == 2  # five changed rows: more than it scores itself
    assert mine.wait_for_projection("alice", timeout=60)  # and a new projection loads
    assert held.held("alice").revision > before
    _same(mine.search("alice", query, 8, ALL), truth.search("alice", query, 8, ALL))
    assert held.calls["served"] == 1


def test_a_held_graph_catches_up_in_place_and_is_rebuilt_once_worn(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = _store(pg_url, pool_index="graph"), _store(pg_url, projected_bytes=0)
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    try:
        vectors = _low_rank(700, seed=8)
        mine.write(_corpus(vectors))
        held = _held(mine)
        first = held.held("alice")
        monkeypatch.setattr(projected, "RELOAD_ROWS", 2)
        monkeypatch.setattr(projected, "RELOAD_PAUSE", 0.0)
        query = vectors[42]
        # another process forgets the nearest, adds three memories near the query, and moves
        # a far one onto it: more changed rows than RELOAD_ROWS, so a load catches up
        far = min(range(700), key=lambda i: float(vectors[i] @ query))
        other.write(deletes=[mem("m-00042", "alice")])
        other.write([mem(f"near-{i}", "alice", vector=_unit(query + 0.01 * (i + 1)))
                     for i in range(3)] + [mem(f"m-{far:05d}", "alice", minutes=far,
                     vector=_unit(query + 0.005))])  # fmt: skip
        held._loader.get("alice").not_before = 0.0
        _same(mine.search("alice", query, 6, ALL), truth.search("alice", query, 6, ALL))
        assert mine.wait_for_projection("alice", timeout=60)
        caught = held.held("alice")
        assert caught.revision > first.revision and caught.index is first.index  # patched
        assert len(caught.index) == 703 and caught.dead == 1 and not caught.worn
        # the graph itself now proposes the new rows and the moved one (no delta needed)
        found = set(caught.candidates(query, 4).tolist())
        assert set(_seqs(truth, ["near-0", "near-1", "near-2", f"m-{far:05d}"])) <= found
        _same(mine.search("alice", query, 6, ALL), truth.search("alice", query, 6, ALL))
        # once dead rows are WORN_SHARE of it, the next load builds a new graph
        monkeypatch.setattr(held_graph, "WORN_SHARE", 0.0)
        assert caught.worn
        other.write(deletes=[mem(f"m-{i:05d}", "alice") for i in range(3)])
        held._loader.get("alice").not_before = 0.0
        _same(mine.search("alice", query, 6, ALL), truth.search("alice", query, 6, ALL))
        assert mine.wait_for_projection("alice", timeout=60)
        rebuilt = held.held("alice")
        assert rebuilt.index is not first.index and len(rebuilt.index) == 699
        assert rebuilt.dead == 0
    finally:
        for store in (mine, other, truth):
            store.close()


def test_a_user_under_the_graphs_threshold_keeps_the_walk(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert held_graph.MIN_ROWS == 1  # this file's fixture; the module's own is SQLite's
    monkeypatch.setattr(held_graph, "MIN_ROWS", postgres.held_graph.ANN_MIN_VECTORS)
    assert held_graph.MIN_ROWS == 20_000
    monkeypatch.setattr(held_graph, "MIN_ROWS", 301)
    mine = _store(pg_url, pool_index="graph")
    truth = PostgresStore(
        pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0, projected_bytes=0
    )
    try:
        vectors = _low_rank(300, seed=9)
        mine.write(_corpus(vectors))
        mine.search("alice", vectors[0], 1, ALL)
        assert not mine.wait_for_projection("alice", timeout=60)  # 300 rows: not held
        _same(mine.search("alice", vectors[5], 5, ALL), truth.search("alice", vectors[5], 5, ALL))
        assert mine._projected.calls == {"served": 0, "by_sql": 0}  # the walk served it
        # the plan's count of the user's memories kept the load from starting at all
        assert mine._projected._loader.get("alice") is None
        mine.write([mem("one-more", "alice", vector=vectors[1])])  # the plan is read again
        mine.search("alice", vectors[0], 1, ALL)
        assert mine.wait_for_projection("alice", timeout=60)  # 301 rows: held
        _same(mine.search("alice", vectors[5], 5, ALL), truth.search("alice", vectors[5], 5, ALL))
        assert mine._projected.calls["served"] == 1
    finally:
        mine.close()
        truth.close()


def _seqs(store: Any, ids: list[str]) -> list[int]:
    with store._connection() as conn:
        rows = conn.execute(
            "SELECT seq FROM memories WHERE user_id = 'alice' AND id = ANY(%s)", (ids,)
        ).fetchall()
    assert len(rows) == len(ids)
    return [int(seq) for (seq,) in rows]


def test_bounded_by_bytes(pg_url: str) -> None:
    vectors = _low_rank(400, seed=5)
    small = _store(pg_url, projected_bytes=400 * projected.DIMS * 4)  # less than it needs
    try:
        small.write(_corpus(vectors))
        small.search("alice", vectors[0], 3, ALL)
        assert not small.wait_for_projection("alice", timeout=60)
        assert small._projected.calls == {"served": 0, "by_sql": 0}
    finally:
        small.close()
    one = 400 * (projected.DIMS * 4 + 8) + DIM * projected.DIMS * 4  # rows and directions
    two = _store(pg_url, projected_bytes=int(1.5 * one))
    try:
        two.write(_corpus(vectors, user="bob"))
        _held(two)  # alice's (and her 400 rows) held
        _held(two, "bob")  # bob's pushes hers out: least recently used first
        assert two._projected.held("bob") is not None and two._projected.held("alice") is None
    finally:
        two.close()


def test_vectors_a_projection_would_not_keep_stay_with_the_graph(pg_url: str) -> None:
    rng = np.random.default_rng(6)
    isotropic = [_unit(rng.standard_normal(DIM)) for _ in range(600)]
    basis, kept = projected.basis_of(np.asarray(isotropic))
    assert basis.shape == (DIM, projected.DIMS) and kept < projected.MIN_ENERGY
    store = _store(pg_url)
    try:
        store.write(_corpus(isotropic))
        store.search("alice", isotropic[0], 3, ALL)
        assert not store.wait_for_projection("alice", timeout=60)
        store.search("alice", isotropic[1], 3, ALL)  # not tried again before the pause
        assert store._projected._loader.get("alice").not_before - time.monotonic() > 60
    finally:
        store.close()


def test_projected_bytes_from_the_environment(pg_url: str) -> None:
    # the held graph by default (session 24), its bound: one user of a million memories
    assert projected.projected_bytes({}) == projected.GRAPH_BYTES
    assert projected.GRAPH_BYTES >= 1_000_000 * held_graph.GRAPH_ROW_BYTES
    assert projected.projected_bytes({"ENGRAIN_PG_PROJECTED_MB": " 8 "}) == 8 * 2**20
    assert projected.projected_bytes({"ENGRAIN_PG_PROJECTED_MB": "off"}) == 0
    assert projected.projected_bytes({"ENGRAIN_PG_PROJECTED_MB": "on"}) == projected.GRAPH_BYTES
    on = {"ENGRAIN_PG_POOL_INDEX": "projection", "ENGRAIN_PG_PROJECTED_MB": "on"}
    assert projected.projected_bytes(on) == projected.PROJECTED_BYTES  # the projection's
    with pytest.raises(ConfigError, match="ENGRAIN_PG_PROJECTED_MB='-3'"):
        projected.projected_bytes({"ENGRAIN_PG_PROJECTED_MB": "-3"})
    graph = {"ENGRAIN_PG_POOL_INDEX": "graph"}
    assert projected.pool_kind({}) == "graph"
    assert projected.projected_bytes({"ENGRAIN_PG_POOL_INDEX": "graph"}) == projected.GRAPH_BYTES
    assert projected.projected_bytes({}, kind="graph") == projected.GRAPH_BYTES  # argument
    assert projected.pool_kind({"ENGRAIN_PG_POOL_INDEX": "off"}) == "projection"
    # off: the projection's kind, which is held only with a bound given: the database's walk
    assert projected.projected_bytes({"ENGRAIN_PG_POOL_INDEX": "off"}) == 0
    assert projected.projected_bytes({"ENGRAIN_PG_PROJECTED_MB": "off"}) == 0
    assert projected.pool_kind(graph) == projected.pool_kind({"ENGRAIN_PG_POOL_INDEX": " On"})
    assert projected.pool_kind(graph) == "graph"
    with pytest.raises(ConfigError, match="ENGRAIN_PG_POOL_INDEX='x'"):
        projected.pool_kind({"ENGRAIN_PG_POOL_INDEX": "x"})
    # asking for the graph turns the pool index on, at the default bound unless one is given
    assert projected.projected_bytes(graph) == projected.GRAPH_BYTES
    assert projected.projected_bytes({**graph, "ENGRAIN_PG_PROJECTED_MB": "8"}) == 8 * 2**20
    assert projected.projected_bytes({**graph, "ENGRAIN_PG_PROJECTED_MB": "0"}) == 0
    default = PostgresStore(pg_url, pool_size=1)
    try:
        if not {"ENGRAIN_PG_PROJECTED_MB", "ENGRAIN_PG_POOL_INDEX"} & set(os.environ):
            # a large user's graph held by default, at the default bound
            assert default._projected is not None and default._projected.kind == "graph"
            assert default._projected.max_bytes == projected.GRAPH_BYTES
    finally:
        default.close()
    with pytest.raises(ConfigError):
        PostgresStore(pg_url, pool_size=1, projected_bytes=2**20, pool_index="ivf")
