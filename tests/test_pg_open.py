"""A PostgreSQL store's open either succeeds or raises an ``EngrainError``, leaving nothing
behind: a bad setting is refused before the schema is migrated or a connection opened; a
pool whose threads cannot start (out of memory, the process's thread limit) is an
``OutOfMemoryError`` with the pool closed; a background filler whose thread cannot start
is left to the next open, and the store opens."""

from __future__ import annotations

from typing import Any

import pytest

from engrain.errors import ConfigError, EngrainError

from .refused_threads import refuse_threads
from .test_pg_fill import _left_to_fill, _limit, _pending

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
import psycopg  # noqa: E402

PostgresStore = postgres.PostgresStore


def _pools(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connection pools the stores opened from here on make (this test's own)."""
    made: list[Any] = []
    base = postgres.pooled.ConnectionPool

    class Recorded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(postgres.pooled, "ConnectionPool", Recorded)
    return made


def _tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {r[0] for r in rows}


def test_a_bad_setting_migrates_nothing_and_leaves_no_pool(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools = _pools(monkeypatch)
    monkeypatch.setenv("ENGRAIN_PG_WORKING_SET", "lots")
    with pytest.raises(ConfigError):
        PostgresStore(pg_url, pool_size=1)
    assert _tables(pg_url) == set()  # the schema was migrated before the setting was read
    assert all(pool.closed for pool in pools)


def test_a_pool_whose_threads_cannot_start_is_an_engrain_error_and_closed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    PostgresStore(pg_url, pool_size=1).close()  # migrated: only the pool is left to open
    pools = _pools(monkeypatch)
    refused = refuse_threads("engrain-worker", monkeypatch)
    with pytest.raises(EngrainError) as caught:
        PostgresStore(pg_url, pool_size=1)
    monkeypatch.undo()
    assert refused and caught.value.code == "out_of_memory"
    assert pools and all(pool.closed for pool in pools)
    PostgresStore(pg_url, pool_size=1).close()  # once threads start again, it opens


def test_a_filler_whose_thread_cannot_start_leaves_the_rows_to_the_next_open(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _limit(monkeypatch)
    _left_to_fill(pg_url)
    refused = refuse_threads("engrain-pg-fill", monkeypatch)
    store = PostgresStore(pg_url, pool_size=1)
    try:
        assert refused and store._filler is None
        assert [m.id for m in store.get("alice", ["r00"])] == ["r00"]  # the store serves
    finally:
        store.close()
    monkeypatch.undo()
    assert _pending(pg_url)  # left to the next open (or ``engrain migrate``)
