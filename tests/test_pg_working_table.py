"""A large PostgreSQL user's working set read as columns (``store/postgres/table.py``):
every field of every row as the SQL path reads it, the vectors read back by id once the
index holds them (no float32 matrix kept), and rows with vectors of two sizes read as
objects, as before."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind, MemoryType, Provenance
from engrain.store.postgres import table as pg_table
from engrain.store.postgres import working

from .conftest import NOW
from .test_store_contract import assert_same, mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore


@pytest.fixture
def stores(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """``mine`` holds working sets of users with 20 memories or more; ``sql`` never does
    (the reference, and another process's writes)."""
    monkeypatch.setattr(working, "RELOAD_PAUSE", 0.0)
    mine = PostgresStore(pg_url, pool_size=3, working_set_min=20)
    sql = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    yield mine, sql
    for store in (mine, sql):
        store.close()


def _varied(n: int, dim: int = 4) -> list[Any]:
    """``n`` memories whose fields take every kind of value a column holds: missing and
    present times, keys, projects, domains, provenance, flags, types and kinds."""
    rng = np.random.default_rng(3)
    types, kinds = list(MemoryType), list(Kind)
    out = []
    for i in range(n):
        at = NOW + timedelta(minutes=i, microseconds=i * 7919)
        out.append(mem(
            f"r{i:03d}", minutes=i, content=f"note {i} — ünïcode 日本 {'x' * (i % 5)}",
            vector=None if i % 11 == 5 else tuple(rng.standard_normal(dim)),
            memory_type=types[i % len(types)], kind=kinds[i % len(kinds)],
            project=None if i % 3 == 0 else f"p{i % 4}",
            session_id=None if i % 2 else f"s{i % 6}", key=None if i % 4 else f"k{i}",
            domains=() if i % 5 == 0 else tuple(f"d{j}" for j in range(i % 3 + 1)),
            provenance=Provenance() if i % 2 else Provenance((f"t{i}",), {"n": i, "w": "ä"}),
            event_at=None if i % 3 else at - timedelta(days=i),
            promoted_at=None if i % 7 else at + timedelta(seconds=1),
            importance=0.1 + i / 100, confidence=1 / (i + 3), usefulness=i / 7,
            pinned=i % 9 == 1, muted=i % 13 == 2, compressed=i % 8 == 3,
            compression_source=i % 10 == 4, source_session_id=None if i % 6 else "src",
            superseded_by=None if i % 12 != 6 else f"r{i + 1:03d}",
        ))  # fmt: skip
    return out


def _held_memories(store: Any, user: str = "alice") -> list[Any]:
    cache = store._working.current(user)
    assert cache is not None
    arrays = cache.snapshot.arrays
    assert arrays is not None
    return arrays.memories_of(list(range(len(arrays))))


def test_every_field_of_every_row_is_the_sql_paths(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, sql = stores
    monkeypatch.setattr(pg_table, "CHUNK", 7)  # values coded and texts joined across chunks
    written = _varied(40)
    sql.write(written)
    sql.record_access("alice", ["r001", "r001", "r007"], NOW + timedelta(hours=1))
    assert mine.wait_for_working_set("alice", timeout=30)
    cache = mine._working.current("alice")
    assert cache.snapshot.arrays.rows.base is not None  # read as columns, not objects
    got = sorted(_held_memories(mine), key=lambda m: m.id)
    assert_same(got, sql.get("alice", [m.id for m in got]))
    assert {m.id for m in got} == {m.id for m in written}


def test_vectors_are_read_back_by_id_once_the_index_holds_them(stores: Any) -> None:
    mine, sql = stores
    sql.write(_varied(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    cache = mine._working.current("alice")
    assert cache.wait_for_index(30)
    arrays = cache.snapshot.arrays
    assert arrays.matrix is None and arrays.held is not None and arrays.held.exact is not None
    rng = np.random.default_rng(5)
    for _ in range(5):
        query = rng.standard_normal(4).astype(np.float32)
        query /= np.linalg.norm(query)
        got, want = mine.search("alice", query, 8), sql.search("alice", query, 8)
        assert [m.id for m, _ in got] == [m.id for m, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
        assert_same([m for m, _ in got], [m for m, _ in want])  # exact float32 vectors


def test_a_vector_read_by_id_is_found_only_if_its_row_holds_one_of_that_size(
    stores: Any,
) -> None:
    mine, sql = stores
    sql.write([mem("a", vector=(1.0, 2.0, 3.0, 4.0)), mem("b", vector=None), mem("c")])
    read = pg_table.row_vectors(mine._connection, "alice")
    ids = ["a", "b", "gone", "a", "c"]
    found, vectors, texts = read(np.zeros(len(ids), dtype=np.int64), ids, 4, texts=True)
    assert found.tolist() == [True, False, False, True, True]
    want = sql.get("alice", ["a"])[0].embedding
    np.testing.assert_array_equal(vectors[0], want)
    np.testing.assert_array_equal(vectors[3], want)
    assert not vectors[[1, 2]].any()
    assert texts == ["memory a of alice", None, None, "memory a of alice", "memory c of alice"]
    found, _, texts = read(np.zeros(1, dtype=np.int64), ["a"], 3)
    assert found.tolist() == [False] and texts is None  # another size: not this vector


def test_vectors_of_two_sizes_are_read_as_objects(stores: Any) -> None:
    mine, sql = stores
    sql.write([*_varied(30), *[mem(f"w{i}", vector=(1.0, 0.0, float(i))) for i in range(3)]])
    assert mine.wait_for_working_set("alice", timeout=30)
    cache = mine._working.current("alice")
    assert cache.snapshot.arrays is None or cache.snapshot.arrays.rows.base is None
    got = sorted(_held_memories(mine), key=lambda m: m.id)
    assert_same(got, sql.get("alice", [m.id for m in got]))


def test_the_builder_grows_past_the_rows_announced_and_trims_to_those_read() -> None:
    rows = []
    for i in range(5):
        row: list[Any] = [None] * len(pg_table.FIELDS)
        values = {
            "ids": f"m{i}", "content": f"t{i}", "content_hash": "h", "memory_type": "semantic",
            "kind": "fact", "created": i, "updated": i, "event": i, "promoted": i,
            "importance": 0.5, "confidence": 0.5, "usefulness": 0.0, "pinned": False,
            "muted": False, "compressed": False, "compression_source": False, "rowids": i,
            "access": 0, "last": i,
            "embedding": struct.pack(">HH", 3, 0) + np.full(3, i, dtype=">f4").tobytes(),
        }  # fmt: skip
        for at, (name, _) in enumerate(pg_table.FIELDS):
            row[at] = values.get(name)
        rows.append(tuple(row))
    for announced in (2, 5, 9):
        builder = pg_table.TableBuilder("alice", announced)
        builder.add(rows[:3])
        builder.add(rows[3:])
        table = builder.finish()
        assert table is not None
        assert table.matrix.shape == (5, 3)
        assert table.matrix[:, 0].tolist() == [0, 1, 2, 3, 4]
        assert table.has_vector.all() and table.columns.rowids.tolist() == [0, 1, 2, 3, 4]
        assert table.columns.ids.all() == [f"m{i}" for i in range(5)]  # chunks' blobs joined
        assert table.columns.content[3] == "t3" and table.columns.created.dtype == np.int64


def test_context_blocks_from_the_working_set_are_the_sql_paths(
    pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two users with the same memories, one served from a working set read as columns,
    the other by SQL: every ``context()`` block is the same, call after call, while each
    call counts uses (and promotes) in its own user."""
    from engrain import Engine
    from engrain.embed import HashEmbedder

    from .conftest import make_settings

    monkeypatch.setattr(working, "RELOAD_PAUSE", 0.0)
    embedder = HashEmbedder()
    texts = [f"note {i} about {w} and {v}" for i, (w, v) in enumerate(
        (a, b) for a in ("deploy", "billing", "roadmap", "incident", "budget", "review")
        for b in ("friday", "owner", "cache", "invoice", "backup", "search", "team"))]  # fmt: skip
    vectors = embedder.embed(texts)
    mine = PostgresStore(pg_url, pool_size=3, working_set_min=20)
    sql = PostgresStore(pg_url, pool_size=3, working_set_min=None)
    try:
        for user, store in (("ws", mine), ("sq", sql)):
            store.write([
                replace(mem(f"n{i:02d}", user, minutes=i, content=text,
                            kind=list(Kind)[i % len(Kind)]), embedding=vectors[i])
                for i, text in enumerate(texts)
            ])  # fmt: skip
        assert mine.wait_for_working_set("ws", timeout=30)
        engines = {
            user: Engine(settings=make_settings(tmp_path / user), store=store, embedder=embedder)
            for user, store in (("ws", mine), ("sq", sql))
        }
        served = mine._working.calls["served"]
        for turn in range(12):
            query = f"what about the {('deploy', 'invoice', 'budget review')[turn % 3]}?"
            got = engines["ws"].context(query, "ws", now=NOW + timedelta(hours=turn))
            want = engines["sq"].context(query, "sq", now=NOW + timedelta(hours=turn))
            assert got.text == want.text
            assert [m.id for m in got.memories] == [m.id for m in want.memories]
        assert mine._working.calls["served"] > served  # the working set served them
    finally:
        mine.close()
        sql.close()


def test_counted_uses_are_applied_without_reading_a_vector(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's counted uses reach the working set from the columns' counts: no
    memory is built for it, so no vector is read back (a round trip a memory)."""
    import psycopg

    mine, sql = stores
    sql.write(_varied(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    assert mine._working.current("alice").wait_for_index(30)  # the matrix dropped
    counted = ["r001", "r002", "r002", "r003", "nope"]
    sql.record_access("alice", counted, NOW + timedelta(hours=2))
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def spy(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy)
    cache = mine._working.current("alice")
    assert cache is not None
    assert not [q for q in sent if "vector_send" in q]
    monkeypatch.undo()
    want = {m.id: m.access_count for m in sql.get("alice", ["r001", "r002", "r003"])}
    assert want == {"r001": 1, "r002": 2, "r003": 1}
    held = _held_memories(mine)
    assert {m.id: m.access_count for m in held if m.id in want} == want
