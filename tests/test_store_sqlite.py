"""What only the SQLite store promises: WAL, named migrations, files that outlive the process,
several connections on one file, and the URLs that open it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import ConfigError, MigrationError, StoreError
from engrain.model import Memory
from engrain.store import MemoryStore, Store, open_store
from engrain.store import sqlite as sqlite_module
from engrain.store.sqlite import MIGRATIONS, SQLiteStore

from .test_store_contract import assert_same, centroid_of, ids, mem, snapshot, unit


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "engrain.db"


@pytest.fixture
def sqlite_store(db_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(db_path)
    yield store
    store.close()


def _raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


# -- file format and migrations -------------------------------------------------------------


def test_file_is_in_wal_mode(sqlite_store: SQLiteStore, db_path: Path) -> None:
    assert _raw(db_path, "PRAGMA journal_mode") == [("wal",)]


def test_migrations_are_named_recorded_and_run_once(db_path: Path) -> None:
    names = [name for name, _ in MIGRATIONS]
    store = SQLiteStore(db_path)
    assert store.migrate() == []
    store.close()

    reopened = SQLiteStore(db_path)
    assert reopened.migrate() == []
    reopened.close()

    recorded = _raw(db_path, "SELECT name, applied_at FROM migrations ORDER BY name")
    assert [name for name, _ in recorded] == names
    assert all(applied_at for _, applied_at in recorded)
    assert names == sorted(names)


def test_reopening_the_file_keeps_data(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.write([mem("a", minutes=1), mem("b", "bob", vector=None)])
    store.cache_embeddings("model", {"h": unit(1, 2, 3, 4)})
    before = snapshot(store)
    store.close()

    reopened = SQLiteStore(db_path)

    assert snapshot(reopened) == before
    np.testing.assert_array_equal(reopened.cached_embeddings("model", ["h"])["h"], unit(1, 2, 3, 4))
    reopened.close()


def test_unknown_newer_migration_refuses_to_open(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    with sqlite3.connect(db_path) as db:
        db.execute("INSERT INTO migrations VALUES ('999_from_the_future', datetime('now'))")

    with pytest.raises(MigrationError, match="999_from_the_future"):
        SQLiteStore(db_path)


def test_failed_migration_is_rolled_back_and_not_recorded(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    SQLiteStore(db_path).close()

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x)")
        db.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr(sqlite_module, "MIGRATIONS", [*MIGRATIONS, ("900_broken", broken)])
    with pytest.raises(MigrationError, match="900_broken"):
        SQLiteStore(db_path)

    tables = {r[0] for r in _raw(db_path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables
    assert ("900_broken",) not in _raw(db_path, "SELECT name FROM migrations")


def test_upgrading_a_first_version_file_keeps_its_memories(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_module, "MIGRATIONS", MIGRATIONS[:1])
        old = SQLiteStore(db_path)
        rows = [mem("a", minutes=1), mem("b", minutes=2, vector=(0, 1, 0, 0))]
        first_columns = sqlite_module._COLUMNS[:26]  # the row as 001 wrote it
        old._db.executemany(
            f"INSERT INTO memories ({', '.join(first_columns)}) VALUES ({', '.join('?' * 26)})",
            [sqlite_module._to_row(m)[:26] for m in rows],
        )
        old.close()

    upgraded = SQLiteStore(db_path)

    assert_same(upgraded.query("alice"), rows[::-1])
    assert upgraded.revision("alice") == 0 and upgraded.get_state("alice", "n", "k") is None
    upgraded.write([mem("a", "bob")])  # ids are per user since 002_user_scoped_ids
    assert ids(upgraded.get("alice", ["a"])) == ["a"]
    upgraded.close()


def test_opening_an_unusable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(StoreError):
        SQLiteStore(tmp_path / "a-directory")


# -- writes that fail inside the transaction --------------------------------------------------


def test_a_row_the_driver_rejects_rolls_back_the_whole_batch(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_store.write([mem("keep", content="original"), mem("doomed")])
    before = snapshot(sqlite_store)
    real_to_row = sqlite_module._to_row

    def to_row(m: Memory) -> tuple[Any, ...]:
        row = real_to_row(m)
        return (*row[:3], object(), *row[4:]) if m.id == "bad" else row  # unbindable content

    monkeypatch.setattr(sqlite_module, "_to_row", to_row)
    batch = [mem("keep", content="changed"), mem("bad"), mem("new")]

    with pytest.raises(StoreError):
        sqlite_store.write(batch, deletes=[mem("doomed")])

    assert snapshot(sqlite_store) == before


# -- two connections on one file ----------------------------------------------------------------


def test_a_second_connection_sees_new_rows_in_search(db_path: Path) -> None:
    writer, reader = SQLiteStore(db_path), SQLiteStore(db_path)
    writer.write([mem("far", vector=(0, 1, 0, 0))])
    query = unit(1, 0, 0, 0)
    assert [m.id for m, _ in reader.search("alice", query, 1)] == ["far"]  # index built
    np.testing.assert_allclose(centroid_of(reader, "alice"), unit(0, 1, 0, 0))

    writer.write([mem("near", vector=(1, 0, 0, 0))])

    assert [m.id for m, _ in reader.search("alice", query, 1)] == ["near"]
    np.testing.assert_allclose(centroid_of(reader, "alice"), [0.5, 0.5, 0, 0], atol=1e-6)
    writer.close()
    reader.close()


def test_a_second_connection_sees_deletes_in_search(db_path: Path) -> None:
    writer, reader = SQLiteStore(db_path), SQLiteStore(db_path)
    writer.write([mem("near", vector=(1, 0, 0, 0)), mem("far", vector=(0, 1, 0, 0))])
    query = unit(1, 0, 0, 0)
    assert [m.id for m, _ in reader.search("alice", query, 1)] == ["near"]

    writer.write(deletes=[mem("near")])

    assert [m.id for m, _ in reader.search("alice", query, 1)] == ["far"]
    np.testing.assert_allclose(centroid_of(reader, "alice"), unit(0, 1, 0, 0))
    writer.write(deletes=[mem("far")])
    assert reader.search("alice", query, 1) == []
    assert reader.centroid("alice") is None
    writer.close()
    reader.close()


# -- URLs -----------------------------------------------------------------------------------


def test_sqlite_url_with_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///data/rel.db")
    assert isinstance(store, SQLiteStore)
    store.write([mem("a")])
    store.close()
    assert (tmp_path / "data" / "rel.db").is_file()


def test_sqlite_url_with_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "abs.db"
    assert path.is_absolute()
    store = open_store(f"sqlite:///{path}")  # sqlite:////tmp/... : four slashes
    assert isinstance(store, SQLiteStore)
    assert store.path == path
    store.close()
    assert path.is_file()


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


def test_dotted_url_loads_a_third_party_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme_store.py").write_text(
        "from engrain.store import MemoryStore\n\n"
        "class AcmeStore(MemoryStore):\n"
        "    def __init__(self, arg: str = '') -> None:\n"
        "        super().__init__()\n"
        "        self.arg = arg\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with_colon = open_store("acme_store:AcmeStore?region=eu")
    with_dot = open_store("acme_store.AcmeStore")

    assert type(with_colon).__name__ == "AcmeStore"
    assert with_colon.arg == "region=eu"  # type: ignore[attr-defined]
    assert with_dot.arg == ""  # type: ignore[attr-defined]
    assert isinstance(with_dot, Store)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "postgresql://a b c",  # malformed
        "nonsense",
        "sqlite:",
        "no_such_module_xyz:Store",
        "engrain.store:NoSuchClass",
        "collections:OrderedDict",  # constructs, but is not a store
        "engrain.model:Memory",  # needs arguments the URL cannot give
    ],
)
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url)
