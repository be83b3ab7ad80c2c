"""Posting blocks packed at 7 bytes a posting (``store/postgres/postings.py``) and migration
014 that repacks a store's legacy blocks (``repack.py``).

The packed records hold every posting the legacy ones held (tf and length escaped where
they do not fit one and two bytes, seqs past 2**32 in blocks that never span an epoch);
``pack_sql`` packs in SQL exactly as ``pack`` does in numpy; a database written by a tree
before 014 holds, once migrated, the postings a fresh store holds and answers BM25 with the
same memories and the same scores bit for bit; a migrator killed at any point (``kill -9``
while it waits for the writers, or after it copied every block) commits nothing and the
next run finishes; a process of an older tree that was running gets a ``StoreError``
telling it to upgrade from its BM25 reads and its writes (which write nothing), and an
older tree opening the database is refused."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain.errors import MigrationError, StoreError
from engrain.model import Memory
from engrain.store.lexical import LexicalIndex

from .pg import new_schema, posting_rows
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
import psycopg  # noqa: E402

from engrain.store.postgres import bm25, postings, repack, schema  # noqa: E402

PostgresStore = postgres.PostgresStore
SPAWN = mp.get_context("spawn")
NAMES = [n for n, _ in schema.MIGRATIONS]
#: A tree before 014's migrations, with 015's ``graphed`` flags, which today's writes set
#: (applied out of order: it stands on its own).
BEFORE = [
    *schema.MIGRATIONS[: NAMES.index(repack.MIGRATION)],
    (postgres.graphed.MIGRATION, dict(schema.MIGRATIONS)[postgres.graphed.MIGRATION]),
]
EPOCH = 1 << postings.EPOCH_BITS


# -- the records ---------------------------------------------------------------------------


@st.composite
def _runs(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted postings of one epoch: tf and length now small, now past what a byte or two
    hold."""
    epoch = draw(st.sampled_from([0, 1, 7]))
    count = draw(st.integers(1, 300))
    lows = draw(st.lists(st.integers(0, EPOCH - 1), min_size=count, max_size=count, unique=True))
    seqs = np.asarray(sorted(lows), dtype=np.int64) + epoch * EPOCH
    value = st.one_of(st.integers(0, 300), st.integers(0, 40_000), st.integers(0, 2**31 - 1))
    tfs = np.asarray(draw(st.lists(value, min_size=count, max_size=count)), dtype=np.int64)
    lengths = np.asarray(draw(st.lists(value, min_size=count, max_size=count)), dtype=np.int64)
    return seqs, tfs, lengths


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(_runs(), min_size=1, max_size=4))
def test_packed_blocks_hold_what_the_legacy_ones_held(
    runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> None:
    firsts, packed, legacy = [], [], []
    for seqs, tfs, lengths in runs:
        data, ends = postings.pack(seqs, tfs, lengths)
        assert len(data) == int(ends[-1]) and len(data) % postings.RECORD.itemsize == 0
        firsts.append(int(seqs[0]))
        packed.append(data)
        legacy.append(postings.legacy_pack(seqs, tfs, lengths)[0])
        # a posting is one record, two when tf or length does not fit; the last is never wide
        wide = (np.minimum(tfs, postings.MAX_TF) >= 255) | (lengths >= 0xFFFF)
        assert len(data) == 7 * (len(seqs) + int(wide.sum()))
        last = np.frombuffer(data[-7:], dtype=postings.RECORD)[0]
        assert int(last["low"]) == int(seqs[-1]) % EPOCH
    got = postings.unpack(firsts, packed)
    want = postings.legacy_unpack(firsts, legacy)
    assert got.seqs.tolist() == want.seqs.tolist()
    assert got.tfs.tolist() == want.tfs.tolist()
    assert got.lengths.tolist() == want.lengths.tolist()


def test_a_posting_is_seven_bytes_unless_escaped() -> None:
    seqs = np.asarray([5, 9, 12, 40], dtype=np.int64)
    data, ends = postings.pack(
        seqs, np.asarray([1, 254, 255, 2]), np.asarray([9, 0xFFFE, 3, 0xFFFF])
    )
    # tf 255 and length 65,535 each take a wide record before their own
    assert ends.tolist() == [7, 14, 28, 42] and len(data) == 42
    found = postings.unpack([5], [data])
    assert found.seqs.tolist() == [5, 9, 12, 40]
    assert found.tfs.tolist() == [1, 254, 255, 2]
    assert found.lengths.tolist() == [9, 0xFFFE, 3, 0xFFFF]
    assert postings.legacy_pack(seqs, [1, 1, 1, 1], [1, 1, 1, 1])[1].tolist() == [14, 28, 42, 56]


def test_blocks_never_span_an_epoch() -> None:
    seqs = np.asarray([EPOCH - 3, EPOCH - 2, EPOCH - 1, EPOCH, EPOCH + 1], dtype=np.int64)
    assert postings.bounds(seqs, 2, postings.PACKED) == [(0, 2), (2, 3), (3, 5)]
    assert postings.bounds(seqs, 2, postings.LEGACY) == [(0, 2), (2, 4), (4, 5)]
    assert postings.bounds(seqs, 256, postings.PACKED) == [(0, 3), (3, 5)]
    changes: bm25.Changes = {("u", "t"): {int(s): (1, 3) for s in seqs}}
    _, written = bm25.changed_blocks(changes, [])
    assert [(first, len(postings.unpack([first], [d]))) for *_, first, d in written] == [
        (EPOCH - 3, 3), (EPOCH, 2)]  # fmt: skip
    assert not bm25.appendable([EPOCH - 1, EPOCH]) and bm25.appendable([EPOCH, EPOCH + 9])


def test_pack_sql_packs_as_numpy_does(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "BLOCK", 3)
    rng = random.Random(14)
    rows = []
    for term in ("a", "b"):
        seqs = sorted(rng.sample(range(EPOCH - 20, EPOCH + 20), 11))
        rows += [(term, s, rng.choice([1, 3, 255, 40_000]), rng.choice([2, 0xFFFF, 70_000]))
                 for s in seqs]  # fmt: skip
    PostgresStore(pg_url, pool_size=1).close()  # the schema
    values = ", ".join(f"('u', '{t}', {s}::bigint, {tf}, {n})" for t, s, tf, n in rows)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            bm25.pack_sql(
                f"SELECT * FROM (VALUES {values}) AS v(user_id, term, seq, tf, doc_length)"
            )
        )
        stored = db.execute(
            "SELECT term, first_seq, data FROM packed_blocks ORDER BY 1, 2"
        ).fetchall()
    want = []
    for term in ("a", "b"):
        mine = [(s, tf, n) for t, s, tf, n in rows if t == term]
        seqs, tfs, lengths = (np.asarray(c, dtype=np.int64) for c in zip(*mine, strict=True))
        for a, b in postings.bounds(seqs, 3, postings.PACKED):
            want.append((term, int(seqs[a]), postings.pack(seqs[a:b], tfs[a:b], lengths[a:b])[0]))
    assert [(t, f, bytes(d)) for t, f, d in stored] == want


# -- the migration -------------------------------------------------------------------------

#: Rows of two users, one with a term 300 times (tf escaped) in a memory of 70,000 tokens
#: (length escaped).
TEXTS = [
    "kafka retries the billing job", "the river in lisbon", "redis cache for the billing api",
    "my sister paints the river", "kafka kafka zebra", "retry the cache, run it again",
]  # fmt: skip
QUERIES = ["kafka billing", "river lisbon", "cache", "zebra run", "sister", "paint"]


def _memories() -> list[Memory]:
    out = [mem(f"{u[0]}{i:02d}", u, content=f"{TEXTS[i % len(TEXTS)]} (note {i})")
           for u in ("alice", "bob") for i in range(40)]  # fmt: skip
    out.append(mem("a-long", content="kafka " * 300 + "words " * 69_700))
    return out


@contextmanager
def _older_tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a tree before 014: its migrations, legacy blocks."""
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", BEFORE)
        patch.setattr(postings, "CURRENT", postings.LEGACY)
        yield


def _answers(store: Any) -> dict[str, list[tuple[str, int]]]:
    """Each query's memories and their scores' bits, best first."""
    return {
        q: [
            (m.id, int(np.float32(s).view(np.int32)))
            for m, s in store.lexical_search("alice", q, 200)
        ]
        for q in QUERIES
    }


def _legacy_database(url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A database written by a tree before 014; its postings and BM25 answers."""
    with _older_tree(monkeypatch):
        store = PostgresStore(url, pool_size=1, fill_in_background=False)
        try:
            store.write(_memories())
            store.write(deletes=[mem("a03"), mem("a07")])
            answers = _answers(store)
        finally:
            store.close()
        rows = posting_rows(url)
    return {"rows": rows, "answers": answers}


def _applied(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as db:
        return {r[0] for r in db.execute("SELECT name FROM migrations")}


def test_a_legacy_database_migrates_to_the_same_postings_and_answers(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_schema(pg_server)
    before = _legacy_database(url, monkeypatch)
    assert any(tf == postings.MAX_TF or tf >= 255 for _, _, tf, _ in before["rows"])
    assert schema.migrate(url, "test") == [repack.MIGRATION]
    assert posting_rows(url) == before["rows"]
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        assert _answers(store) == before["answers"]
        kept = sorted(store.query("alice"), key=lambda m: m.id)
        index = LexicalIndex([m.content for m in kept])
        for query in QUERIES:
            expected = {
                m.id: float(s) for m, s in zip(kept, index.scores(query), strict=True) if s > 0
            }
            assert {m.id: s for m, s in store.lexical_search("alice", query, 200)} == expected
        store.write([mem("a99", content="kafka lisbon")])  # written packed from here on
    finally:
        store.close()
    fresh = new_schema(pg_server)
    store = PostgresStore(fresh, pool_size=1, fill_in_background=False)
    try:
        store.write([m for m in _memories() if m.id not in ("a03", "a07")])
        store.write([mem("a99", content="kafka lisbon")])
    finally:
        store.close()
    assert posting_rows(url) == posting_rows(fresh)
    with psycopg.connect(url, autocommit=True) as db:
        kind = db.execute(
            "SELECT relkind FROM pg_class WHERE relname = 'posting_blocks' "
            "AND relnamespace = current_schema()::regnamespace"
        ).fetchone()
    assert kind == ("v",)  # the guard of older processes


def _migrate(url: str) -> None:
    """``schema.migrate`` in a spawned process (what ``engrain migrate`` runs)."""
    schema.migrate(url, "the migrator")


def _waiting(url: str, statement: str) -> bool:
    """Whether a backend waits for a lock in ``statement`` (the migrator's)."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND strpos(query, %s) > 0 AND pid <> pg_backend_pid()",
            (statement,),
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize(
    ("held", "statement"),
    [
        # the writers' lock: killed before it converted anything
        ("UPDATE revisions SET revision = revision WHERE user_id = 'bob'",
         "LOCK TABLE revisions"),
        # a reader of the legacy blocks: killed with every block copied, before the drop
        ("SELECT count(*) FROM posting_blocks", "DROP TABLE posting_blocks"),
    ],
    ids=["before-the-copy", "after-the-copy"],
)  # fmt: skip
def test_a_migrator_killed_at_any_point_commits_nothing_and_a_rerun_finishes(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, held: str, statement: str
) -> None:
    url = new_schema(pg_server)
    before = _legacy_database(url, monkeypatch)
    with psycopg.connect(url) as blocker:  # a transaction holding what the step needs
        blocker.execute(held)
        proc = SPAWN.Process(target=_migrate, args=(url,))
        proc.start()
        try:
            for _ in range(600):  # until the migrator waits at that statement (≤ 60 s)
                if _waiting(url, statement):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"the migrator never waited at {statement}")
            os.kill(proc.pid or 0, signal.SIGKILL)
            proc.join(60)
        finally:
            if proc.is_alive():
                proc.kill()
        blocker.rollback()  # the orphaned backend goes on, finds its client gone, rolls back
    assert schema.migrate(url, "the rerun") == [repack.MIGRATION]  # waits for it, then runs
    assert repack.MIGRATION in _applied(url)
    assert posting_rows(url) == before["rows"]
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        assert _answers(store) == before["answers"]
    finally:
        store.close()


def test_a_running_older_process_is_told_to_upgrade_and_writes_nothing(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_schema(pg_server)
    _legacy_database(url, monkeypatch)
    newer = schema.MIGRATIONS
    with _older_tree(monkeypatch):
        old = PostgresStore(url, pool_size=1, fill_in_background=False)  # opened before 014
        try:
            assert old.lexical_search("alice", "kafka", 5)
            with monkeypatch.context() as patch:  # `engrain migrate` of the new version
                patch.setattr(schema, "MIGRATIONS", newer)
                patch.setattr(postings, "CURRENT", postings.PACKED)
                assert schema.migrate(url, "a newer tree") == [repack.MIGRATION]
            with pytest.raises(StoreError, match="upgrade"):
                old.lexical_search("alice", "kafka", 5)
            rows = posting_rows(url)
            count = len(old.query("alice"))
            for write in (
                lambda: old.write([mem("new", content="kafka again")]),  # appended in SQL
                lambda: old.write([mem("a00", content="a new text, new terms")]),  # rewritten
                lambda: old.write(deletes=[mem("a01")]),
            ):
                with pytest.raises(StoreError, match="upgrade"):
                    write()
            assert len(old.query("alice")) == count and posting_rows(url) == rows
        finally:
            old.close()
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(url, pool_size=1)


def test_a_new_store_is_packed_and_seqs_past_two_to_the_32_stay_exact(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    try:
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute(f"ALTER TABLE memories ALTER COLUMN seq RESTART WITH {EPOCH - 4}")
        rng = random.Random(3)
        words = ["kafka", "river", "cache", "zebra"]
        for i in range(12):  # one memory a write: appended in SQL, across the epoch
            store.write([mem(f"m{i:02d}", content=" ".join(rng.choices(words, k=4)))])
        store.write([mem(f"n{i}", content="kafka river") for i in range(3)])
        store.write(deletes=[mem("m05")])
        with psycopg.connect(pg_url, autocommit=True) as db:
            seqs = [s for (s,) in db.execute("SELECT seq FROM memories ORDER BY seq")]
            firsts = [
                f for (f,) in db.execute("SELECT first_seq FROM packed_blocks WHERE term = 'kafka'")
            ]
        assert seqs[0] < EPOCH <= seqs[-1]
        assert len({f >> 32 for f in firsts}) == 2  # a block each side of 2**32
        assert posting_rows(pg_url)  # every block starts at its first_seq and keeps its epoch
        kept = sorted(store.query("alice"), key=lambda m: m.id)
        index = LexicalIndex([m.content for m in kept])
        for query in ("kafka", "river cache", "zebra kafka"):
            expected = {
                m.id: float(s) for m, s in zip(kept, index.scores(query), strict=True) if s > 0
            }
            assert {m.id: s for m, s in store.lexical_search("alice", query, 100)} == expected
    finally:
        store.close()
