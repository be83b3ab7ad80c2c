"""PostgreSQL answers the gate's two vector searches (the pool's and the learnings') at
once, each on its own pooled connection, with exactly what separate searches return; and
the search plan kept per user (HNSW or exact) never changes a result
(``docs/postgres.md``, "One user with 100,000 memories")."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind, Memory
from engrain.store import MemoryFilter

from .conftest import NOW

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore
DIM = postgres.INDEXED_DIM
KINDS = list(Kind)


def _memories(user: str, n: int, seed: int = 3, start: int = 0) -> list[Memory]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(start, start + n):
        vector = rng.normal(size=DIM).astype(np.float32)
        kind = KINDS[i % len(KINDS)]
        out.append(Memory.new(user, f"memory {i}", kind.default_memory_type, kind, now=NOW,
                              embedding=vector / np.linalg.norm(vector)))  # fmt: skip
    return out


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    s = PostgresStore(pg_url, pool_size=4)
    yield s
    s.close()


SEARCHES = [
    (20, MemoryFilter()),
    (15, MemoryFilter(kinds=(Kind.INVARIANT, Kind.PATTERN, Kind.PREFERENCE))),
    (0, MemoryFilter()),
    (5, MemoryFilter(kinds=())),
]


def _ids(found: list[list[tuple[Memory, float]]]) -> list[list[str]]:
    return [[m.id for m, _ in hits] for hits in found]


@pytest.mark.parametrize("concurrent", [True, False])
def test_search_many_equals_separate_searches(store: Any, concurrent: bool) -> None:
    user = f"many-{concurrent}"
    store.write(_memories(user, 120))
    store.concurrent_reads = concurrent
    query = _memories(user, 1, seed=9)[0].embedding
    many = store.search_many(user, query, SEARCHES)
    alone = [store.search(user, query, k, flt) for k, flt in SEARCHES]
    assert _ids(many) == _ids(alone)
    assert [[round(s, 6) for _, s in hits] for hits in many] == [
        [round(s, 6) for _, s in hits] for hits in alone
    ]
    assert len(many[0]) == 20 and len(many[1]) == 15 and many[2] == [] and many[3] == []
    assert store.search_many("nobody", query, SEARCHES) == [[], [], [], []]


def test_search_many_runs_the_searches_at_once(store: Any) -> None:
    store.write(_memories("both", 60))
    query = _memories("both", 1, seed=9)[0].embedding
    # Each search waits for the other to start: one after the other, the barrier breaks.
    meet = threading.Barrier(2, timeout=20)
    where: list[str] = []
    original = store.search

    def search(*args: Any, **kw: Any) -> Any:
        where.append(threading.current_thread().name)
        meet.wait()
        return original(*args, **kw)

    store.search = search
    found = store.search_many("both", query, SEARCHES[:2])
    assert [len(hits) for hits in found] == [20, 15]
    assert threading.current_thread().name in where
    assert any(name.startswith("engrain-search") for name in where)


def test_a_search_error_reaches_the_caller(store: Any) -> None:
    query = np.ones(DIM, dtype=np.float32)
    store.close()
    with pytest.raises(postgres.StoreError):
        store.search_many("gone", query, SEARCHES[:2])


def test_this_stores_writes_replan_at_once(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2, exact_search_below=50, indexed_share=0.0)
    try:
        store.write(_memories("growing", 10))
        query = _memories("growing", 1, seed=9)[0].embedding
        assert len(store.search("growing", query, 5)) == 5  # plans: exact, and kept
        assert "memories_embedding_hnsw" not in store.explain_search("growing", query, 5)
        store.write(_memories("growing", 60, start=10))
        assert "memories_embedding_hnsw" in store.explain_search("growing", query, 5)
    finally:
        store.close()


def test_a_kept_plan_never_changes_what_a_search_returns(pg_url: str) -> None:
    """Another process's writes do not reach this store's kept plan until it expires:
    whichever form runs, the rows are those of an exact search."""
    mine = PostgresStore(pg_url, pool_size=2, exact_search_below=50, indexed_share=0.0)
    theirs = PostgresStore(pg_url, pool_size=2)
    exact = PostgresStore(pg_url, pool_size=2, exact_search_below=10**12)
    try:
        theirs.write(_memories("kept", 10))
        query = _memories("kept", 1, seed=9)[0].embedding
        flt = MemoryFilter(kinds=(Kind.FACT, Kind.EVENT))
        assert _ids([mine.search("kept", query, 8, flt)]) == _ids(
            [exact.search("kept", query, 8, flt)]
        )  # exact plan kept
        theirs.write(_memories("kept", 70, start=10))  # now large: the index would serve it
        for k in (5, 30):
            assert _ids([mine.search("kept", query, k, flt)]) == _ids(
                [exact.search("kept", query, k, flt)]
            )
        gone = _memories("kept", 75, start=5)
        theirs.write(deletes=gone)  # small again, while mine may still plan the index
        mine._plans["kept"] = (True, 10**6, time.monotonic())  # as if kept from a larger size
        assert _ids([mine.search("kept", query, 8, flt)]) == _ids(
            [exact.search("kept", query, 8, flt)]
        )
    finally:
        for s in (mine, theirs, exact):
            s.close()
