"""A working set's access counts (``store/rows.Counts``): counting a use copies no array of
every row until :data:`~engrain.store.rows.COUNTED_MAX` rows have been counted, and every
reader sees the counts a plain pair of arrays would hold (issue 18)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.store import rows as rows_module
from engrain.store.cache import UserCache
from engrain.store.rows import Counts, Rows
from engrain.store.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _memory(i: int, uses: int = 0) -> Memory:
    return Memory(
        id=f"m{i}", user_id="u", content=f"memory number {i}", memory_type=MemoryType.SEMANTIC,
        kind=Kind.FACT, created_at=T0, updated_at=T0, access_count=uses,
        embedding=np.full(4, float(i + 1), dtype=np.float32),
    )  # fmt: skip


def test_counts_equal_plain_arrays_through_counts_folds_and_row_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows_module, "COUNTED_MAX", 7)
    rng = random.Random(3)
    n = 40
    access = np.array([rng.randrange(5) for _ in range(n)], dtype=np.int64)
    last = np.array([rng.randrange(10**6) for _ in range(n)], dtype=np.int64)
    counts, plain_access, plain_last = Counts.of(access.copy(), last.copy()), access, last
    for step in range(60):
        adds = {row: rng.randrange(1, 3) for row in rng.sample(range(len(plain_access)), 4)}
        when = 10**7 + step
        counts, now = counts.added(adds, when)
        for row, add in adds.items():
            plain_access[row] += add
            plain_last[row] = when
        assert now == [int(plain_access[row]) for row in adds]
        if step % 13 == 12:  # rows dropped, then rows added (a forget, an insert)
            keep = np.ones(len(plain_access), dtype=bool)
            keep[rng.sample(range(len(plain_access)), 3)] = False
            counts = counts.kept(keep)
            plain_access, plain_last = plain_access[keep], plain_last[keep]
            more_access, more_last = np.array([1, 2], np.int64), np.array([5, 6], np.int64)
            counts = counts.extended(more_access, more_last)
            plain_access = np.concatenate([plain_access, more_access])
            plain_last = np.concatenate([plain_last, more_last])
        every = list(range(len(plain_access)))
        assert counts.many(every) == (plain_access.tolist(), plain_last.tolist())
        assert [counts.one(row) for row in every] == list(
            zip(plain_access.tolist(), plain_last.tolist(), strict=True)
        )
        got_access, got_last = counts.arrays()
        assert got_access.tolist() == plain_access.tolist()
        assert got_last.tolist() == plain_last.tolist()
        assert len(counts.counted) <= 7


def test_counting_uses_shares_the_arrays_until_enough_rows_were_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows_module, "COUNTED_MAX", 5)
    counts = Counts.of(np.zeros(100, np.int64), np.zeros(100, np.int64))
    first, _ = counts.added({1: 1, 2: 1}, 7)
    second, _ = first.added({2: 1, 3: 1}, 8)
    assert second.access is counts.access and second.last is counts.last  # nothing copied
    assert counts.one(2) == (0, 0) and first.one(2) == (1, 7)  # the earlier ones unchanged
    assert second.one(2) == (2, 8)
    third, _ = second.added({4: 1, 5: 1, 6: 1}, 9)  # 6 rows counted: the arrays copied
    assert third.access is not counts.access and not third.counted
    assert third.many([1, 2, 3, 4, 7]) == ([1, 2, 1, 1, 0], [7, 8, 8, 9, 0])
    assert counts.access.sum() == 0  # the shared arrays were never written


def test_a_working_set_counts_uses_without_copying_its_access_arrays() -> None:
    cache = UserCache([_memory(i) for i in range(50)])
    cache.search(np.ones(4, dtype=np.float32), 3)  # builds the columns
    before = cache.snapshot.arrays
    assert before is not None
    at = T0 + timedelta(days=1)
    cache.touch(["m3", "m4", "m3"], at)
    after = cache.snapshot.arrays
    assert after is not None
    assert after.rows.counts.access is before.rows.counts.access
    assert [m.access_count for m in cache.get(["m3", "m4", "m5"])] == [2, 1, 0]
    assert cache.get(["m3"])[0].last_accessed_at == at
    assert before.rows.counts.one(before.position["m3"])[0] == 0  # published: unchanged


def test_counts_survive_a_fold_and_a_reopen(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows_module, "COUNTED_MAX", 3)
    path = f"{tmp_path}/counts.db"
    store = SQLiteStore(path, ann_min_vectors=None)
    try:
        store.write(upserts=[_memory(i) for i in range(20)])
    finally:
        store.close()
    store = SQLiteStore(path, ann_min_vectors=None)  # the working set read as columns
    try:
        store.search("u", np.ones(4, dtype=np.float32), 2)
        at = T0 + timedelta(days=2)
        for ids in (["m1", "m2"], ["m2", "m3"], ["m4", "m5"], ["m1"]):
            store.record_uses("u", ids, at)
        assert store._cache("u").snapshot.arrays is not None
        held = {m.id: m.access_count for m in store.query("u")}
    finally:
        store.close()
    again = SQLiteStore(path, ann_min_vectors=None)
    try:
        read = {m.id: m.access_count for m in again.query("u")}
    finally:
        again.close()
    expected = {f"m{i}": 0 for i in range(20)} | {"m1": 2, "m2": 2, "m3": 1, "m4": 1, "m5": 1}
    assert held == read == expected


def test_rows_patched_after_counts_keep_the_counts() -> None:
    rows = Rows.of_objects([_memory(i) for i in range(6)])
    rows = rows.touched({2: ("m2", 3), 4: ("m4", 1)}, T0)
    patched = rows.patched({4: _memory(4, uses=9)})
    assert patched.counts.many(range(6))[0] == [0, 0, 3, 0, 9, 0]
