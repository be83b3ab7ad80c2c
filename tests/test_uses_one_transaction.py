"""A ``context()`` on SQLite whose counts are written in the call (``ENGRAIN_DEFER_USES=off``,
``SQLiteStore(defer_uses=False)``) counts its uses and records itself in one transaction
(issue 18, session 10: one commit instead of two per call, ``recall/uses.py`` and
``SQLiteStore.record_uses``): both are written, or, when the transaction fails, neither.
By default the counts follow the call on the store's thread (``tests/test_deferred_uses.py``)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import EngrainError
from engrain.feedback import CONTEXTS
from engrain.recall import uses
from engrain.store import MemoryStore
from engrain.store.base import State
from engrain.store.sqlite import SQLiteStore
from tests.conftest import NOW, make_settings

USER = "ada"


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    store = SQLiteStore(tmp_path / "t.db", defer_uses=False)
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    for text in ("Deploys go through the staging cluster first.",
                 "The staging cluster runs Postgres 16.",
                 "Always run the migrations before deploying to staging."):  # fmt: skip
        eng.remember(text, USER, kind="pattern", now=NOW)
    return eng


def _counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(
            "SELECT m.id, coalesce(u.access_count, 0) FROM memories m LEFT JOIN uses u "
            "ON u.user_id = m.user_id AND u.id = m.id WHERE m.user_id = ?", (USER,)
        ))  # fmt: skip


def _records(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT key FROM state WHERE user_id = ? AND namespace = ?",
                             (USER, CONTEXTS))  # fmt: skip
        return [row[0] for row in found]


def test_a_context_counts_its_uses_and_records_itself_in_one_transaction(
    engine: Engine,
) -> None:
    store = engine.store
    assert isinstance(store, SQLiteStore)
    before = _counts(store.path)
    begun: list[str] = []
    caller = threading.get_ident()  # the checkpointer's thread may begin a log meanwhile

    def seen(sql: str) -> None:
        if sql.startswith("BEGIN") and threading.get_ident() == caller:
            begun.append(sql)

    store._db.set_trace_callback(seen)
    result = engine.context("How do deploys to the staging cluster work?", USER, now=NOW)
    store._db.set_trace_callback(None)
    assert result.memories
    assert len(begun) == 1  # counts and record: one write transaction
    after = _counts(store.path)
    assert {i for i in after if after[i] != before[i]} == {m.id for m in result.memories}
    assert all(after[m.id] == before[m.id] + 1 for m in result.memories)
    assert _records(store.path) == [result.id]


def test_when_the_transaction_fails_neither_counts_nor_record_are_written(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = engine.store
    assert isinstance(store, SQLiteStore)
    before = _counts(store.path)
    real = store._db

    class Failing:
        """The store's connection, failing the write of the counts (after the record)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("UPDATE uses SET access_count"):
                raise sqlite3.OperationalError("disk I/O error")
            return real.execute(sql, *args)

        def executemany(self, sql: str, *args: Any) -> Any:
            if sql.startswith("UPDATE uses SET access_count"):
                raise sqlite3.OperationalError("disk I/O error")
            return real.executemany(sql, *args)

    monkeypatch.setattr(store, "_db", Failing())
    with pytest.raises(EngrainError):
        engine.context("How do deploys to the staging cluster work?", USER, now=NOW)
    monkeypatch.setattr(store, "_db", real)
    assert _counts(store.path) == before
    assert _records(store.path) == []


def test_the_in_memory_store_writes_the_record_with_the_counts() -> None:
    store = MemoryStore()
    eng = Engine(store=store, embedder=HashEmbedder())
    eng.remember("The staging cluster runs Postgres 16.", USER, kind="fact", now=NOW)
    memories = store.query(USER)
    promoted = uses.count(store, USER, memories, NOW, context_id="c1")
    assert promoted == []
    assert [s.key for s in store.states(USER, CONTEXTS)] == ["c1"]
    assert [m.access_count for m in store.query(USER)] == [1]


def test_record_uses_refuses_a_document_that_is_not_json_before_counting(
    engine: Engine,
) -> None:
    store = engine.store
    assert isinstance(store, SQLiteStore)
    before = _counts(store.path)
    bad = State(USER, CONTEXTS, "x", {"at": object()})
    with pytest.raises(EngrainError):
        store.record_uses(USER, list(before), NOW, [bad])
    assert _counts(store.path) == before and _records(store.path) == []
