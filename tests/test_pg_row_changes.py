"""Every write of a PostgreSQL user's memories stamps the rows it changed with the revision
it bumps (``row_changes``, migration ``008_row_changes``): what a working set in process
reads as a delta (``store/postgres/working.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from engrain.errors import MigrationError, ValidationError
from engrain.store.base import Patch

from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graphed = postgres.graphed
schema = postgres.schema
working = postgres.working
PostgresStore = postgres.PostgresStore

#: An older tree's migrations, with 009's ``content_tokens`` column, which today's writes
#: fill (applied out of order: each migration stands on its own).
_BEFORE = [
    *schema.MIGRATIONS[: [n for n, _ in schema.MIGRATIONS].index("008_row_changes")],
    ("009_content_tokens", schema._m009_content_tokens),
    (graphed.MIGRATION, dict(schema.MIGRATIONS)[graphed.MIGRATION]),  # the ``graphed`` flags
]


def _changes(store: Any, user: str = "alice") -> dict[str, tuple[int, bool]]:
    rows = store._read("SELECT id, revision, gone FROM row_changes WHERE user_id = %s", (user,))
    return {r[0]: (int(r[1]), bool(r[2])) for r in rows}


@pytest.fixture
def store(pg_url: str) -> Any:
    opened = PostgresStore(pg_url, pool_size=2)
    yield opened
    opened.close()


def test_each_write_stamps_its_rows_with_its_revision(store: Any) -> None:
    a, b, c = mem("a", content="one"), mem("b", content="two"), mem("c", content="three")
    store.write([a, b, c])
    first = store.revision("alice")
    assert _changes(store) == {"a": (first, False), "b": (first, False), "c": (first, False)}
    store.write(patches=[Patch("alice", "b", {"pinned": True})], deletes=[c])
    second = store.revision("alice")
    assert second == first + 1
    assert _changes(store) == {"a": (first, False), "b": (second, False), "c": (second, True)}
    store.write(patches=[Patch("alice", "nobody", {"pinned": True})])  # no row: no stamp
    assert set(_changes(store)) == {"a", "b", "c"}
    store.write([c])  # written again: no longer gone
    assert _changes(store)["c"] == (store.revision("alice"), False)


def test_counted_uses_and_other_users_stamp_nothing_of_alice(store: Any) -> None:
    store.write([mem("a", content="one"), mem("x", "bob", content="two")])
    before = _changes(store)
    store.record_uses("alice", ["a"], mem("a").created_at)
    assert _changes(store) == before  # no revision, no stamp: counts travel apart
    assert set(_changes(store, "bob")) == {"x"}


def test_a_rolled_back_write_stamps_nothing(store: Any) -> None:
    store.write([mem("a", content="one")])
    before = _changes(store)
    with pytest.raises(ValidationError):  # the patch's value is refused inside the write
        store.write([mem("b", content="two")], patches=[Patch("alice", "a", {"pinned": []})])
    assert _changes(store) == before


def test_a_populated_database_migrates_and_older_trees_refuse_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = [mem(f"m{i:02d}", content=f"note {i} deploy") for i in range(30)]
    with monkeypatch.context() as patch:  # an older tree: no table, no stamps
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        patch.setattr(postgres.writes, "_stamp_changes", lambda cur, changed: None)
        old = PostgresStore(pg_url, pool_size=1)
        try:
            old.write(memories)
        finally:
            old.close()
    monkeypatch.setattr(working, "RELOAD_PAUSE", 0.0)
    new = PostgresStore(pg_url, pool_size=2, working_set_min=20)
    try:
        assert _changes(new) == {}  # rows older than the migration carry no stamp
        assert new.wait_for_working_set("alice", timeout=30)
        new.write(deletes=[memories[0]])
        found = [m.id for m, _ in new.lexical_search("alice", "deploy", 50)]
        assert sorted(found) == [m.id for m in memories[1:]]
        assert new._working.current("alice") is not None  # brought up to date, not reloaded
        assert _changes(new) == {memories[0].id: (new.revision("alice"), True)}
    finally:
        new.close()
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(pg_url, pool_size=1)
