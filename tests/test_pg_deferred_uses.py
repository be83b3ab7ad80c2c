"""A ``context()``'s counted uses committed after it returns on PostgreSQL
(``ENGRAIN_DEFER_USES``, on unless ``off``; ``store/postgres/deferred.py``, session 29): the
record commits in the call, the counts on the store's thread; every statement of the
process runs after them, another process sees them once committed (``close()`` commits
what waits), a call whose record fails hands none over, and a failed commit of them fails
no caller."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ConfigError, StoreError
from engrain.feedback import CONTEXTS
from engrain.store import State

from .conftest import NOW, make_settings
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
writes = pytest.importorskip("engrain.store.postgres.writes")
PostgresStore = postgres.PostgresStore


def _stored_counts(url: str, user: str = "alice") -> dict[str, int]:
    """The counts in the database, read on a connection of its own (as another process)."""
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT m.id, coalesce(a.access_count, 0) FROM memories m LEFT JOIN access a "
            "ON a.user_id = m.user_id AND a.id = m.id WHERE m.user_id = %s",
            (user,),
        ).fetchall()
    return {str(i): int(n) for i, n in rows}


def _counting_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads that send an access count from now on, one entry a statement."""
    senders: list[int] = []
    execute = psycopg.Cursor.execute

    def one(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        if str(query) == writes.ACCESS_COUNT:
            senders.append(threading.get_ident())
        return execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", one)
    return senders


def _record(key: str) -> list[State]:
    return [State("alice", CONTEXTS, key, {"ids": ["a"]})]


def test_by_default_the_counts_are_committed_after_the_call_not_in_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAIN_DEFER_USES", raising=False)
    store = PostgresStore(pg_url, pool_size=2)
    try:
        store.write([mem("a"), mem("b")])
        senders = _counting_threads(monkeypatch)
        store.record_uses("alice", ["a", "b", "a"], NOW, _record("c1"))
        assert threading.get_ident() not in senders  # not in the call
        assert store.get_state("alice", CONTEXTS, "c1") == {"ids": ["a"]}  # the record is
        # the next statement of the process runs after them, whoever commits them
        assert {m.id: m.access_count for m in store.get("alice", ["a", "b"])} == {"a": 2, "b": 1}
        assert len(senders) == 1
    finally:
        store.close()
    assert _stored_counts(pg_url) == {"a": 2, "b": 1}


def test_off_commits_them_in_the_call_and_a_bad_value_opens_nothing(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAIN_DEFER_USES", "off")
    store = PostgresStore(pg_url, pool_size=2)
    try:
        store.write([mem("a")])
        senders = _counting_threads(monkeypatch)
        store.record_uses("alice", ["a"], NOW, _record("c1"))
        assert senders == [threading.get_ident()]
        assert _stored_counts(pg_url) == {"a": 1}  # committed when the call returned
    finally:
        store.close()
    monkeypatch.setenv("ENGRAIN_DEFER_USES", "later")
    with pytest.raises(ConfigError):
        PostgresStore(pg_url, pool_size=2)


def test_close_commits_what_waits_for_every_other_process(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2, defer_uses=True)
    store.write([mem("a"), mem("b")])
    release = threading.Event()
    deferred = store._deferred
    commit = deferred._commit

    def held(batch: Any) -> None:  # the thread's commit waits until the test lets it
        release.wait()
        commit(batch)

    deferred._commit = held
    store.record_uses("alice", ["a"], NOW, _record("c1"))
    # counts alone (a record would first wait for the counts before it, held here)
    store.record_uses("alice", ["a", "b"], NOW, ())
    assert _stored_counts(pg_url) == {"a": 0, "b": 0}  # another process: not yet
    release.set()
    store.close()
    assert _stored_counts(pg_url) == {"a": 2, "b": 1}
    assert deferred.pending() == 0
    with pytest.raises(StoreError):  # a closed store takes no counts it would not write
        store.record_uses("alice", ["a"], NOW, ())


def test_a_call_whose_record_is_refused_hands_no_counts_over(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url, pool_size=2, defer_uses=True)
    try:
        store.write([mem("a")])
        monkeypatch.setattr(writes, "PUT_STATE", "INSERT INTO no_such_table VALUES (%s)")
        with pytest.raises(StoreError):
            store.record_uses("alice", ["a"], NOW, _record("c1"))
        monkeypatch.undo()
        assert store._deferred.pending() == 0
        assert store.get("alice", ["a"])[0].access_count == 0
    finally:
        store.close()
    assert _stored_counts(pg_url) == {"a": 0}


def test_a_failed_commit_of_the_counts_is_logged_and_fails_no_caller(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(pg_url, pool_size=2, defer_uses=True)
    try:
        store.write([mem("a")])
        monkeypatch.setattr(writes, "ACCESS_COUNT", "SELECT * FROM no_such_table")
        with caplog.at_level(logging.WARNING, logger="engrain.store.postgres.deferred"):
            store.record_uses("alice", ["a"], NOW, _record("c1"))
            store._deferred.settle()  # committed here or by the thread: it fails either way
        monkeypatch.undo()
        assert "were not written" in caplog.text
        assert store.get("alice", ["a"])[0].access_count == 0  # lost, and the read works
        store.record_uses("alice", ["a"], NOW, _record("c2"))
        assert store.get("alice", ["a"])[0].access_count == 1
    finally:
        store.close()


def test_many_calls_counts_in_one_batch_keep_each_calls_moment(pg_url: str) -> None:
    """Counts of several calls and users committed together: each call's own statement in
    order, so an id's last use is the last call that counted it."""
    store = PostgresStore(pg_url, pool_size=2, defer_uses=True)
    later = NOW.replace(year=NOW.year + 1)
    release = threading.Event()
    deferred = store._deferred
    commit = deferred._commit
    batches: list[int] = []

    def held(batch: Any) -> None:
        release.wait()
        batches.append(len(batch))
        commit(batch)

    try:
        store.write([mem("a"), mem("b"), mem("a", "bob")])
        deferred._commit = held
        store.record_uses("alice", ["a", "b"], NOW, ())
        store.record_uses("bob", ["a"], NOW, ())
        store.record_uses("alice", ["a"], later, ())
        release.set()
        got = {m.id: m for m in store.get("alice", ["a", "b"])}
        assert {i: m.access_count for i, m in got.items()} == {"a": 2, "b": 1}
        assert got["a"].last_accessed_at == later and got["b"].last_accessed_at == NOW
        assert store.get("bob", ["a"])[0].access_count == 1
        assert sum(batches) == 3
    finally:
        store.close()


def test_a_context_of_an_engine_counts_its_uses_by_the_next_call(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAIN_DEFER_USES", raising=False)
    store = PostgresStore(pg_url, pool_size=2)
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        for text in ("Deploys go through the staging cluster first.",
                     "The staging cluster runs Postgres 16.",
                     "Always run the migrations before deploying to staging."):  # fmt: skip
            eng.remember(text, "ada", kind="pattern", now=NOW)
        result = eng.context("How do deploys to the staging cluster work?", "ada", now=NOW)
        assert result.memories
        assert store.get_state("ada", "contexts", result.id) is not None
        counts = {m.id: m.access_count for m in store.query("ada")}
        assert {i for i, n in counts.items() if n} == {m.id for m in result.memories}
    finally:
        eng.close()
    assert {i for i, n in _stored_counts(pg_url, "ada").items() if n} == {
        m.id for m in result.memories
    }
