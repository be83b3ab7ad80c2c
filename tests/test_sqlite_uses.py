"""Counted uses on SQLite live in the narrow ``uses`` table (migration 006, issue 18): an
older file upgrades in place with every count kept, every writer keeps the table in step with
the memories, and uses counted from many threads and processes add up."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain.store import Patch, sqlite_rows, sqlite_schema, sqlite_uses
from engrain.store.base import MEMORY_COLUMNS
from engrain.store.sqlite import MIGRATIONS, SQLiteStore

from .conftest import NOW
from .test_store_contract import assert_same, mem

LATER = NOW + timedelta(hours=1)
#: The columns of a row as migrations 001-005 left them (007 added ``content_tokens``).
_OF_005 = MEMORY_COLUMNS.index("content_tokens")


def _raw(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql, params).fetchall()


def _uses(path: Path) -> dict[tuple[str, str], tuple[int, str | None]]:
    rows = _raw(path, "SELECT user_id, id, access_count, last_accessed_at FROM uses")
    return {(u, i): (n, last) for u, i, n, last in rows}


def test_a_005_file_upgrades_in_place_keeping_every_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    used = replace(mem("a", minutes=1), access_count=7, last_accessed_at=LATER)
    counted = replace(mem("b", minutes=2), access_count=2)  # a count without a time
    timed = replace(mem("c", minutes=3), last_accessed_at=NOW)  # a time without a count
    unused = mem("d", minutes=4)
    bobs = replace(mem("a", "bob"), access_count=1, last_accessed_at=NOW)
    memories = [used, counted, timed, unused, bobs]
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_schema, "MIGRATIONS", MIGRATIONS[:5])
        old = SQLiteStore(path)
        old._db.executemany(  # the row as 001-005 wrote it: the uses in the memory's row
            f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS[:_OF_005])}) "
            f"VALUES ({', '.join('?' * _OF_005)})",
            [sqlite_rows.to_row(m)[:_OF_005] for m in memories],
        )
        old.close()
    rowids = _raw(path, "SELECT user_id, id, rowid FROM memories ORDER BY rowid")

    upgraded = SQLiteStore(path)

    assert ("006_uses",) in _raw(path, "SELECT name FROM migrations")
    columns = {r[1] for r in _raw(path, "PRAGMA table_info(memories)")}
    assert not columns & {"access_count", "last_accessed_at"}
    assert _raw(path, "SELECT user_id, id, rowid FROM memories ORDER BY rowid") == rowids
    assert _uses(path) == {
        ("alice", "a"): (7, LATER.isoformat()),
        ("alice", "b"): (2, None),
        ("alice", "c"): (0, NOW.isoformat()),
        ("alice", "d"): (0, None),
        ("bob", "a"): (1, NOW.isoformat()),
    }
    assert_same(upgraded.get("alice", ["a", "b", "c", "d"]), memories[:4])  # joined
    assert_same(upgraded.query("alice"), memories[3::-1])  # the working set
    assert_same(upgraded.get("bob", ["a"]), [bobs])
    upgraded.record_uses("alice", ["a", "d"], LATER)
    assert [m.access_count for m in upgraded.get("alice", ["a", "d"])] == [8, 1]
    upgraded.close()
    reopened = SQLiteStore(path)
    assert reopened.migrate() == []
    assert [m.access_count for m in reopened.query("alice")] == [1, 0, 2, 8]
    reopened.close()


def test_uses_of_a_forgotten_or_unknown_memory_are_not_written(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    store.write([mem("a"), mem("b")])
    store.record_uses("alice", ["a", "b"], NOW)
    store.write(deletes=[mem("b")])
    assert set(_uses(store.path)) == {("alice", "a")}  # the forgotten memory's uses went too
    store.record_uses("alice", ["b", "nobody", "a"], LATER)
    store.record_uses("bob", ["a"], LATER)  # another user's id: no memory of bob's
    assert _uses(store.path) == {("alice", "a"): (2, LATER.isoformat())}
    store.write([mem("b")])  # the same id again: a new memory, never used
    assert store.get("alice", ["b"])[0].access_count == 0
    assert _uses(store.path)[("alice", "b")] == (0, None)
    store.close()


def test_written_memories_keep_the_uses_they_carry(tmp_path: Path) -> None:
    """An upsert replaces the memory's uses with the ones it carries (an import), a patch
    setting them writes them, and any other patch leaves them as counted."""
    store = SQLiteStore(tmp_path / "e.db")
    store.write([mem("a"), mem("b"), mem("c")])
    store.record_uses("alice", ["a", "b", "c"], NOW)
    store.write(
        [replace(mem("a"), access_count=40, last_accessed_at=LATER)],
        patches=[
            Patch("alice", "b", {"access_count": 9}),
            Patch("alice", "c", {"pinned": True}),
        ],
    )
    assert _uses(store.path) == {
        ("alice", "a"): (40, LATER.isoformat()),
        ("alice", "b"): (9, NOW.isoformat()),
        ("alice", "c"): (1, NOW.isoformat()),
    }
    store.write([mem("a")], patches=[Patch("alice", "b", {"access_count": 0,
                                                           "last_accessed_at": None})])  # fmt: skip
    assert _uses(store.path) == {
        ("alice", "a"): (0, None),
        ("alice", "b"): (0, None),
        ("alice", "c"): (1, NOW.isoformat()),
    }
    got = {m.id: (m.access_count, m.pinned) for m in store.query("alice")}
    assert got == {"a": (0, False), "b": (0, False), "c": (1, True)}
    store.close()


class _Recording:
    """A connection that notes the text of every statement it is asked to run."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.texts: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.texts.append(sql)
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.texts.append(sql)
        return self.db.executemany(sql, *args)


def test_a_count_is_one_statement_text_whatever_its_ids(tmp_path: Path) -> None:
    """Counts of 3 and of 700 ids (past any ``IN (…)`` list's chunk), with different numbers
    of uses per id, run the same statement text (compiled once per connection), and add each
    id's own number: only to the user's existing rows."""
    store = SQLiteStore(tmp_path / "e.db", ann_min_vectors=None)
    store.write([mem(f"m{i}") for i in range(700)] + [mem("m1", "bob")])
    store.close()
    db = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    recording = _Recording(db)
    sqlite_uses.count(recording, "alice", Counter(["m0", "m1", "m1", "gone"]), "t1")  # type: ignore[arg-type]
    sqlite_uses.count(recording, "alice", Counter(f"m{i}" for i in range(700)), "t2")  # type: ignore[arg-type]
    sqlite_uses.count(recording, "alice", Counter(["m2"] * 3 + ["m3"]), "t3")  # type: ignore[arg-type]
    assert len(recording.texts) == 3
    assert len(set(recording.texts)) == 1
    db.close()
    uses = _uses(tmp_path / "e.db")
    assert uses[("alice", "m0")] == (2, "t2")
    assert uses[("alice", "m1")] == (3, "t2")
    assert uses[("alice", "m2")] == (4, "t3")
    assert uses[("alice", "m3")] == (2, "t3")
    assert all(uses[("alice", f"m{i}")] == (1, "t2") for i in range(4, 700))
    assert uses[("bob", "m1")] == (0, None)
    assert ("alice", "gone") not in uses


#: Calls of record_uses by each thread and each process, and the memories each call uses.
CALLS = 25
USED = [f"m{i}" for i in range(8)]


def _count_in_a_process(path: str, calls: int) -> None:
    store = SQLiteStore(path, ann_min_vectors=None)
    for _ in range(calls):
        store.record_uses("alice", USED, NOW)
    store.close()


def test_uses_counted_by_threads_and_processes_add_up(tmp_path: Path) -> None:
    """Four threads sharing one store and two processes with their own count the same
    memories while a fifth thread pins and unpins them (patches rewrite their rows): no
    increment is lost, on the file and in every working set."""
    path = tmp_path / "e.db"
    store = SQLiteStore(path, ann_min_vectors=None)
    store.write([mem(f"m{i}") for i in range(12)])
    assert len(store.working_set("alice")) == 12  # loaded: counts are applied to it too
    spawn = mp.get_context("spawn")
    processes = [spawn.Process(target=_count_in_a_process, args=(str(path), CALLS))
                 for _ in range(2)]  # fmt: skip
    errors: list[BaseException] = []

    def counting() -> None:
        try:
            for _ in range(CALLS):
                store.record_uses("alice", USED, NOW)
        except BaseException as exc:
            errors.append(exc)

    def pinning() -> None:
        try:
            for i in range(CALLS):
                store.write(patches=[Patch("alice", m, {"pinned": i % 2 == 0}) for m in USED])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=counting) for _ in range(4)]
    threads.append(threading.Thread(target=pinning))
    for p in processes:
        p.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in processes:
        p.join(300)
    assert not errors and [p.exitcode for p in processes] == [0, 0]
    want = {f"m{i}": (4 + 2) * CALLS if i < len(USED) else 0 for i in range(12)}
    assert {i: n for (_, i), (n, _) in _uses(path).items()} == want
    assert {m.id: m.access_count for m in store.query("alice")} == want
    assert {m.id: m.access_count for m in store.get("alice", list(want))} == want
    store.close()
    fresh = SQLiteStore(path, ann_min_vectors=None)
    assert {i: m.access_count for i, m in fresh.working_set("alice").items()} == want
    fresh.close()
