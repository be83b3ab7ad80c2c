"""A patch of a memory on PostgreSQL updates its row in place (a HOT update: no new entry
in any index, neither HNSW graph included) when the page has room, which migration
``006_memories_fillfactor`` leaves on every page written after it (``docs/postgres.md``,
"Session 9")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engrain.store import Patch

from .conftest import NOW
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore


def _updates(store: Any) -> tuple[int, int]:
    """The memories table's updates and HOT updates so far, this backend's included (the
    store has one connection: its pending counts are flushed first)."""
    store._read("SELECT pg_stat_force_next_flush()")
    (row,) = store._read(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE relid = 'memories'::regclass"
    )
    return int(row[0]), int(row[1])


def test_the_memories_table_leaves_room_for_updates_in_place(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    try:
        (options,) = store._read("SELECT reloptions FROM pg_class WHERE oid = 'memories'::regclass")
        assert "fillfactor=80" in (options[0] or [])
    finally:
        store.close()


def test_a_patch_is_an_update_in_place(pg_url: str) -> None:
    """Promotions and feedback patch rows that keep every indexed value: each is a HOT
    update (rows of 384 dimensions, in the HNSW graph, ~3 to a page here), again when the
    same row is patched a second time (the page prunes the version the first left)."""
    store = PostgresStore(pg_url, pool_size=1)
    try:
        rng = np.random.default_rng(4)
        vectors = rng.standard_normal((60, 384)).astype(np.float32)
        store.write([mem(f"m{i:02d}", vector=tuple(v)) for i, v in enumerate(vectors)])
        spread = [f"m{i:02d}" for i in range(0, 60, 6)]  # one row of each other page
        before = _updates(store)
        store.write(patches=[Patch("alice", i, {"promoted_at": NOW}) for i in spread[:5]])
        for memory_id in spread[5:]:
            store.write(patches=[Patch("alice", memory_id, {"usefulness": 0.9})])
        store.write(patches=[Patch("alice", spread[0], {"usefulness": 0.2})])
        after = _updates(store)
        assert after[0] - before[0] == 11
        assert after[1] - before[1] == 11
        found = {m.id: m for m in store.get("alice", spread)}
        assert [found[i].promoted_at == NOW for i in spread] == [True] * 5 + [False] * 5
        assert [found[i].usefulness for i in spread[5:]] == [0.9] * 5
        assert found[spread[0]].usefulness == 0.2
    finally:
        store.close()
