"""What only the SQLite store promises: WAL, named migrations, files that outlive the process,
several connections on one file, and the URLs that open it."""

from __future__ import annotations

import logging
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import store as store_package
from engrain.errors import ConfigError, MigrationError, StoreError
from engrain.model import Memory
from engrain.store import (
    MemoryFilter,
    MemoryStore,
    State,
    Store,
    known_schemes,
    open_store,
    sqlite_connection,
    sqlite_rows,
    sqlite_schema,
)
from engrain.store.base import MEMORY_COLUMNS
from engrain.store.sqlite import MIGRATIONS, SQLiteStore

from .conftest import NOW
from .test_store_contract import assert_same, centroid_of, ids, mem, snapshot, unit

#: The built-in schemes, as an unknown scheme's error lists them.
KNOWN = "chroma, chroma+http, chroma+https, memory, postgres, postgresql, sqlite"


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

    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", [*MIGRATIONS, ("900_broken", broken)])
    with pytest.raises(MigrationError, match="900_broken"):
        SQLiteStore(db_path)

    tables = {r[0] for r in _raw(db_path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables
    assert ("900_broken",) not in _raw(db_path, "SELECT name FROM migrations")


def test_upgrading_a_first_version_file_keeps_its_memories(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_schema, "MIGRATIONS", MIGRATIONS[:1])
        old = SQLiteStore(db_path)
        rows = [mem("a", minutes=1), mem("b", minutes=2, vector=(0, 1, 0, 0))]
        first_columns = MEMORY_COLUMNS[:26]  # the row as 001 wrote it
        old._db.executemany(
            f"INSERT INTO memories ({', '.join(first_columns)}) VALUES ({', '.join('?' * 26)})",
            [sqlite_rows.to_row(m)[:26] for m in rows],
        )
        old.close()

    upgraded = SQLiteStore(db_path)

    assert_same(upgraded.query("alice"), rows[::-1])
    assert upgraded.revision("alice") == 0 and upgraded.get_state("alice", "n", "k") is None
    upgraded.write([mem("a", "bob")])  # ids are per user since 002_user_scoped_ids
    assert ids(upgraded.get("alice", ["a"])) == ["a"]
    upgraded.close()


_FIELDS_001 = (
    "user_id TEXT NOT NULL, project TEXT, content TEXT NOT NULL, memory_type TEXT NOT NULL, "
    "kind TEXT NOT NULL, domains TEXT NOT NULL DEFAULT '[]', session_id TEXT, "
    "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, event_at TEXT, key TEXT, "
    "importance REAL NOT NULL, confidence REAL NOT NULL, usefulness REAL NOT NULL, "
    "access_count INTEGER NOT NULL DEFAULT 0, last_accessed_at TEXT, "
    "pinned INTEGER NOT NULL DEFAULT 0, muted INTEGER NOT NULL DEFAULT 0, promoted_at TEXT, "
    "compressed INTEGER NOT NULL DEFAULT 0, compression_source INTEGER NOT NULL DEFAULT 0, "
    "source_session_id TEXT, provenance TEXT NOT NULL DEFAULT '{}', "
    "content_hash TEXT NOT NULL, embedding BLOB"
)


@pytest.mark.parametrize(
    ("applied", "table"),
    [
        (1, f"CREATE TABLE memories ( id TEXT PRIMARY KEY, {_FIELDS_001} )"),
        (
            2,
            f'CREATE TABLE "memories" ( id TEXT NOT NULL, {_FIELDS_001}, '
            "PRIMARY KEY (user_id, id) )",
        ),
    ],
)
def test_migrations_001_and_002_create_the_tables_they_shipped_with(
    applied: int, table: str
) -> None:
    """001 and 002 write their ``memories`` from one column list (``sqlite_schema.py``):
    the table and indexes each leaves are still the ones it shipped with, column for column
    and in order (SQLite keeps the statement; a file made by an older tree is read by this
    one)."""
    db = sqlite3.connect(":memory:")
    for _, step in MIGRATIONS[:applied]:
        step(db)
    made = db.execute("SELECT sql FROM sqlite_master WHERE name = 'memories'").fetchone()[0]
    assert " ".join(made.split()) == table
    indexes = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
    ).fetchall()
    assert [r[0] for r in indexes] == [
        "CREATE INDEX memories_user_key ON memories (user_id, key)",
        "CREATE INDEX memories_user_session ON memories (user_id, session_id)",
        "CREATE INDEX memories_user_updated ON memories (user_id, updated_at)",
    ]


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
    real_to_row = sqlite_rows.to_row

    def to_row(m: Memory) -> tuple[Any, ...]:
        row = real_to_row(m)
        return (*row[:3], object(), *row[4:]) if m.id == "bad" else row  # unbindable content

    monkeypatch.setattr(sqlite_rows, "to_row", to_row)
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


# -- locking and errors ---------------------------------------------------------------------


def test_a_write_waits_for_another_connections_lock_while_threads_use_the_store(
    db_path: Path,
) -> None:
    store = SQLiteStore(db_path)
    store.write([mem("a")])
    assert ids(store.query("alice")) == ["a"]  # the working set is cached now
    other = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    other.execute("UPDATE memories SET importance = 0.5 WHERE user_id = 'alice' AND id = 'a'")
    # as every engrain write does: a working set is kept while its user's revision stands,
    # so a row changed without it is seen only if no read checks in between (a race)
    other.execute("UPDATE revisions SET revision = revision + 1 WHERE user_id = 'alice'")
    errors: list[BaseException] = []

    def guarded(work: Any) -> threading.Thread:
        def run() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(exc)

        return threading.Thread(target=run)

    def reads() -> None:
        for _ in range(20):
            store.query("alice")
            store.count("alice")
            store.record_access("alice", ["a"], NOW)

    threads = [guarded(lambda: store.write([mem("b")])), guarded(reads), guarded(reads)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # let them queue behind the other connection's lock (no assertion on time)
    other.execute("COMMIT")
    other.close()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(ids(store.query("alice"))) == ["a", "b"]
    # the other connection's commit reached the cached working set too
    assert store.query("alice", MemoryFilter(min_importance=0.9)) == store.get("alice", ["b"])
    assert store.get("alice", ["a"])[0].access_count == 40
    store.close()


@pytest.mark.parametrize("deferred", [False, True])
def test_a_read_only_database_gives_store_errors_and_still_reads(
    db_path: Path, deferred: bool, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(db_path, defer_uses=deferred)
    store.write([mem("a")], state=[State("alice", "ns", "k", {"v": 1})])
    # root ignores file modes; query_only makes SQLite answer SQLITE_READONLY the same way
    store._db.execute("PRAGMA query_only = ON")

    with pytest.raises(StoreError, match="read-only"):
        store.write([mem("b")])
    if deferred:  # the default: counts written after the call; their failure is logged
        with caplog.at_level(logging.WARNING, logger="engrain.store.sqlite"):
            store.record_access("alice", ["a"], NOW)
            assert store.get("alice", ["a"])[0].access_count == 0
        assert any("were not written" in r.getMessage() for r in caplog.records)
    else:
        with pytest.raises(StoreError):
            store.record_access("alice", ["a"], NOW)
    with pytest.raises(StoreError):
        store.cache_embeddings("m", {"h": unit(1, 0, 0, 0)})
    with pytest.raises(StoreError):
        store.expire_state("alice", "ns", NOW)
    assert ids(store.query("alice")) == ["a"]
    assert store.states("alice") == [State("alice", "ns", "k", {"v": 1})]
    store._db.execute("PRAGMA query_only = OFF")
    store.write([mem("b")])  # nothing was left half open
    assert sorted(ids(store.query("alice"))) == ["a", "b"]
    store.close()


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


@pytest.mark.parametrize("tail", ["?mode=ro", "?mode=memory&cache=shared", "#x", "?"])
def test_a_sqlite_url_with_a_query_or_fragment_is_refused_and_creates_nothing(
    tmp_path: Path, tail: str
) -> None:
    """SQLite URI options were once read as part of the file name: ``x.db?mode=ro`` opened a
    new, empty store named so (and wrote to it) instead of the caller's ``x.db``."""
    with pytest.raises(ConfigError, match="no query or fragment"):
        open_store(f"sqlite:///{tmp_path / 'x.db'}{tail}")
    assert list(tmp_path.iterdir()) == []


def test_a_data_directory_whose_name_holds_url_characters_is_the_default_stores(
    tmp_path: Path,
) -> None:
    """The default URL escapes its path, so a data directory named ``a#b%c?d`` still holds
    the default store (not a refusal, nor a file cut at the ``#``)."""
    from engrain.config import Settings

    data_dir = tmp_path / "a#b%41c?d"
    data_dir.mkdir()
    store = open_store(Settings(data_dir=data_dir).store_url)
    assert isinstance(store, SQLiteStore)
    assert store.path == data_dir / "engrain.db"
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b%41c?d"]


def test_a_sqlite_urls_path_is_percent_decoded_and_a_nul_refused(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x%3Fmode=ro.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "x?mode=ro.db"
    store.close()
    with pytest.raises(ConfigError, match="NUL"):
        open_store(f"sqlite:///{tmp_path}/%00x.db")


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


def _register(monkeypatch: pytest.MonkeyPatch, *entries: EntryPoint) -> None:
    """Pretend these ``engrain.stores`` entry points are installed."""

    def installed(*, group: str) -> list[EntryPoint]:
        return [e for e in entries if e.group == group]

    monkeypatch.setattr(store_package, "entry_points", installed)


def test_a_scheme_registered_through_an_entry_point_opens_its_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme_store.py").write_text(
        "from engrain.store import MemoryStore\n\n"
        "class AcmeStore(MemoryStore):\n"
        "    def __init__(self, url: str) -> None:\n"
        "        super().__init__()\n"
        "        self.url = url\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _register(monkeypatch, EntryPoint("acme", "acme_store:AcmeStore", "engrain.stores"),
              EntryPoint("other", "acme_store:AcmeStore", "some.other.group"))  # fmt: skip

    store = open_store("acme://eu-west/bucket")

    assert type(store).__name__ == "AcmeStore" and isinstance(store, Store)
    assert store.url == "acme://eu-west/bucket"  # type: ignore[attr-defined]
    assert known_schemes() == [
        "acme",
        "chroma",
        "chroma+http",
        "chroma+https",
        "memory",
        "postgres",
        "postgresql",
        "sqlite",
    ]
    with pytest.raises(ConfigError, match="unknown store URL scheme 'other'"):
        open_store("other://x")


def test_a_registered_backend_that_is_not_a_store_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _register(monkeypatch, EntryPoint("odd", "builtins:str", "engrain.stores"),
              EntryPoint("gone", "no_such_module_xyz:Store", "engrain.stores"),
              EntryPoint("fails", "builtins:int", "engrain.stores"))  # fmt: skip
    with pytest.raises(ConfigError, match="does not return a Store"):
        open_store("odd://x")
    with pytest.raises(StoreError, match="'fails' store backend failed to open"):
        open_store("fails://x")
    with pytest.raises(ConfigError, match="failed to load"):
        open_store("gone://x")


@pytest.mark.parametrize(
    "url",
    ["pwned_mod:run?marker", "pwned_mod.run", "os:system?touch {marker}", "builtins:exec?1"],
)
def test_a_url_never_imports_or_runs_what_it_names(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "pwned_mod.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef run(arg=''):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(ConfigError, match=re.escape(f"known: {KNOWN}")):
        open_store(url.format(marker=marker))

    assert not marker.exists()
    assert "pwned_mod" not in sys.modules


def test_an_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("mysql://db/engrain")
    assert str(caught.value) == (f"unknown store URL scheme 'mysql'; known: {KNOWN}")


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
        "collections:OrderedDict",
        "memory://extra",
        "://x",
    ],
)
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url)


def test_a_migration_another_process_applied_meanwhile_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes opening a new file at once both read "nothing applied"; the second
    then finds each migration applied once it holds the write lock, and skips it (it
    failed with ``table uses already exists``: tests/reliability/test_key_race.py)."""
    path = tmp_path / "new.db"
    SQLiteStore(path).close()  # the other process, first to the lock
    stale = sqlite_connection.pending_migrations
    monkeypatch.setattr(
        sqlite_connection,
        "pending_migrations",
        lambda done, steps, where: stale(set(), steps, where),
    )
    store = SQLiteStore(path)
    try:
        assert store.migrate() == []
    finally:
        store.close()


def test_a_write_after_close_says_the_store_is_closed(tmp_path: Path) -> None:
    """A derived index saved by a job that outlived ``close()`` (or any late write) is told
    the store closed, not SQLite's "Cannot operate on a closed database"."""
    store = SQLiteStore(tmp_path / "c.db")
    store.write([mem("a")])
    stash = store._stash("alice", "ann")
    store.close()
    with pytest.raises(StoreError, match=r"c\.db is closed: nothing was written"):
        stash.write(b"an index")
    with pytest.raises(StoreError, match="is closed"):
        store.write([mem("b")])
    again = SQLiteStore(tmp_path / "c.db")
    assert ids(again.query("alice")) == ["a"]
    again.close()
