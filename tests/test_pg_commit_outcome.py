"""A PostgreSQL write whose connection breaks at its commit: the outcome is found out
(``store/postgres/outcome.py``), so the call succeeds if the write committed, raises
``StoreError`` with nothing written if it did not, and raises ``WriteOutcomeUnknownError``
only when the database cannot say. Broken for real: a proxy between the store and the
test server cuts the connection at the ``COMMIT`` (``tests/pg_proxy.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engrain import StoreError, WriteOutcomeUnknownError
from engrain.store import Patch

from .pg_proxy import Break, PgProxy
from .test_store_contract import mem

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
outcome = pytest.importorskip("engrain.store.postgres.outcome")
PostgresStore = postgres.PostgresStore


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PgProxy]:
    through = PgProxy(pg_url)
    yield through
    through.close()


def _stored(pg_url: str, memory_id: str) -> bool:
    """Whether the memory is in the database, asked on a connection of its own."""
    with psycopg.connect(pg_url, autocommit=True) as db:
        row = db.execute("SELECT 1 FROM memories WHERE id = %s", (memory_id,)).fetchone()
    return row is not None


def _store(proxy: PgProxy, **options: Any) -> Any:
    store = PostgresStore(proxy.url, pool_size=2, fill_in_background=False, **options)
    store.write([mem("before")])  # the schema migrated, the pool warm
    return store


def test_a_write_committed_before_its_connection_broke_succeeds(
    pg_url: str, proxy: PgProxy
) -> None:
    """Before session 20 this raised StoreError although the memory was stored."""
    store = _store(proxy)
    try:
        proxy.arm(Break.AFTER)
        store.write([mem("m1")])  # no error: it committed
        assert proxy.broken.is_set()
        assert _stored(pg_url, "m1")
        assert [m.id for m in store.get("alice", ["m1"])] == ["m1"]
        store.write(patches=[Patch("alice", "m1", {"usefulness": 0.9})])  # serves again
    finally:
        store.close()


def test_a_write_whose_commit_never_arrived_raises_and_writes_nothing(
    pg_url: str, proxy: PgProxy
) -> None:
    store = _store(proxy)
    try:
        proxy.arm(Break.BEFORE)
        with pytest.raises(StoreError) as info:
            store.write([mem("m1")])
        assert not isinstance(info.value, WriteOutcomeUnknownError)
        assert "nothing was written" in info.value.message
        assert not _stored(pg_url, "m1")
        store.write([mem("m2")])
        assert _stored(pg_url, "m2") and not _stored(pg_url, "m1")
    finally:
        store.close()


def test_a_write_still_open_on_the_server_is_fenced_or_unknown(
    pg_url: str, proxy: PgProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server still holds the transaction (its backend has not noticed the broken
    connection): the check waits for it, and past its lock timeout says it cannot tell.
    Once the transaction ends (rolled back here), its token's row is gone and a check
    would fence it."""
    monkeypatch.setattr(outcome, "FENCE_LOCK_TIMEOUT", "300ms")
    store = _store(proxy)
    try:
        proxy.arm(Break.HOLD)
        with pytest.raises(WriteOutcomeUnknownError) as info:
            store.write([mem("m1")])
        assert "may or may not be stored" in info.value.message
        assert info.value.http_status == 503 and info.value.code == "write_outcome_unknown"
    finally:
        store.close()
    proxy.close()  # the held transaction's connection ends: the server rolls it back
    assert not _stored(pg_url, "m1")


def test_a_check_that_cannot_reach_the_server_says_the_outcome_is_unknown(
    pg_url: str, proxy: PgProxy
) -> None:
    store = _store(proxy, connect_timeout=1.0)
    try:
        proxy.arm(Break.AFTER_AND_AWAY)
        with pytest.raises(WriteOutcomeUnknownError, match="Read it back"):
            store.write([mem("m1")])
        assert _stored(pg_url, "m1")  # it had committed: the caller was told it might have
    finally:
        store.close()


def test_a_refused_write_is_not_checked(pg_url: str, proxy: PgProxy) -> None:
    """A statement the server refuses aborts the transaction on a live connection: the
    error is the server's answer, nothing to ask (no token left behind either)."""
    store = _store(proxy)
    try:
        with pytest.raises(StoreError):
            store._transaction(lambda db: db.execute("SELECT * FROM no_such_table"))
        with psycopg.connect(pg_url, autocommit=True) as db:
            (tokens,) = db.execute("SELECT count(*) FROM write_tokens").fetchone()
        assert tokens == 1  # the first write's
    finally:
        store.close()


def test_tokens_are_pruned_after_an_hour(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    try:
        with psycopg.connect(pg_url, autocommit=True) as db:
            old = outcome.new_token(now=1_000_000.0)
            db.execute("INSERT INTO write_tokens (token) VALUES (%s)", (old,))
        store._next_prune = 0.0
        store.write([mem("m1")])
        with psycopg.connect(pg_url, autocommit=True) as db:
            rows = [bytes(r[0]) for r in db.execute("SELECT token FROM write_tokens")]
        assert old not in rows and len(rows) == 1  # m1's own token kept
        assert outcome.prune_below(now=2_000_000.0) > outcome.new_token(now=1_996_000.0)
        assert outcome.prune_below(now=2_000_000.0) < outcome.new_token(now=1_997_000.0)
    finally:
        store.close()
