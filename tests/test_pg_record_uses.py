"""A ``context()`` on PostgreSQL whose counts are written in the call
(``ENGRAIN_DEFER_USES=off``, ``PostgresStore(defer_uses=False)``; by default they are
committed after it, ``tests/test_pg_deferred_uses.py``) counts its uses and writes its
record in one transaction and one round trip (``PostgresStore.record_uses``,
``writes.uses_body``): both are written, or, when the server refuses either, neither; the
commit skips the WAL flush only when every document is a context record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import StoreError
from engrain.store import State

from .conftest import NOW, make_settings
from .test_pg_round_trips import syncs  # noqa: F401  (fixture)
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
writes = pytest.importorskip("engrain.store.postgres.writes")
PostgresStore = postgres.PostgresStore


@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:
    """A store that writes each call's counts in the call."""
    store = PostgresStore(pg_url, pool_size=2, defer_uses=False)
    yield store
    store.close()


def _statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement a cursor executes (``execute`` and ``executemany``) from now on."""
    sent: list[str] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def one(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kw)

    def many(self: Any, query: Any, params: Any, *args: Any, **kw: Any) -> Any:
        params = list(params)
        sent.extend(str(query) for _ in params)
        return executemany(self, query, params, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", one)
    monkeypatch.setattr(psycopg.Cursor, "executemany", many)
    return sent


def test_counts_and_record_are_one_round_trip(pg: Any, syncs: list[int]) -> None:  # noqa: F811
    pg.write([mem("a"), mem("b")])
    syncs[0] = 0
    pg.record_uses("alice", ["a", "b"], NOW, [State("alice", "contexts", "c1", {"ids": ["a"]})])
    assert syncs[0] == 1
    assert {m.id: m.access_count for m in pg.get("alice", ["a", "b"])} == {"a": 1, "b": 1}
    assert pg.get_state("alice", "contexts", "c1") == {"ids": ["a"]}


def test_when_the_record_is_refused_nothing_is_counted(
    pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.write([mem("a"), mem("b")])
    # the record's statement fails on the server, after the count was queued before it
    refused = "INSERT INTO no_such_table VALUES (%s, %s, %s, %s, %s)"
    monkeypatch.setattr(writes, "PUT_STATE", refused)
    with pytest.raises(StoreError):
        pg.record_uses("alice", ["a", "b"], NOW, [State("alice", "contexts", "c1", {"n": 1})])
    monkeypatch.undo()
    assert {m.id: m.access_count for m in pg.get("alice", ["a", "b"])} == {"a": 0, "b": 0}
    assert pg.get_state("alice", "contexts", "c1") is None
    pg.record_uses("alice", ["a"], NOW, [State("alice", "contexts", "c1", {"n": 1})])
    assert pg.get("alice", ["a"])[0].access_count == 1  # the pool's connections still work


def test_only_context_records_skip_the_flush_wait(pg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pg.write([mem("a")])
    sent = _statements(monkeypatch)
    pg.record_uses("alice", ["a"], NOW, [State("alice", "contexts", "c1", {"n": 1})])
    assert "SET LOCAL synchronous_commit = off" in sent
    sent.clear()
    pg.record_uses("alice", ["a"], NOW, [State("alice", "tiers", "t", {"n": 1})])
    assert "SET LOCAL synchronous_commit = off" not in sent
    assert any(s.startswith("INSERT INTO state") for s in sent)
    assert pg.get_state("alice", "tiers", "t") == {"n": 1}


def test_a_context_writes_uses_and_record_in_one_transaction(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url, pool_size=2, defer_uses=False)
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        for text in ("Deploys go through the staging cluster first.",
                     "The staging cluster runs Postgres 16.",
                     "Always run the migrations before deploying to staging."):  # fmt: skip
            eng.remember(text, "ada", kind="pattern", now=NOW)
        sent = _statements(monkeypatch)
        result = eng.context("How do deploys to the staging cluster work?", "ada", now=NOW)
        assert result.memories
        assert sent.count("BEGIN") == 1  # counts and record: one write transaction
        assert store.get_state("ada", "contexts", result.id) is not None
        counts = {m.id: m.access_count for m in store.query("ada")}
        assert {i for i, n in counts.items() if n} == {m.id for m in result.memories}
    finally:
        eng.close()
