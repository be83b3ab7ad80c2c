"""Counted uses on SQLite go to the narrow ``access`` table (migration ``006_access``), not
into the memories' wide rows; every reader sees a memory's row count plus its counted uses,
and writing or forgetting the memory folds them into its row or drops them (issue 18)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.store import columns as columns_module
from engrain.store import sqlite as sqlite_module
from engrain.store.base import Patch
from engrain.store.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AT = T0 + timedelta(days=3)


def _memory(i: int, uses: int = 0) -> Memory:
    return Memory(
        id=f"m{i}", user_id="u", content=f"memory number {i}", memory_type=MemoryType.SEMANTIC,
        kind=Kind.FACT, created_at=T0, updated_at=T0, access_count=uses,
        embedding=np.full(4, float(i + 1), dtype=np.float32),
    )  # fmt: skip


def _raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    db = tmp_path / "access.db"
    store = SQLiteStore(db, ann_min_vectors=None)
    try:
        store.write(upserts=[_memory(i, uses=2 if i == 1 else 0) for i in range(6)])
    finally:
        store.close()
    return db


def _counts(store: SQLiteStore) -> dict[str, int]:
    return {m.id: m.access_count for m in store.query("u")}


def test_a_counted_use_rewrites_no_memory_row_and_every_reader_sees_it(path: Path) -> None:
    store = SQLiteStore(path, ann_min_vectors=None)
    try:
        store.record_uses("u", ["m1", "m2", "m2"], AT)
        got = {m.id: (m.access_count, m.last_accessed_at) for m in store.get("u", ["m1", "m2"])}
        assert got == {"m1": (3, AT), "m2": (2, AT)}
        assert _counts(store) == {"m0": 0, "m1": 3, "m2": 2, "m3": 0, "m4": 0, "m5": 0}
    finally:
        store.close()
    assert _raw(path, "SELECT id, access_count FROM memories WHERE id IN ('m1', 'm2') "
                      "ORDER BY id") == [("m1", 2), ("m2", 0)]  # fmt: skip
    assert _raw(path, "SELECT id, uses FROM access ORDER BY id") == [("m1", 1), ("m2", 2)]
    again = SQLiteStore(path, ann_min_vectors=None)  # another process: read with the rows
    try:
        assert _counts(again) == {"m0": 0, "m1": 3, "m2": 2, "m3": 0, "m4": 0, "m5": 0}
        assert again.get("u", ["m2"])[0].last_accessed_at == AT
    finally:
        again.close()


def test_a_working_set_loaded_from_its_image_adds_the_counted_uses(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columns_module, "PERSIST_MIN_ROWS", 1)
    first = SQLiteStore(path, ann_min_vectors=None)
    try:
        first.query("u")  # loads from the rows and saves the image
    finally:
        first.close()
    assert _raw(path, "SELECT count(*) FROM derived_indexes WHERE kind = 'columns'") == [(1,)]
    counting = SQLiteStore(path, ann_min_vectors=None)
    try:
        counting.record_uses("u", ["m3", "m1"], AT)  # no write of a row: the image stays valid
    finally:
        counting.close()
    loaded = SQLiteStore(path, ann_min_vectors=None)
    try:
        assert _counts(loaded) == {"m0": 0, "m1": 3, "m2": 0, "m3": 1, "m4": 0, "m5": 0}
        assert loaded._cache("u").snapshot.arrays is not None
    finally:
        loaded.close()


def test_writing_a_memory_folds_its_counted_uses_into_its_row(path: Path) -> None:
    store = SQLiteStore(path, ann_min_vectors=None)
    try:
        store.record_uses("u", ["m1", "m2", "m4"], AT)
        store.write(patches=[Patch("u", "m1", {"pinned": True})])  # read and rewritten
        store.write(upserts=[store.get("u", ["m2"])[0].evolve(content="changed")])
        store.write(deletes=store.get("u", ["m4"]))
        assert _counts(store) == {"m0": 0, "m1": 3, "m2": 1, "m3": 0, "m5": 0}
    finally:
        store.close()
    assert _raw(path, "SELECT id FROM access") == []
    assert _raw(path, "SELECT id, access_count FROM memories WHERE id IN ('m1', 'm2') "
                      "ORDER BY id") == [("m1", 3), ("m2", 1)]  # fmt: skip


def test_a_forgotten_memory_is_not_counted_nor_comes_back_with_its_uses(path: Path) -> None:
    store = SQLiteStore(path, ann_min_vectors=None)
    try:
        store.record_uses("u", ["m5"], AT)
        store.write(deletes=store.get("u", ["m5"]))
        store.record_uses("u", ["m5", "gone"], AT)
        assert _raw(path, "SELECT id FROM access") == []
        store.write(upserts=[_memory(5)])  # the same id again starts from its own count
        assert store.get("u", ["m5"])[0].access_count == 0
    finally:
        store.close()


def test_a_store_of_the_previous_schema_gets_the_table(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
        for name, step in sqlite_module.MIGRATIONS[:5]:
            step(conn)
            conn.execute("INSERT INTO migrations VALUES (?, datetime('now'))", (name,))
    store = SQLiteStore(db, ann_min_vectors=None)
    try:
        store.write(upserts=[_memory(0)])
        store.record_uses("u", ["m0"], AT)
        assert store.get("u", ["m0"])[0].access_count == 1
    finally:
        store.close()
    assert ("006_access",) in _raw(db, "SELECT name FROM migrations")
