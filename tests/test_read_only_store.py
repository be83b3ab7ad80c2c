"""A SQLite store on a read-only mount (``store/sqlite_open.py``): it opens read-only,
answers what reading can (list, export, recall, context) and refuses every write with a
``StoreError`` that says why, writing nothing; a write failing because the mount turned
read-only names that; a cache write that fails never fails the call that embedded."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.embed.cache import CachedEmbedder
from engrain.errors import MigrationError, StoreError
from engrain.model import Vector
from engrain.store import sqlite_connection, sqlite_open
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

FACTS = [f"the blue kayak number {i} is stored in shed {i % 4}" for i in range(12)]


def seeded(path: Path, tmp_path: Path) -> None:
    """A store at ``path`` holding FACTS for user ``u``, one context counted, closed."""
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(path),
                    embedder=HashEmbedder())  # fmt: skip
    for fact in FACTS:
        engine.remember(fact, user_id="u", now=NOW)
    engine.context("where is the blue kayak?", user_id="u", now=NOW)
    engine.close()


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def uses_of(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as db:
        return sorted(db.execute("SELECT * FROM uses").fetchall())


def test_a_store_on_a_read_only_mount_answers_reads_and_refuses_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data" / "store.db"
    seeded(path, tmp_path)
    monkeypatch.setattr(sqlite_open, "on_read_only_mount", lambda p: True)
    before, counted = digest(path.parent), uses_of(path)
    store = SQLiteStore(path)
    assert store.read_only
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    assert len(engine.list(user_id="u")) == len(FACTS)
    assert len(list(engine.export_records("u"))) == len(FACTS)
    assert engine.recall("blue kayak shed", user_id="u", now=NOW).memories
    answered = engine.context("where is the blue kayak?", user_id="u", now=NOW)
    assert "blue kayak" in answered.text
    with pytest.raises(StoreError, match="read-only filesystem: nothing was written"):
        engine.remember("a new fact about the red canoe", user_id="u", now=NOW)
    with pytest.raises(StoreError, match="read-only"):
        engine.forget(engine.list(user_id="u")[0].id, user_id="u")
    engine.close()
    assert digest(path.parent) == before  # no -wal, no -shm, the file's bytes unchanged
    assert uses_of(path) == counted  # the context counted nothing


def test_a_read_only_store_needing_a_migration_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM migrations WHERE name = (SELECT max(name) FROM migrations)")
    db.close()
    before = digest(tmp_path)
    monkeypatch.setattr(sqlite_open, "on_read_only_mount", lambda p: True)
    with pytest.raises(MigrationError, match="read-only filesystem and needs migration"):
        SQLiteStore(path)
    assert digest(tmp_path) == before


def test_a_missing_store_on_a_read_only_mount_is_a_store_error(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs read-only")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)],
                      capture_output=True, check=False).returncode:  # fmt: skip
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        with pytest.raises(StoreError, match="cannot open SQLite store"):
            SQLiteStore(mount / "store.db")
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_real_read_only_mount_serves_the_cli_and_context(tmp_path: Path) -> None:
    """The same on a tmpfs remounted read-only (root only): ``engrain list`` and
    ``export`` work, ``context()`` answers, ``remember`` exits with a store error."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                      capture_output=True, check=False).returncode:  # fmt: skip
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        path = mount / "store.db"
        seeded(path, tmp_path)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        url = f"sqlite:///{path}"
        env = {**os.environ, "ENGRAIN_EMBEDDER": "hash", "HOME": str(tmp_path),
               "ENGRAIN_DATA_DIR": str(tmp_path / "data")}  # fmt: skip

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "engrain.cli", "--url", url, *args],
                                  env=env, capture_output=True, text=True, check=False)  # fmt: skip

        listed = cli("list", "--user", "u")
        assert listed.returncode == 0 and listed.stdout.count("blue kayak") == len(FACTS)
        exported = cli("export", "--all-users")
        assert exported.returncode == 0 and exported.stdout.count('"type": "memory"') == len(FACTS)
        refused = cli("remember", "--user", "u", "a fact about the red canoe")
        assert refused.returncode != 0 and "read-only filesystem" in refused.stderr
        assert "Traceback" not in refused.stderr
        engine = Engine(f"sqlite:///{path}", settings=make_settings(tmp_path))
        assert "blue kayak" in engine.context("where is the blue kayak?", user_id="u").text
        engine.close()
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_write_failing_on_a_mount_turned_read_only_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    monkeypatch.setattr(sqlite_open, "on_read_only_mount", lambda p: True)
    message = sqlite_connection.reason(sqlite3.OperationalError("disk I/O error"), store.path)
    assert message == "disk I/O error (the store's filesystem is mounted read-only)"
    store.close()


class FailingCache:
    """A store's embedding cache that can read but not write (a full disk, say)."""

    def __init__(self) -> None:
        self.writes = 0

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        return {}

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        self.writes += 1
        raise StoreError("write to store.db failed: database or disk is full")


def test_a_cache_that_cannot_be_written_leaves_the_embedding_to_go_on() -> None:
    cache = FailingCache()
    embedder = CachedEmbedder(HashEmbedder(), cache)
    vectors = embedder.embed(["the blue kayak", "the red canoe"])
    assert cache.writes == 1
    assert np.allclose(vectors, HashEmbedder().embed(["the blue kayak", "the red canoe"]))


def test_a_read_only_copy_with_a_write_ahead_log_reads_the_rows_only_the_log_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store copied (or mounted) read-only while a writer had rows in its ``-wal`` alone:
    they are read through the log, never left out (``immutable`` would ignore the log)."""
    source = tmp_path / "source"
    source.mkdir()
    path = source / "store.db"
    seeded(path, tmp_path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE memories SET content = 'rewritten in the log' WHERE user_id = 'u'")
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in ("", "-wal"):  # no -shm: a crashed writer's copy, say
        (copy / f"store.db{suffix}").write_bytes(Path(f"{path}{suffix}").read_bytes())
    writer.close()
    monkeypatch.setattr(sqlite_open, "on_read_only_mount", lambda p: True)
    store = SQLiteStore(copy / "store.db")
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    assert {m.content for m in engine.list(user_id="u")} == {"rewritten in the log"}
    engine.close()
