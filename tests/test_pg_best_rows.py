"""BM25's best matches on PostgreSQL are filtered and ordered in one pass over their rows,
each row read once, and only the ``k`` kept are joined to their access counts
(``sql.best_rows_sql``): the same memories, scores and order as the in-memory store's
BM25 ranked by score then id, with the access counts of just those ``k`` read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engrain.model import Kind
from engrain.store import MemoryFilter, MemoryStore

from .conftest import NOW
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
sql = pytest.importorskip("engrain.store.postgres.sql")


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:
    store = postgres.PostgresStore(pg_url, pool_size=1)
    yield store
    store.close()


def _corpus() -> list[Any]:
    kinds = (Kind.FACT, Kind.EVENT, Kind.PATTERN)
    texts = ("kafka retries topic", "kafka billing", "billing retries", "kafka kafka")
    return [
        mem(f"m{i:03d}", content=f"{texts[i % 4]} note {i % 7}", kind=kinds[i % 3],
            importance=0.1 * (i % 10), muted=i % 11 == 0)
        for i in range(120)
    ]  # fmt: skip


@pytest.mark.parametrize(
    "flt",
    [
        MemoryFilter(),
        MemoryFilter(kinds=(Kind.EVENT,)),
        MemoryFilter(include_muted=False, min_importance=0.5),
    ],
)
def test_best_matches_equal_the_in_memory_store(pg: Any, flt: MemoryFilter) -> None:
    reference = MemoryStore()
    for store in (pg, reference):
        store.write(_corpus())
        store.record_access("alice", ["m001", "m002", "m002"], NOW)
    for query, k in (("kafka retries", 10), ("billing note", 25), ("kafka", 7)):
        got = [(m.id, s, m.access_count) for m, s in pg.lexical_search("alice", query, k, flt)]
        every = reference.lexical_search("alice", query, 1_000, flt)
        ranked = sorted(every, key=lambda hit: (-hit[1], hit[0].id))  # ties by id
        want = [(m.id, s, m.access_count) for m, s in ranked[:k]]
        assert [i for i, _, _ in got] == [i for i, _, _ in want]
        assert [n for *_, n in got] == [n for *_, n in want]
        assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in want], rel=1e-6)


def test_only_the_k_kept_rows_are_read_in_full(pg: Any) -> None:
    pg.write(_corpus())
    pg.record_access("alice", [f"m{i:03d}" for i in range(120)], NOW)
    with psycopg.connect(pg.url, autocommit=True) as db:
        db.execute("ANALYZE")
    best = {seq: 1.0 / seq for seq in range(1, 101)}  # 100 matches, 10 kept
    text, params = sql.best_rows_sql("alice", best, MemoryFilter(), 10)
    plan = pg._read("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params)[0][0][0]["Plan"]

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    probes = [n for n in nodes(plan) if n.get("Relation Name") == "access"]
    assert probes and all(n["Actual Loops"] <= 10 for n in probes)
    # the matches' rows read in one pass: the kept ones are not looked up again by id
    assert len([n for n in nodes(plan) if n.get("Relation Name") == "memories"]) == 1
    assert len(pg._read(text, params)) == 10


def test_seqs_and_scores_travel_as_one_literal_each_and_keep_every_bit(pg: Any) -> None:
    """The best matches' seqs and scores are sent as two array literals (a list is dumped
    element by element), and each score reads back as the same double: two scores one
    unit in the last place apart keep their order, and equal ones fall back on the id."""
    import math

    pg.write([mem(f"m{i}", content=f"note {i}") for i in range(4)])
    seqs = dict(pg._read("SELECT id, seq FROM memories WHERE user_id = 'alice'"))
    top = 0.1 + 0.2  # 0.30000000000000004: a double no shorter text gets wrong
    best = {seqs["m0"]: top, seqs["m1"]: math.nextafter(top, 1.0), seqs["m2"]: top,
            seqs["m3"]: 1e-05}  # fmt: skip
    text, params = sql.best_rows_sql("alice", best, MemoryFilter(), 4)
    assert all(isinstance(p, str) for p in params[:2])
    assert params[0] == "{" + ",".join(str(seqs[f"m{i}"]) for i in range(4)) + "}"
    rows = pg._read(text, params)
    assert [r[0] for r in rows] == ["m1", "m0", "m2", "m3"]
    assert [best[r[-1]] for r in rows] == [math.nextafter(top, 1.0), top, top, 1e-05]
    assert sql.array_literal([]) == "{}"
    assert pg._read("SELECT %s::text::float8[]", [sql.array_literal([top, 1e-05])]) == [
        ([top, 1e-05],)
    ]
