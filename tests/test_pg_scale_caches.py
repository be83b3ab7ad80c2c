"""What lets one PostgreSQL user hold 100,000 memories at 10k-class latency stay correct:
listings served from process memory while the user's revision and access clock say they
are current, and BM25 document frequencies kept by every write instead of counted per
query (``docs/postgres.md``, "Caches and statistics").

Every change is made through a *second* store, as another process would make it: the
first store's cached listing must see it on its next call.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from engrain.model import MemoryType
from engrain.store import MemoryFilter, State
from engrain.store.base import Patch
from engrain.store.lexical import LexicalIndex, tokenize

from .conftest import NOW
from .test_store_contract import assert_same, ids, mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore

PROCEDURAL = MemoryFilter(
    memory_types=(MemoryType.PROCEDURAL,), include_muted=False, include_compressed=False
)


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[Any, Any]]:
    """Two stores over one database: ``mine`` reads (and caches), ``theirs`` writes."""
    mine, theirs = PostgresStore(pg_url, pool_size=2), PostgresStore(pg_url, pool_size=2)
    yield mine, theirs
    mine.close()
    theirs.close()


def _sql(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as db:
        cur = db.execute(query)
        return cur.fetchall() if cur.description else []


def _procedural(memory_id: str, minutes: int = 0, **fields: Any) -> Any:
    return mem(memory_id, minutes=minutes, memory_type=MemoryType.PROCEDURAL, **fields)


def test_every_write_path_bumps_the_revision_seen_by_another_store(two: Any) -> None:
    mine, theirs = two
    seen = [mine.revision("alice")]

    def bumped() -> None:
        seen.append(mine.revision("alice"))
        assert seen[-1] > seen[-2]

    theirs.write([_procedural("a"), _procedural("b", 1)])
    bumped()
    theirs.write([_procedural("a", content="replaced")])
    bumped()
    theirs.write(patches=[Patch("alice", "b", {"importance": 0.9})])
    bumped()
    theirs.write(deletes=[_procedural("a")])
    bumped()
    before = mine.revision("alice")
    theirs.write(state=[State("alice", "ns", "k", {"v": 1})])
    theirs.record_access("alice", ["b"], NOW)
    assert mine.revision("alice") == before  # neither changes a memory row


def test_cached_listing_follows_writes_of_another_store(two: Any) -> None:
    mine, theirs = two
    theirs.write([_procedural("a"), _procedural("b", 1), _procedural("c", 2)])
    assert ids(mine.query("alice", PROCEDURAL)) == ["c", "b", "a"]
    assert ids(mine.query("alice", PROCEDURAL)) == ["c", "b", "a"]  # served from the cache

    theirs.write([_procedural("b", 1, content="edited")])
    got = mine.query("alice", PROCEDURAL)
    assert [m.content for m in got if m.id == "b"] == ["edited"]

    theirs.write(patches=[Patch("alice", "c", {"muted": True})])
    assert ids(mine.query("alice", PROCEDURAL)) == ["b", "a"]
    theirs.write([_procedural("d", 3)])
    assert ids(mine.query("alice", PROCEDURAL)) == ["d", "b", "a"]


def test_cached_listing_never_returns_a_forgotten_memory(two: Any) -> None:
    mine, theirs = two
    rng = random.Random(5)
    live = {f"p{i}" for i in range(30)}
    theirs.write([_procedural(i, n) for n, i in enumerate(sorted(live))])
    pinned = MemoryFilter(pinned=True)
    for _ in range(15):
        assert set(ids(mine.query("alice", PROCEDURAL))) == live
        mine.query("alice", pinned)
        gone = rng.sample(sorted(live), 2)
        theirs.write(deletes=[_procedural(i) for i in gone])
        live -= set(gone)
        assert set(ids(mine.query("alice", PROCEDURAL))) == live
        assert not set(ids(mine.query("alice", PROCEDURAL))) & set(gone)


def test_cached_listing_sees_access_counts_of_another_store(two: Any) -> None:
    mine, theirs = two
    theirs.write([_procedural("a"), _procedural("b", 1)])
    first = {m.id: m for m in mine.query("alice", PROCEDURAL)}
    assert first["a"].access_count == 0

    later = NOW + timedelta(hours=1)
    theirs.record_access("alice", ["a", "a", "b"], later)
    got = {m.id: m for m in mine.query("alice", PROCEDURAL)}
    assert (got["a"].access_count, got["b"].access_count) == (2, 1)
    assert got["a"].last_accessed_at == later
    mine.record_access("alice", ["b"], later)
    theirs.record_access("alice", ["b"], later)
    got = {m.id: m for m in mine.query("alice", PROCEDURAL)}
    assert (got["a"].access_count, got["b"].access_count) == (2, 3)
    # the cached memories equal what a store with no cache reads
    fresh = PostgresStore(mine.url, pool_size=1, cached_rows=0)
    assert_same(mine.query("alice", PROCEDURAL), fresh.query("alice", PROCEDURAL))
    fresh.close()


WORDS = [
    "kafka",
    "billing",
    "deploy",
    "pipeline",
    "sister",
    "lisbon",
    "peanuts",
    "redis",
    "cache",
    "river",
    "run",
    "paint",
]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8)))


def test_incremental_term_stats_equal_a_full_recount(two: Any) -> None:
    """A seeded random sequence of upserts, edits, patches and deletes of two users, then
    the kept document frequencies and counts equal those counted from the rows, and BM25
    equals the in-process index over what is left."""
    mine, theirs = two
    rng = random.Random(11)
    for step in range(40):
        writer = mine if step % 2 else theirs
        user = rng.choice(["alice", "bob"])
        names = [f"m{rng.randrange(25)}" for _ in range(rng.randint(1, 4))]
        action = rng.random()
        if action < 0.5:
            writer.write([mem(n, user, content=_text(rng), minutes=step) for n in names])
        elif action < 0.7:
            writer.write(patches=[Patch(user, n, {"content": _text(rng)}) for n in names])
        elif action < 0.8:
            writer.write(patches=[Patch(user, n, {"importance": rng.random()}) for n in names])
        else:
            writer.write(deletes=[mem(n, user) for n in names])

    kept = _sql(mine.url, "SELECT user_id, term, df FROM term_stats ORDER BY 1, 2")
    recount: Counter[tuple[str, str]] = Counter()
    for user in ("alice", "bob"):
        for memory in mine.query(user):
            recount.update((user, term) for term in set(tokenize(memory.content)))
    assert kept == sorted((u, t, n) for (u, t), n in recount.items())
    assert all(n > 0 for *_, n in kept)

    for user in ("alice", "bob"):
        remaining = sorted(mine.query(user), key=lambda m: m.id)
        index = LexicalIndex([m.content for m in remaining])
        for query in ("kafka billing", "sister lisbon river", "redis redis cache", "zebra"):
            scores = index.scores(query)
            expected = {m.id: float(s) for m, s in zip(remaining, scores, strict=True) if s > 0}
            found = mine.lexical_search(user, query, 100)
            assert {m.id: s for m, s in found} == expected


def test_lexical_search_is_served_by_term_stats(pg: Any) -> None:
    """Document frequencies come from ``term_stats``: with a term's row gone, the term is
    unknown to BM25 even though its postings remain (so the query never counts them)."""
    pg.write([mem(f"a{i}", content=f"kafka billing note {i}") for i in range(5)])
    assert {m.id for m, _ in pg.lexical_search("alice", "kafka", 10)} == {f"a{i}" for i in range(5)}
    with psycopg.connect(pg.url, autocommit=True) as db:
        db.execute("DELETE FROM term_stats WHERE term = 'kafka'")
    assert pg.lexical_search("alice", "kafka", 10) == []
    assert np.isfinite([s for _, s in pg.lexical_search("alice", "billing", 10)]).all()


def test_posting_blocks_follow_writes_of_another_store(two: Any) -> None:
    """Every write of another store that adds, edits (same terms, other lengths) or removes
    a document is seen by the next search, whose scores equal the in-process index's."""
    mine, theirs = two
    rng = random.Random(3)
    live: dict[str, str] = {}
    for step in range(30):
        memory_id = f"m{rng.randrange(12)}"
        if rng.random() < 0.25 and memory_id in live:
            theirs.write(deletes=[mem(memory_id)])
            del live[memory_id]
        else:
            live[memory_id] = _text(rng) + " kafka" * (step % 3)
            theirs.write([mem(memory_id, content=live[memory_id], minutes=step)])
        order = sorted(live)
        index = LexicalIndex([live[i] for i in order])
        for query in ("kafka billing", "river run paint"):
            scores = index.scores(query)
            expected = {i: float(s) for i, s in zip(order, scores, strict=True) if s > 0}
            assert {m.id: s for m, s in mine.lexical_search("alice", query, 100)} == expected


def test_ef_search_is_raised_for_one_search_only(pg_url: str) -> None:
    """A store's ``ef_search`` applies to its indexed searches (SET LOCAL): a wide list
    finds the exact 10 nearest on a graph it can walk whole, a list of 10 misses some; the
    pooled connection keeps the default for everything else."""
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((600, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((20, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    wide = PostgresStore(pg_url, pool_size=1, exact_search_below=0, ef_search=1000)
    narrow = PostgresStore(pg_url, pool_size=1, exact_search_below=0, ef_search=10)
    wide.write([mem(f"m{i:03d}", vector=None).evolve(embedding=v) for i, v in enumerate(vectors)])
    _sql(pg_url, "ANALYZE memories")
    assert "memories_embedding_hnsw" in wide.explain_search("alice", vectors[0], 10)

    def recall(store: Any) -> float:
        hits = 0
        for query in queries:
            found = {m.id for m, _ in store.search("alice", query, 10)}
            hits += len(found & {f"m{i:03d}" for i in np.argsort(-(vectors @ query))[:10]})
        return hits / (10 * len(queries))

    assert recall(wide) >= 0.98
    assert recall(narrow) < 0.95
    assert wide._read("SHOW hnsw.ef_search") == [(str(postgres.EF_SEARCH),)]
    wide.close()
    narrow.close()


def test_learnings_search_walks_its_own_graph(pg_url: str) -> None:
    """Recall's search of the learnings is served by the partial HNSW index over exactly
    the kinds recall asks for, and returns what the exact search returns on a small graph."""
    from engrain.model import Kind
    from engrain.recall.gate import LEARNING_KINDS

    assert set(postgres.schema.LEARNING_KINDS) == {k.value for k in LEARNING_KINDS}
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((300, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    kinds = [Kind.DECISION if i % 3 == 0 else Kind.FACT for i in range(300)]
    store = PostgresStore(pg_url, pool_size=1, exact_search_below=0)
    store.write(
        [
            mem(f"m{i:03d}", vector=None, kind=kind).evolve(embedding=v)
            for i, (v, kind) in enumerate(zip(vectors, kinds, strict=True))
        ]
    )
    _sql(pg_url, "ANALYZE memories")
    learnings = MemoryFilter(kinds=LEARNING_KINDS)

    plan = store.explain_search("alice", vectors[1], 10, learnings)
    found = store.search("alice", vectors[1], 10, learnings)

    assert "memories_learnings_hnsw" in plan, plan
    assert "memories_learnings_hnsw" not in store.explain_search("alice", vectors[1], 10)
    assert {m.kind for m, _ in found} == {Kind.DECISION}
    exact = [i for i in np.argsort(-(vectors @ vectors[1])) if kinds[i] is Kind.DECISION][:10]
    assert len({m.id for m, _ in found} & {f"m{i:03d}" for i in exact}) >= 9
    store.close()
