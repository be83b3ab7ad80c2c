"""What only the PostgreSQL store promises: migrations in the database, the HNSW index
serving filtered searches, BM25 in SQL equal to the in-process index, the URL that opens
it, copying a SQLite store into it, and many processes sharing one user at once.

The contract suite (``test_store_contract.py``) already runs against PostgreSQL through the
``store`` fixture; every test here starts from an empty schema on the session's server
(``tests/pg.py``).
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engrain.errors import ConfigError, MigrationError, StoreError, ValidationError
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.store import MemoryFilter, MemoryStore, State, Store, open_store
from engrain.store.lexical import LexicalIndex, tokenize
from engrain.store.sqlite import SQLiteStore
from engrain.store.transfer import copy_store

from .conftest import NOW
from .pg import new_schema, posting_rows
from .test_properties import FAST, assert_round_trip, memories
from .test_store_contract import ids, mem, unit

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore


def _sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as db:
        cur = db.execute(query, params)
        return cur.fetchall() if cur.description else []


def random_unit(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


# -- migrations ---------------------------------------------------------------------------


def test_migrations_are_named_recorded_and_run_once(pg_url: str) -> None:
    names = [name for name, _ in postgres.MIGRATIONS]
    store = PostgresStore(pg_url)
    assert store.migrate() == []
    store.close()
    reopened = PostgresStore(pg_url)
    assert reopened.migrate() == []
    reopened.close()

    recorded = _sql(pg_url, "SELECT name, applied_at FROM migrations ORDER BY name")
    assert [name for name, _ in recorded] == names == sorted(names)
    assert all(applied_at is not None for _, applied_at in recorded)
    extensions = _sql(pg_url, "SELECT extname FROM pg_extension")
    assert ("vector",) in extensions


def test_processes_opening_a_new_database_at_once_migrate_it_once(pg_url: str) -> None:
    with ThreadPoolExecutor(4) as pool:  # one connection each, like four processes
        stores = list(pool.map(lambda _: PostgresStore(pg_url, pool_size=1), range(4)))
    for store in stores:
        store.close()

    recorded = _sql(pg_url, "SELECT name FROM migrations")
    assert sorted(r[0] for r in recorded) == [name for name, _ in postgres.MIGRATIONS]


def test_a_database_written_by_a_newer_engrain_is_refused(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    _sql(pg_url, "INSERT INTO migrations (name) VALUES ('999_from_the_future')")

    with pytest.raises(MigrationError, match="newer engrain"):
        PostgresStore(pg_url)


def test_a_failing_migration_is_rolled_back(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(db: Any) -> None:
        db.execute("CREATE TABLE half_done (x int)")
        db.execute("SELECT no_such_column FROM memories")

    broken_too = [*postgres.MIGRATIONS, ("900_broken", broken)]
    monkeypatch.setattr(postgres.schema, "MIGRATIONS", broken_too)

    with pytest.raises(MigrationError, match="900_broken"):
        PostgresStore(pg_url)

    assert _sql(pg_url, "SELECT to_regclass('half_done')") == [(None,)]
    recorded = [r[0] for r in _sql(pg_url, "SELECT name FROM migrations")]
    assert "900_broken" not in recorded and "001_initial" in recorded


def test_a_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        PostgresStore("postgresql://a b c")


def test_an_unreachable_server_is_a_store_error_naming_it() -> None:
    # Port 1 on localhost: nothing listens there, so the refusal is immediate.
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at .*port=1"):
        open_store("postgresql://localhost:1/engrain")


# -- vector search ------------------------------------------------------------------------


def _filtered_corpus(rng: np.random.Generator, n: int) -> list[Memory]:
    vectors = random_unit(rng, n)
    return [
        mem(
            f"m{i:05d}",
            vector=None,
            project="p1" if i % 3 else "p2",
            muted=i % 7 == 0,
            importance=0.2 if i % 5 == 0 else 0.8,
            kind=Kind.EVENT if i % 2 else Kind.FACT,
        ).evolve(embedding=vectors[i])
        for i in range(n)
    ]


def test_hnsw_index_serves_the_filtered_search(pg_url: str) -> None:
    rng = np.random.default_rng(1)
    store = PostgresStore(pg_url, exact_search_below=0)
    corpus = _filtered_corpus(rng, 600)
    store.write(corpus)
    store.write(
        [mem(f"b{i}", "bob").evolve(embedding=v) for i, v in enumerate(random_unit(rng, 60))]
    )
    _sql(pg_url, "ANALYZE memories")
    flt = MemoryFilter(project="p1", include_muted=False, min_importance=0.5)
    query = random_unit(rng, 1)[0]

    plan = store.explain_search("alice", query, 10, flt)  # the plan search() runs
    found = store.search("alice", query, 10, flt)

    assert "memories_embedding_hnsw" in plan, plan
    # the index scan sits right under the LIMIT and evaluates the user and the filter
    # itself (iterative scan), rather than a filter running on k rows it already returned
    lines = [line.strip() for line in plan.splitlines()]
    scan = next(i for i, line in enumerate(lines) if "memories_embedding_hnsw" in line)
    assert lines[scan - 1].startswith("->  Limit"), plan
    node = lines[scan + 1 : next(i for i in range(scan + 1, len(lines))
                                 if lines[i].startswith("->"))]  # fmt: skip
    condition = next(line for line in node if line.startswith("Filter:"))
    for part in ("user_id = 'alice'", "project = 'p1'", "NOT muted", "importance >="):
        assert part in condition, condition
    assert len(found) == 10
    assert all(flt.matches(m) and m.user_id == "alice" for m, _ in found)
    sims = [s for _, s in found]
    assert sims == sorted(sims, reverse=True)
    passing = [m for m in corpus if flt.matches(m)]
    exact = sorted(passing, key=lambda m: -float(m.embedding @ query))[:10]  # type: ignore[operator]
    assert len({m.id for m, _ in found} & set(ids(exact))) >= 7  # approximate, but close
    for memory, similarity in found:
        assert similarity == pytest.approx(float(memory.embedding @ query), abs=1e-5)  # type: ignore[operator]
    assert "memories_embedding_hnsw" not in store.explain_search(
        "alice", query, 10, flt, indexed=False
    )
    store.close()
    # with the default thresholds, users this small are searched exactly, through the b-tree
    default = PostgresStore(pg_url)
    assert "memories_embedding_hnsw" not in default.explain_search("alice", query, 10, flt)
    assert ids([m for m, _ in default.search("alice", query, 10, flt)]) == ids(exact)
    default.close()


def test_indexed_search_still_returns_k_under_a_very_selective_filter(pg_url: str) -> None:
    rng = np.random.default_rng(2)
    store = PostgresStore(pg_url, exact_search_below=0)
    corpus = [m.evolve(project="rare" if i % 250 == 0 else "common")
              for i, m in enumerate(_filtered_corpus(rng, 1000))]  # fmt: skip
    store.write(corpus)
    query = random_unit(rng, 1)[0]

    found = store.search("alice", query, 10, MemoryFilter(project="rare"))

    assert sorted(ids([m for m, _ in found])) == ["m00000", "m00250", "m00500", "m00750"]
    store.close()


def test_small_users_are_searched_exactly(pg: Any) -> None:
    rng = np.random.default_rng(3)
    corpus = _filtered_corpus(rng, 200)
    pg.write(corpus)
    query = random_unit(rng, 1)[0]

    found = pg.search("alice", query, 15)

    exact = sorted(corpus, key=lambda m: -float(m.embedding @ query))[:15]
    assert ids([m for m, _ in found]) == ids(exact)


def test_query_sees_changes_made_by_other_processes(pg_url: str) -> None:
    """query() keeps decoded rows, but checks each one's version on every call."""
    mine, theirs = PostgresStore(pg_url), PostgresStore(pg_url)
    mine.write([mem("a", minutes=1), mem("b", minutes=2)])
    assert ids(mine.query("alice")) == ["b", "a"]  # decoded and kept

    theirs.record_access("alice", ["a"], NOW)
    theirs.write([mem("b", minutes=2, content="edited")], deletes=[])
    theirs.write([mem("c", minutes=3)])

    got = mine.query("alice")
    assert ids(got) == ["c", "b", "a"]
    assert got[1].content == "edited" and got[2].access_count == 1
    theirs.write(deletes=[mem("a")])
    assert ids(mine.query("alice")) == ["c", "b"]
    mine.close()
    theirs.close()


# -- BM25 ---------------------------------------------------------------------------------

TEXTS = [
    "The deploy pipeline runs nightly and the pipeline fails on Mondays",
    "Priya painted the kitchen; she paints every weekend and loves painting",
    "We moved the billing service from Redis to Kafka because retries are simpler",
    "My sister is allergic to peanuts, so we check menus before booking",
    "Running along the river: 12 kilometres in 58 minutes, planned a longer run",
    "Tabs over spaces, always. Dark mode everywhere.",
    "The billing service outage was caused by an expired TLS certificate",
    "Kafka consumer lag grew after the deploy; rolled back the billing change",
    "Planning a trip to Lisbon in May with my sister",
    "",
    "the and of it",  # only stopwords: a document of length 0
    "Redis Redis Redis cache eviction policy",
]
QUERIES = [
    "billing service Kafka",
    "deploy pipeline",
    "painting weekend",
    "sister trip Lisbon peanuts",
    "redis",
    "running river kilometres 58",
    "nothing matches here zebra",
]


def test_lexical_scores_equal_lexical_index(pg: Any) -> None:
    alice = [mem(f"a{i}", content=t, minutes=i, muted=i % 4 == 1) for i, t in enumerate(TEXTS)]
    bob = [mem(f"b{i}", "bob", content=t) for i, t in enumerate(TEXTS[:4] * 3)]
    pg.write(alice + bob)
    index = LexicalIndex([m.content for m in alice])

    for query in QUERIES:
        expected = index.scores(query)
        found = pg.lexical_search("alice", query, 100)
        assert {m.id for m, _ in found} == {f"a{i}" for i in np.flatnonzero(expected > 0)}
        for memory, score in found:
            assert score == float(expected[int(memory.id[1:])]), (query, memory.content)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        # a filter changes which memories come back, never their scores
        unmuted = pg.lexical_search("alice", query, 100, MemoryFilter(include_muted=False))
        assert dict((m.id, s) for m, s in unmuted) == {m.id: s for m, s in found if not m.muted}


def test_lexical_statistics_follow_updates_and_deletes(pg: Any) -> None:
    alice = [mem(f"a{i}", content=t) for i, t in enumerate(TEXTS)]
    pg.write(alice)
    edited = alice[0].evolve(content="Kafka Kafka billing pipeline")
    pg.write([edited, alice[5]], deletes=[alice[2], alice[6]])
    pg.write([alice[7].evolve(importance=0.1)])  # same text: postings untouched
    remaining = {m.id: m for m in pg.query("alice")}
    contents = [remaining[i].content for i in sorted(remaining)]
    index = LexicalIndex(contents)

    for query in QUERIES:
        expected = dict(zip(sorted(remaining), index.scores(query).tolist(), strict=True))
        found = pg.lexical_search("alice", query, 100)
        assert {m.id: s for m, s in found} == {i: s for i, s in expected.items() if s > 0}
    stats = _sql(pg.url, "SELECT documents, total_length FROM revisions WHERE user_id = 'alice'")
    assert stats == [(len(contents), sum(len(tokenize(c)) for c in contents))]


# -- URLs and errors ----------------------------------------------------------------------


def test_open_store_by_url(pg_url: str) -> None:
    for url in (pg_url, "postgres://" + pg_url.removeprefix("postgresql://")):
        store = open_store(url)
        assert isinstance(store, PostgresStore)
        store.write([mem("a")])
        assert ids(store.query("alice")) == ["a"]
        store.close()


def test_open_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "engrain.store.postgres")

    with pytest.raises(ConfigError, match=r"engrain\[postgres\]"):
        open_store("postgresql://localhost/engrain")


def test_text_postgres_cannot_hold_is_refused_and_nothing_is_written(pg: Any) -> None:
    with pytest.raises(ValidationError):
        pg.write([mem("ok"), mem("nul", content="a\x00b")])
    assert pg.query("alice") == [] and pg.revision("alice") == 0

    # JSON documents keep NUL (as the \u0000 escape of the json type)
    nul = Provenance(metadata={"raw": "a\x00b"})
    pg.write([mem("ok", provenance=nul)], state=[State("alice", "ns", "k", {"t": "a\x00b"})])
    assert pg.get("alice", ["ok"])[0].provenance == nul
    assert pg.get_state("alice", "ns", "k") == {"t": "a\x00b"}


def test_a_statement_the_server_refuses_mid_write_leaves_nothing_written(pg: Any) -> None:
    # The write's statements travel pipelined; the server refuses the last memory's row
    # (pgvector takes no NaN) after the others, their postings and the state were sent.
    pg.write([mem("a", content="Kafka billing pipeline"), mem("b", content="tabs over spaces")])
    before = (pg.revision("alice"), _sql(pg.url, "SELECT * FROM packed_blocks ORDER BY 1, 2, 3"),
              _sql(pg.url, "SELECT user_id, term, df FROM term_stats ORDER BY 1, 2"),
              _sql(pg.url, "SELECT * FROM revisions"))  # fmt: skip
    bad = mem("z", vector=(float("nan"), 0.0, 0.0, 0.0))
    with pytest.raises(ValidationError, match="NaN"):
        pg.write(
            [mem("a", content="Kafka Kafka retries"), mem("c", content="new text here"), bad],
            deletes=[mem("b")],
            state=[State("alice", "ns", "k", {"v": 1})],
        )
    after = (pg.revision("alice"), _sql(pg.url, "SELECT * FROM packed_blocks ORDER BY 1, 2, 3"),
             _sql(pg.url, "SELECT user_id, term, df FROM term_stats ORDER BY 1, 2"),
             _sql(pg.url, "SELECT * FROM revisions"))  # fmt: skip
    assert after == before
    assert {m.id: m.content for m in pg.query("alice")} == {
        "a": "Kafka billing pipeline", "b": "tabs over spaces"
    }  # fmt: skip
    assert pg.get_state("alice", "ns", "k") is None
    # the store (and its pooled connection) is usable after the refusal
    pg.write([mem("c", content="new text here")])
    assert sorted(m.id for m in pg.query("alice")) == ["a", "b", "c"]


def test_posting_blocks_equal_the_tokens(pg: Any) -> None:
    texts = {f"m{i}": TEXTS[i % len(TEXTS)] + f" extra{i}" for i in range(12)}
    pg.write([mem(i, content=t) for i, t in texts.items()])
    rows = posting_rows(pg.url)
    expected = sorted(
        (i, term, tf, len(tokenize(t)))
        for i, t in texts.items()
        for term, tf in Counter(tokenize(t)).items()
    )
    assert rows == expected


@pytest.fixture(scope="module")
def shared_pg(pg_server: str) -> Iterator[Any]:
    store = PostgresStore(new_schema(pg_server), pool_size=2)
    yield store
    store.close()


def _texts(m: Memory) -> list[str]:
    """The memory's text columns (PostgreSQL text cannot hold NUL; JSON documents can)."""
    return [
        m.id, m.user_id, m.content, m.project or "", m.session_id or "", m.key or "",
        m.source_session_id or "", m.superseded_by or "", *m.domains,
    ]  # fmt: skip


@FAST
@given(batch=st.lists(memories(user_id=st.sampled_from(["u1", "u2"])), min_size=1, max_size=5))
def test_round_trip_of_any_memory_is_lossless(shared_pg: Any, batch: list[Memory]) -> None:
    """Like the property test of the other stores, on one shared schema (a user id prefix
    per example), for any text PostgreSQL can hold (anything but NUL)."""
    prefix = uuid.uuid4().hex[:8]
    batch = [
        m.evolve(user_id=f"{prefix}-{m.user_id}") for m in batch if "\x00" not in "".join(_texts(m))
    ]
    assert_round_trip(shared_pg, batch)


# -- copying a SQLite store ---------------------------------------------------------------


def _export(store: Store) -> list[tuple[dict[str, Any], list[float] | None]]:
    return [
        (m.to_dict(), None if m.embedding is None else m.embedding.tolist())
        for user in store.users()
        for m in reversed(store.query(user))
    ]


def test_copy_store_from_sqlite_to_postgres_is_lossless(tmp_path: Any, pg: Any) -> None:
    rng = np.random.default_rng(4)
    source = SQLiteStore(tmp_path / "source.db")
    users = ["alice", "bob", "carol ☕"]
    memories = [
        Memory(
            id=f"{u[0]}{i:03d}",
            user_id=u,
            content=f"{TEXTS[i % len(TEXTS)]} #{i}",
            memory_type=list(MemoryType)[i % 4],
            kind=list(Kind)[i % len(Kind)],
            created_at=NOW - timedelta(days=i, microseconds=i),
            updated_at=NOW - timedelta(hours=i),
            project=None if i % 3 else "engrain",
            domains=("python",) * (i % 2),
            session_id=f"s{i % 4}",
            event_at=NOW - timedelta(days=i + 1) if i % 2 else None,
            key=f"k{i}" if i % 5 == 0 else None,
            importance=float(rng.random()),
            confidence=0.9,
            usefulness=float(rng.random()),
            access_count=i,
            last_accessed_at=NOW if i % 2 else None,
            pinned=i % 6 == 0,
            muted=i % 7 == 0,
            compressed=i % 8 == 0,
            superseded_by="x" if i % 9 == 0 else None,
            provenance=Provenance(turn_ids=(f"t{i}",), metadata={"n": i, "f": 0.1 * i}),
            content_hash=f"h{i}",
            embedding=None if i % 10 == 0 else random_unit(rng, 1, 8)[0],
        )
        for u in users
        for i in range(120)
    ]
    source.write(memories, state=[State("alice", "tiers", "p", {"tier": 1, "text": "café"})])
    source.cache_embeddings("model", {"h1": unit(1, 0, 0, 0), "h2": unit(0, 1, 0, 0)})

    counts = copy_store(source, pg, batch=50, cache_models=["model"], verify=True)

    assert counts == {
        "users": 3, "memories": 360, "embeddings": 324, "state": 1, "cached_embeddings": 2,
        "keys": 0,
    }  # fmt: skip
    assert _export(pg) == _export(source)
    assert pg.get_state("alice", "tiers", "p") == {"tier": 1, "text": "café"}
    assert set(pg.cached_embeddings("model", ["h1", "h2", "h3"])) == {"h1", "h2"}
    for user in users:
        query = random_unit(rng, 1, 8)[0]
        assert [(m.id, round(s, 5)) for m, s in pg.search(user, query, 20)] == [
            (m.id, round(s, 5)) for m, s in source.search(user, query, 20)
        ]
        for text in QUERIES:
            assert [(m.id, s) for m, s in pg.lexical_search(user, text, 50)] == [
                (m.id, s) for m, s in source.lexical_search(user, text, 50)
            ]
    assert copy_store(source, pg, batch=50)["memories"] == 360  # re-running replaces rows
    assert _export(pg) == _export(source)
    source.close()


def test_copy_store_verify_compares_instants_and_catches_a_bad_copy(pg: Any) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    source = MemoryStore()
    source.write([mem(f"m{i}", created_at=NOW.astimezone(ist)) for i in range(5)])

    assert copy_store(source, pg, verify=True)["memories"] == 5  # read back in UTC: equal

    class Lossy(MemoryStore):
        def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
            return [m.evolve(content=m.content + "!") for m in super().get(user_id, ids)]

    with pytest.raises(StoreError, match="does not read back equal"):
        copy_store(source, Lossy(), verify=True)


# -- several processes, one user ----------------------------------------------------------

WORKERS = 4
ROUNDS = 30


def _worker(url: str, worker: int, rounds: int) -> dict[str, int]:
    """Write own memories, rewrite shared ones, count accesses, and read all the while,
    as one API replica would (runs in a spawned process)."""
    rng = np.random.default_rng(worker)
    store = PostgresStore(url, pool_size=2)
    seen = 0
    writes = accesses = 0
    for i in range(rounds):
        mine = [
            mem(f"w{worker}-{i}-{j}", content=f"worker {worker} note {i} {j} deploy pipeline")
            .evolve(embedding=random_unit(rng, 1)[0])
            for j in range(3)
        ]  # fmt: skip
        shared = mem(f"shared{i % 3}", content=f"shared text by {worker} round {i}")
        store.write([*mine, shared.evolve(embedding=random_unit(rng, 1)[0])])
        writes += 1
        # seed memories are never rewritten, so every access must be counted
        store.record_access("alice", ["seed2", "seed0", "seed1", mine[0].id], NOW)
        accesses += 1
        count = store.count("alice")
        assert count >= seen, "a memory disappeared"
        seen = count
        assert len(store.search("alice", random_unit(rng, 1)[0], 5)) == 5
        assert store.lexical_search("alice", "deploy pipeline", 5)
        assert len(store.query("alice", limit=10)) == 10
    store.close()
    return {"writes": writes, "accesses": accesses}


@pytest.mark.timeout(120)
def test_processes_writing_and_reading_one_user_lose_nothing(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    rng = np.random.default_rng(9)
    seed = [mem(f"seed{i}").evolve(embedding=v) for i, v in enumerate(random_unit(rng, 10))]
    store.write(seed)
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with context.Pool(WORKERS) as pool:
        results = pool.starmap(_worker, [(pg_url, w, ROUNDS) for w in range(WORKERS)])
    elapsed = time.perf_counter() - started

    writes = sum(r["writes"] for r in results)
    assert writes == WORKERS * ROUNDS and elapsed < 110
    everything = store.query("alice")
    assert len(everything) == len(seed) + WORKERS * ROUNDS * 3 + 3
    assert store.revision("alice") == 1 + writes
    accessed = store.get("alice", ["seed0", "seed1", "seed2"])
    assert [m.access_count for m in accessed] == [WORKERS * ROUNDS] * 3
    shared = store.get("alice", ["shared0", "shared1", "shared2"])
    assert all(m.content.startswith("shared text by") for m in shared)
    own = store.get("alice", [f"w{w}-{i}-0" for w in range(WORKERS) for i in range(ROUNDS)])
    # each round's first memory is counted once by its worker in that round and later ones
    assert all(m.access_count == 1 for m in own)
    # the BM25 statistics kept by the writes match the rows that are there
    index = LexicalIndex([m.content for m in everything])
    expected = dict(zip(ids(everything), index.scores("deploy pipeline").tolist(), strict=True))
    found = store.lexical_search("alice", "deploy pipeline", 1000)
    assert {m.id: s for m, s in found} == {i: s for i, s in expected.items() if s > 0}
    store.close()
