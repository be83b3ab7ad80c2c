"""The deferred counts' writer counts a call's ids in one SQLite step
(``sqlite_uses.count_at_once``): the same rows as one statement per id
(``sqlite_uses.count``), the GIL let go once a chunk rather than once an id, and the thread
of a call that commits them first (the store's lock) still counts id by id."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engrain.store import sqlite_uses
from engrain.store.sqlite import SQLiteStore

from .test_deferred_uses import NOW, USER, _record, _stored, _stored_counts

OTHER = "grace"


def _table(rows: int) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE uses (user_id TEXT NOT NULL, id TEXT NOT NULL, "
               "access_count INTEGER NOT NULL DEFAULT 0, last_accessed_at TEXT, "
               "PRIMARY KEY (user_id, id)) WITHOUT ROWID")  # fmt: skip
    for user in (USER, OTHER):
        db.executemany("INSERT INTO uses VALUES (?, ?, ?, ?)",
                       [(user, f"m{i}", i % 3, None) for i in range(rows)])  # fmt: skip
    return db


def _all(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    return db.execute("SELECT * FROM uses ORDER BY user_id, id").fetchall()


def _statements(db: sqlite3.Connection, run: object) -> int:
    """How many statements SQLite began while ``run()`` ran (one per step of a statement
    executed many times)."""
    seen: list[str] = []
    db.set_trace_callback(seen.append)
    try:
        run()  # type: ignore[operator]
    finally:
        db.set_trace_callback(None)
    return len(seen)


def test_at_once_counts_what_id_by_id_counts_value_by_value() -> None:
    # 600 ids: three chunks (256, 256, 88 padded to 128); some used twice, some of no row
    uses = Counter({f"m{i}": 1 + i % 4 for i in range(0, 1200, 2)})
    uses.update({"gone-1": 2, "gone-2": 1})
    by_id, at_once = _table(1000), _table(1000)
    sqlite_uses.count(by_id, USER, uses, "2026-01-02T00:00:00")
    sqlite_uses.count_at_once(at_once, USER, uses, "2026-01-02T00:00:00")
    assert _all(at_once) == _all(by_id)
    rows = dict(((u, i), (n, at)) for u, i, n, at in _all(at_once))
    assert rows[(USER, "m6")] == (6 % 3 + 1 + 6 % 4, "2026-01-02T00:00:00")  # 0 + 3
    assert rows[(USER, "m5")] == (5 % 3, None)  # not used
    assert rows[(OTHER, "m4")] == (4 % 3, None)  # another user's row of the same id
    assert (USER, "gone-1") not in rows  # an id of no row brings none back


def test_at_once_is_one_statement_a_chunk_where_id_by_id_is_one_an_id() -> None:
    uses = Counter({f"m{i}": 1 for i in range(300)})
    by_id, at_once = _table(400), _table(400)
    assert _statements(by_id, lambda: sqlite_uses.count(by_id, USER, uses, "t")) == 300
    once = _statements(at_once, lambda: sqlite_uses.count_at_once(at_once, USER, uses, "t"))
    assert once == (2 if sqlite_uses._UPDATE_FROM else 300)  # 256 + 44 (padded to 64)
    assert _all(at_once) == _all(by_id)


def test_the_stores_thread_counts_at_once_and_a_call_that_takes_the_lock_id_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ids = _stored(tmp_path)
    assert isinstance(store, SQLiteStore) and store._deferred is not None
    counted: list[str] = []
    for name in ("count", "count_at_once"):  # each still counts: only which ran is noted
        original = getattr(sqlite_uses, name)

        def record(*args: Any, _name: str = name, _original: Any = original) -> None:
            counted.append(_name)
            _original(*args)

        monkeypatch.setattr(sqlite_uses, name, record)
    try:
        with store._lock:  # the store's thread cannot take it: this thread commits them
            store.record_uses(USER, [ids[0]], NOW, _record("c1"))
        store.get(USER, ids)
        assert counted == ["count"]
        store.record_uses(USER, [ids[1], ids[1]], NOW, _record("c2"))
        deadline = time.monotonic() + 60.0  # nothing else takes the lock: its thread does
        while _stored_counts(store.path)[ids[1]] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counted == ["count", "count_at_once"]
        assert _stored_counts(store.path) == {ids[0]: 1, ids[1]: 2, ids[2]: 0}
    finally:
        store.close()
