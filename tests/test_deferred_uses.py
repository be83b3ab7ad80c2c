"""A ``context()``'s counted uses written after it returns on SQLite (``ENGRAIN_DEFER_USES``,
``store/sqlite_deferred.py``, issue 18, session 25; the default since session 26, ``off``
writes them in the call): the context's record commits in the call, the counts on the
store's thread; every statement of the process runs after them, a call that fails hands
none over, and a failed commit of them fails no caller."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ConfigError, StoreError
from engrain.feedback import CONTEXTS
from engrain.store.base import State
from engrain.store.sqlite import SQLiteStore, deferred_uses
from engrain.store.sqlite_deferred import StoreLock
from engrain.store.sqlite_open import BUSY_TIMEOUT
from tests.conftest import NOW, make_settings

USER = "ada"
TEXTS = (
    "Deploys go through the staging cluster first.",
    "The staging cluster runs Postgres 16.",
    "Always run the migrations before deploying to staging.",
)


def _engine(path: Path, defer: bool = True) -> Engine:
    store = SQLiteStore(path / "t.db", defer_uses=defer)
    return Engine(settings=make_settings(path), store=store, embedder=HashEmbedder())


def _stored_counts(path: Path) -> dict[str, int]:
    """The counts in the file, read by a connection of its own (as another process)."""
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(
            "SELECT m.id, coalesce(u.access_count, 0) FROM memories m LEFT JOIN uses u "
            "ON u.user_id = m.user_id AND u.id = m.id WHERE m.user_id = ?", (USER,)
        ))  # fmt: skip


def _stored_records(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT key FROM state WHERE user_id = ? AND namespace = ?",
                             (USER, CONTEXTS))  # fmt: skip
        return {row[0] for row in found}


def _record(key: str) -> list[State]:
    return [State(USER, CONTEXTS, key, {"ids": [], "at": NOW.isoformat()})]


def _stored(tmp_path: Path) -> tuple[SQLiteStore, list[str]]:
    eng = _engine(tmp_path)
    ids = [str(eng.remember(text, USER, kind="pattern", now=NOW).memory_id) for text in TEXTS]
    store = eng.store
    assert isinstance(store, SQLiteStore)
    return store, ids


def test_the_record_commits_in_the_call_and_the_counts_once_the_store_is_next_taken(
    tmp_path: Path,
) -> None:
    store, ids = _stored(tmp_path)
    at = NOW + timedelta(hours=1)
    with store._lock:  # the store's thread cannot take it: the counts wait
        store.record_uses(USER, [ids[0], ids[1], ids[1]], at, _record("c1"))
        # another process already finds the record, not yet the counts
        assert _stored_records(store.path) == {"c1"}
        assert _stored_counts(store.path) == {ids[0]: 0, ids[1]: 0, ids[2]: 0}
    # any statement of this process comes after them: this read commits them first
    got = {m.id: m for m in store.get(USER, ids)}
    assert {i: m.access_count for i, m in got.items()} == {ids[0]: 1, ids[1]: 2, ids[2]: 0}
    assert got[ids[0]].last_accessed_at == at
    assert got[ids[2]].last_accessed_at is None
    assert _stored_counts(store.path) == {ids[0]: 1, ids[1]: 2, ids[2]: 0}
    store.close()


def test_the_working_set_sees_the_counts_of_every_call_that_returned(tmp_path: Path) -> None:
    store, ids = _stored(tmp_path)
    with store._lock:
        for n in range(3):
            store.record_uses(USER, [ids[0]], NOW + timedelta(minutes=n), _record(f"c{n}"))
    # the working set (counts as columns) is read after the waiting counts commit
    assert [m.access_count for m in store.get(USER, [ids[0]])] == [3]
    found = {m.id: m for m in store.query(USER)}
    assert found[ids[0]].access_count == 3
    assert found[ids[0]].last_accessed_at == NOW + timedelta(minutes=2)
    assert found[ids[1]].access_count == 0
    store.close()


def test_close_commits_what_waits(tmp_path: Path) -> None:
    store, ids = _stored(tmp_path)
    with store._lock:
        store.record_uses(USER, ids, NOW, _record("c1"))
        assert _stored_counts(store.path) == dict.fromkeys(ids, 0)
    store.close()
    assert _stored_counts(store.path) == dict.fromkeys(ids, 1)


def test_the_stores_thread_commits_them_with_nothing_else_asked_of_the_store(
    tmp_path: Path,
) -> None:
    store, ids = _stored(tmp_path)
    store.record_uses(USER, [ids[2]], NOW, _record("c1"))
    # nothing of this process touches the store: only its thread can commit them
    deadline = time.monotonic() + 60.0
    while _stored_counts(store.path)[ids[2]] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stored_counts(store.path) == {ids[0]: 0, ids[1]: 0, ids[2]: 1}
    store.close()


def test_a_call_whose_record_fails_hands_no_counts_over(tmp_path: Path) -> None:
    store, ids = _stored(tmp_path)
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the file's write lock
    store._db.execute("PRAGMA busy_timeout=0")
    with pytest.raises(StoreError):
        store.record_uses(USER, ids, NOW, _record("c1"))
    other.execute("ROLLBACK")
    other.close()
    store.close()
    assert _stored_counts(store.path) == dict.fromkeys(ids, 0)
    assert _stored_records(store.path) == set()


def test_a_failed_commit_of_the_counts_loses_them_and_fails_no_caller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, ids = _stored(tmp_path)
    other = sqlite3.connect(store.path, isolation_level=None)
    # whichever thread takes the store's lock first (this one's read, the store's thread,
    # the checkpointer's) tries the commit and logs its failure
    with caplog.at_level(logging.WARNING, logger="engrain.store.sqlite"):
        with store._lock:
            store.record_uses(USER, [ids[0]], NOW, _record("c1"))
            other.execute("BEGIN IMMEDIATE")  # the counts' commit will find the file locked
            store._db.execute("PRAGMA busy_timeout=0")
        got = store.get(USER, [ids[0]])  # commits them first: refused, logged, not raised
    assert [m.access_count for m in got] == [0]
    assert any("were not written" in r.getMessage() for r in caplog.records)
    other.execute("ROLLBACK")
    other.close()
    # the store's busy timeout back: left at 0, the next commit failed whenever the
    # checkpointer's RESTART pass (after c2's record) held the write lock at that moment
    store._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
    store.record_uses(USER, [ids[1]], NOW, _record("c2"))
    store.close()
    assert _stored_counts(store.path) == {ids[0]: 0, ids[1]: 1, ids[2]: 0}
    assert _stored_records(store.path) == {"c1", "c2"}


def test_context_feedback_and_counts_with_the_counts_deferred(tmp_path: Path) -> None:
    eng = _engine(tmp_path)
    for text in TEXTS:
        eng.remember(text, USER, kind="pattern", now=NOW)
    ctx = eng.context("How do deploys reach staging?", USER, token_budget=400, now=NOW)
    shown = [m.id for m in ctx.memories]
    assert shown
    # feedback reads the record the call committed; get() sees the call's counts
    result = eng.feedback(USER, ctx.context_id, helpful=True)
    assert set(result.usefulness) == set(shown)
    assert all(m.access_count == 1 for m in eng.store.get(USER, shown))
    eng.close()
    counts = _stored_counts(tmp_path / "t.db")
    assert {i: n for i, n in counts.items() if i in shown} == dict.fromkeys(shown, 1)
    assert sum(counts.values()) == len(shown)


_EXIT_UNCLOSED = """
import sys
import threading
import time
from datetime import datetime, timezone
from engrain.store.base import State
from engrain.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1], defer_uses=True)
at = datetime(2026, 1, 1, tzinfo=timezone.utc)
with store._lock:  # the store's thread cannot commit them before the exit
    store.record_uses("ada", sys.argv[2:], at, [])
"""


def test_an_interpreter_that_exits_without_closing_commits_them(tmp_path: Path) -> None:
    store, ids = _stored(tmp_path)
    store.close()
    subprocess.run([sys.executable, "-c", _EXIT_UNCLOSED, str(store.path), *ids], check=True)
    assert _stored_counts(store.path) == dict.fromkeys(ids, 1)


def test_on_by_default_the_variable_turns_it_off_and_a_bad_value_is_refused() -> None:
    assert deferred_uses({}) is True
    assert deferred_uses({"ENGRAIN_DEFER_USES": " "}) is True
    assert deferred_uses({"ENGRAIN_DEFER_USES": "on"}) is True
    assert deferred_uses({"ENGRAIN_DEFER_USES": "off"}) is False
    assert deferred_uses({"ENGRAIN_DEFER_USES": "No"}) is False
    with pytest.raises(ConfigError):
        deferred_uses({"ENGRAIN_DEFER_USES": "later"})


@pytest.mark.parametrize("value", [None, "off"])
def test_a_store_opened_without_the_setting_writes_the_counts_after_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("ENGRAIN_DEFER_USES", raising=False)
    else:
        monkeypatch.setenv("ENGRAIN_DEFER_USES", value)
    store = SQLiteStore(tmp_path / "t.db")
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    ids = [str(eng.remember(text, USER, kind="pattern", now=NOW).memory_id) for text in TEXTS]
    with store._lock:  # the store's thread cannot take it: deferred counts wait
        store.record_uses(USER, [ids[0]], NOW, _record("c1"))
        assert _stored_records(store.path) == {"c1"}  # the record: in the call either way
        waiting = _stored_counts(store.path)[ids[0]]
    assert waiting == (0 if value is None else 1)
    assert [m.access_count for m in store.get(USER, [ids[0]])] == [1]
    assert _stored_counts(store.path)[ids[0]] == 1
    eng.close()


def test_the_stores_lock_commits_first_only_when_a_thread_takes_it_first() -> None:
    lock, runs = StoreLock(), list[int]()
    lock.first = lambda: runs.append(threading.get_ident())
    with lock, lock:  # the second take is inside a hold that began with the first
        pass
    assert runs == [threading.get_ident()]
    other = threading.Thread(target=lambda: lock.acquire() and lock.release())
    other.start()
    other.join()
    assert len(runs) == 2 and runs[1] != runs[0]


def test_a_first_taker_hook_that_raises_leaves_the_lock_free() -> None:
    lock = StoreLock()

    def fail() -> None:
        raise RuntimeError("interrupted")

    lock.first = fail
    with pytest.raises(RuntimeError):
        lock.acquire()
    lock.first = None
    free: list[bool] = []
    other = threading.Thread(target=lambda: free.append(lock.acquire(blocking=False)))
    other.start()
    other.join()
    assert free == [True]


def test_a_store_whose_thread_cannot_start_opens_and_writes_the_counts_in_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory for a thread's stack (or at the process's thread limit), the store's
    open raised ``RuntimeError`` (not an ``EngrainError``) from the counts' thread; it
    opens, and each call writes its own counts, as with ``ENGRAIN_DEFER_USES=off``."""
    start = threading.Thread.start

    def no_uses_thread(self: threading.Thread) -> None:
        if self.name == "engrain-uses":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", no_uses_thread)
    store, ids = _stored(tmp_path)
    monkeypatch.undo()
    with store._lock:  # nothing else of this process could commit waiting counts
        store.record_uses(USER, [ids[0], ids[0]], NOW, _record("c1"))
        assert _stored_counts(store.path) == {ids[0]: 2, ids[1]: 0, ids[2]: 0}
    store.close()
