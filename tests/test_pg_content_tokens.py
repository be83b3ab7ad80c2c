"""PostgreSQL's ``content_tokens`` (migration ``009_content_tokens``): filled for every row
of a database written before it, written by every write after it, refused by older trees
(``tests/test_content_tokens.py`` holds the rule itself)."""

from __future__ import annotations

from typing import Any

import pytest

from engrain.errors import MigrationError
from engrain.store import Patch
from engrain.tokens import spaced_count

from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graphed = postgres.graphed
schema = postgres.schema
PostgresStore = postgres.PostgresStore

#: An older tree's migrations, with 015's ``graphed`` flags, which today's writes set
#: (applied out of order: each migration stands on its own).
_BEFORE = [
    *schema.MIGRATIONS[: [n for n, _ in schema.MIGRATIONS].index("009_content_tokens")],
    (graphed.MIGRATION, dict(schema.MIGRATIONS)[graphed.MIGRATION]),
]


def _stored(store: Any) -> dict[str, int | None]:
    return dict(store._read("SELECT id, content_tokens FROM memories"))


def test_a_database_before_009_is_filled_and_then_refused_by_older_trees(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = [mem(f"m{i:02d}", content=f"note {i}: {'ünïcode ' * i}deploy") for i in range(30)]
    store = PostgresStore(pg_url, pool_size=1)
    try:
        store.write(memories)
        with store._pool.connection() as db:  # the rows as a tree before 009 left them
            db.execute("ALTER TABLE memories DROP COLUMN content_tokens")
            db.execute("DELETE FROM migrations WHERE name = '009_content_tokens'")
    finally:
        store.close()
    upgraded = PostgresStore(pg_url, pool_size=1)
    try:
        assert _stored(upgraded) == {m.id: spaced_count(m.content) for m in memories}
        upgraded.write(patches=[Patch("alice", "m03", {"content": "rewritten"})])
        assert _stored(upgraded)["m03"] == spaced_count("rewritten")
        for memory in [*upgraded.get("alice", ["m03", "m04"]), *upgraded.query("alice")]:
            assert memory.content_tokens == spaced_count(memory.content)
    finally:
        upgraded.close()
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(postgres.postings, "CURRENT", postgres.postings.LEGACY)
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(pg_url, pool_size=1)


def test_the_working_set_carries_the_counts(pg_url: str) -> None:
    memories = [mem(f"w{i:02d}", content=f"working set note {i}") for i in range(25)]
    store = PostgresStore(pg_url, pool_size=2, working_set_min=20)
    try:
        store.write(memories)
        assert store.wait_for_working_set("alice", timeout=30)
        store.write(patches=[Patch("alice", "w01", {"content": "a changed note"})])
        found = {m.id: m for m, _ in store.lexical_search("alice", "note", 50)}
        assert found and all(m.content_tokens == spaced_count(m.content) for m in found.values())
        assert found["w01"].content_tokens == spaced_count("a changed note")
    finally:
        store.close()


def test_a_large_table_is_left_to_fill_after_the_migration(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = [mem(f"b{i:02d}", content=f"batch note {i}") for i in range(12)]
    store = PostgresStore(pg_url, pool_size=1)
    try:
        store.write(memories)
        with store._pool.connection() as db:
            db.execute("ALTER TABLE memories DROP COLUMN content_tokens")
            db.execute("DELETE FROM migrations WHERE name = '009_content_tokens'")
    finally:
        store.close()
    monkeypatch.setattr(schema, "FILL_IN_MIGRATION_MAX", 5)
    upgraded = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    try:
        assert set(_stored(upgraded).values()) == {None}  # left: counted at call time
        assert all(m.content_tokens is None for m in upgraded.get("alice", ["b01", "b02"]))
        upgraded.write(patches=[Patch("alice", "b01", {"content": "rewritten first"})])
        assert _stored(upgraded)["b01"] == spaced_count("rewritten first")
        assert upgraded.fill_content_tokens(batch=5) == 11
        assert _stored(upgraded) == {
            m.id: spaced_count("rewritten first" if m.id == "b01" else m.content) for m in memories
        }
        assert upgraded.fill_content_tokens() == 0
    finally:
        upgraded.close()
