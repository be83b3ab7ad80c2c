"""PostgreSQL posting lists stored in blocks (``engrain.store.postgres.bm25``, migration
``005_posting_blocks``): every write keeps the blocks equal to the tokens of the memories
that exist, blocks split and shrink without overlapping, concurrent writers lose no
posting, and a store with the earlier one-row-per-posting table migrates to the same
blocks."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from engrain.store.base import Patch
from engrain.store.lexical import LexicalIndex, tokenize

from .pg import posting_rows
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
bm25 = pytest.importorskip("engrain.store.postgres.bm25")
postings = pytest.importorskip("engrain.store.postgres.postings")
PostgresStore = postgres.PostgresStore

WORDS = [
    "kafka",
    "billing",
    "river",
    "lisbon",
    "sister",
    "redis",
    "cache",
    "paint",
    "retry",
    "zebra",
    "run",
]


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:
    store = PostgresStore(pg_url, pool_size=4)
    yield store
    store.close()


def _sql(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as db:
        cur = db.execute(query)
        return cur.fetchall() if cur.description else []


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))


def _expected_rows(store: Any, users: tuple[str, ...]) -> list[tuple[str, str, int, int]]:
    """The postings the memories that exist should have."""
    rows = []
    for user in users:
        for memory in store.query(user):
            tokens = tokenize(memory.content)
            rows += [(memory.id, t, n, len(tokens)) for t, n in Counter(tokens).items()]
    return sorted(rows)


def _assert_bm25_equals_lexical_index(store: Any, user: str) -> None:
    remaining = sorted(store.query(user), key=lambda m: m.id)
    index = LexicalIndex([m.content for m in remaining])
    for query in ("kafka billing", "sister lisbon river", "redis redis cache", "zebra run"):
        scores = index.scores(query)
        expected = {m.id: float(s) for m, s in zip(remaining, scores, strict=True) if s > 0}
        assert {m.id: s for m, s in store.lexical_search(user, query, 100)} == expected


def test_changed_blocks_puts_each_change_in_its_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "BLOCK", 2)
    block = [("u", "t", 10, bm25.encode([10, 12], [1, 1], [3, 3])),
             ("u", "t", 20, bm25.encode([20, 25], [2, 1], [4, 4]))]  # fmt: skip
    # 5 precedes every block (the first takes it), 13 follows 10's block, 30 follows 20's
    changes = {("u", "t"): {5: (1, 9), 13: (3, 9), 25: None, 30: (1, 9)}}
    dropped, written = bm25.changed_blocks(changes, block)
    assert sorted(dropped) == [("u", "t", 10), ("u", "t", 20)]
    decoded = {first: bm25.decode(data, first).seqs.tolist() for _, _, first, data in written}
    assert decoded == {5: [5, 10], 12: [12, 13], 20: [20, 30]}
    # a term with no block yet starts one; one whose postings all go is deleted
    dropped, written = bm25.changed_blocks(
        {("u", "new"): {7: (1, 2)}, ("u", "t"): {10: None, 12: None}}, block[:1]
    )
    assert dropped == [("u", "t", 10)]
    assert [(t, f) for _, t, f, _ in written] == [("new", 7)]


def test_blocks_follow_every_kind_of_write(pg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded random sequence of new memories, content edits (postings re-inserted at
    an old seq, inside earlier blocks), patches, deletes and re-creations, with blocks of
    three postings so that they split and empty often: after each write the blocks hold
    exactly the tokens of the memories that exist, and BM25 equals the in-process index."""
    monkeypatch.setattr(bm25, "BLOCK", 3)
    rng = random.Random(5)
    for step in range(40):
        user = rng.choice(["alice", "bob"])
        names = [f"m{rng.randrange(20)}" for _ in range(rng.randint(1, 5))]
        action = rng.random()
        if action < 0.5:
            pg.write([mem(n, user, content=_text(rng), minutes=step) for n in names])
        elif action < 0.7:
            pg.write(patches=[Patch(user, n, {"content": _text(rng)}) for n in names])
        elif action < 0.8:
            pg.write(patches=[Patch(user, n, {"importance": rng.random()}) for n in names])
        else:
            pg.write(deletes=[mem(n, user) for n in names])
        assert posting_rows(pg.url) == _expected_rows(pg, ("alice", "bob")), step
    for user in ("alice", "bob"):
        _assert_bm25_equals_lexical_index(pg, user)
    assert max(len(bytes(d)) for (d,) in _sql(pg.url, "SELECT data FROM packed_blocks")) == (
        3 * postings.RECORD.itemsize
    )


def test_concurrent_writers_of_one_user_lose_no_posting(pg_url: str) -> None:
    """Writers of one user in several threads over two stores (their blocks are the same
    rows: they queue on the user's revision): every posting and document frequency is
    there afterwards, and a third store's search sees every memory."""
    stores = [PostgresStore(pg_url, pool_size=4) for _ in range(3)]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(12):
                memories = [mem(f"w{n}-{i}-{j}", content=_text(rng) + " kafka") for j in range(3)]
                stores[n % 2].write(memories)
                if i % 4 == 3:
                    stores[n % 2].write(deletes=[mem(f"w{n}-{i - 1}-0")])
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        reader = stores[2]
        assert posting_rows(pg_url) == _expected_rows(reader, ("alice",))
        kept = _sql(pg_url, "SELECT term, df FROM term_stats WHERE user_id = 'alice' ORDER BY 1")
        recount = Counter(t for m in reader.query("alice") for t in set(tokenize(m.content)))
        assert kept == sorted(recount.items())
        found = {m.id for m, _ in reader.lexical_search("alice", "kafka", 1_000)}
        assert found == {m.id for m in reader.query("alice")} and len(found) == 4 * 12 * 3 - 4 * 3
    finally:
        for store in stores:
            store.close()


def test_a_store_with_one_row_per_posting_migrates_to_blocks(pg_url: str) -> None:
    """A database as migration 004 left it (a ``postings`` row per posting) is migrated
    on open (005's legacy blocks, then 014's packed ones): the blocks hold the same
    postings, and BM25 returns the same scores."""
    store = PostgresStore(pg_url, pool_size=2)
    rng = random.Random(9)
    store.write([mem(f"m{i:03d}", content=_text(rng)) for i in range(700)])
    store.write(deletes=[mem(f"m{i:03d}") for i in range(0, 700, 7)])
    before = posting_rows(pg_url)
    results = {q: store.lexical_search("alice", q, 50) for q in ("kafka billing", "zebra run")}
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as db:  # back to the 004 layout
        db.execute(
            """CREATE TABLE postings (
                user_id text COLLATE "C" NOT NULL, term text COLLATE "C" NOT NULL,
                memory_id text COLLATE "C" NOT NULL, tf integer NOT NULL,
                doc_length integer NOT NULL,
                PRIMARY KEY (user_id, term, memory_id) INCLUDE (tf, doc_length))"""
        )
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO postings VALUES ('alice', %s, %s, %s, %s)",
                [(t, i, tf, n) for i, t, tf, n in before],
            )
        db.execute("DROP VIEW posting_blocks")
        db.execute("DROP FUNCTION engrain_postings_moved, engrain_postings_moved_write")
        db.execute("DROP TABLE packed_blocks")
        db.execute("DROP INDEX memories_user_seq")
        db.execute(
            "DELETE FROM migrations WHERE name IN ('005_posting_blocks', '014_packed_postings')"
        )
    store = PostgresStore(pg_url, pool_size=2)
    try:
        assert posting_rows(pg_url) == before
        assert _sql(pg_url, "SELECT to_regclass('postings')") == [(None,)]
        for query, found in results.items():
            again = store.lexical_search("alice", query, 50)
            assert [(m.id, s) for m, s in again] == [(m.id, s) for m, s in found]
    finally:
        store.close()


def test_new_postings_are_appended_in_place_until_the_block_is_full(
    pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new memory's postings follow every posting of their terms: they are appended to
    the term's last block in SQL while it has room, and only a missing or full block is
    read and rewritten (``changed_blocks``)."""
    monkeypatch.setattr(bm25, "BLOCK", 4)
    rewritten: list[set[str]] = []
    original = bm25.changed_blocks

    def spy(changes: Any, blocks: Any, fmt: Any = None) -> Any:
        rewritten.append({term for _, term in changes})
        return original(changes, blocks, fmt)

    monkeypatch.setattr(bm25, "changed_blocks", spy)
    for i in range(10):
        pg.write([mem(f"k{i}", content=f"kafka note{i}")])
    # kafka's block is missing at the first write and full at the 5th and 9th
    assert [i for i, terms in enumerate(rewritten) if "kafka" in terms] == [0, 4, 8]
    assert all(terms == {"kafka", f"note{i}"} or terms == {f"note{i}"}
               for i, terms in enumerate(rewritten))  # fmt: skip
    assert posting_rows(pg.url) == _expected_rows(pg, ("alice",))
    _assert_bm25_equals_lexical_index(pg, "alice")
