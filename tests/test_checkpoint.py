"""WAL checkpoints run on the checkpointer's thread, never inside a caller's commit."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from engrain.model import Kind, Memory, MemoryType
from engrain.store import checkpoint
from engrain.store.checkpoint import Checkpointer
from engrain.store.sqlite import SQLiteStore

NOW = datetime(2026, 1, 15, 12, tzinfo=UTC)


def _memory(i: int) -> Memory:
    vector = np.random.default_rng(i).standard_normal(384).astype(np.float32)
    return Memory(
        id=f"m{i}", user_id="u", content=f"memory number {i} about checkpoints",
        memory_type=MemoryType.SEMANTIC, kind=Kind.FACT, embedding=vector / np.linalg.norm(vector),
        created_at=NOW, updated_at=NOW,
    )  # fmt: skip


def _until(condition: object, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.02)
    return False


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("engrain-checkpoint")}


def test_the_store_never_checkpoints_inside_a_commit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    try:
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    finally:
        store.close()


def test_commits_are_checkpointed_by_the_thread_and_every_row_stays(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    store = SQLiteStore(path)
    try:
        for start in range(0, 400, 40):
            store.write(upserts=[_memory(i) for i in range(start, start + 40)])
            store.record_access("u", [f"m{i}" for i in range(start, start + 40)], NOW)
        assert _until(lambda: store._checkpoints.passes > 0)
        thread = store._checkpoints._thread
        assert thread is not None and thread.name in _threads()
    finally:
        store.close()
    assert not thread.is_alive()  # close stops the thread
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM memories").fetchone() == (400,)
        used = db.execute("SELECT count(*), sum(access_count) FROM uses").fetchone()
        assert used == (400, 400)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_checkpoint_reloads_no_other_store_s_working_set(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    writer, reader = SQLiteStore(path), SQLiteStore(path)
    try:
        writer.write(upserts=[_memory(i) for i in range(50)])
        assert len(reader.query("u")) == 50
        cache = reader._caches["u"]
        passes = writer._checkpoints.passes
        writer._checkpoints.committed()  # one more pass with nothing committed since
        assert _until(lambda: writer._checkpoints.passes > passes)
        assert len(reader.query("u")) == 50
        assert reader._caches["u"] is cache  # a checkpoint is not a commit
    finally:
        writer.close()
        reader.close()


def test_a_removed_file_is_not_created_again(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    checkpoints = Checkpointer(path, interval=0.01)
    checkpoints.committed()
    checkpoints.close()
    assert not path.exists()
    assert checkpoints.passes == 0


class _ReaderLeaves:
    """The checkpointer's connection; a reader that held the ``PASSIVE`` pass back (the
    frames committed after its snapshot stay in the log) ends right after that pass, as
    under a steady ingest, where the log moves on during every pass."""

    def __init__(self, db: sqlite3.Connection, reader: sqlite3.Connection) -> None:
        self._db, self._reader = db, reader

    def execute(self, sql: str) -> sqlite3.Cursor:
        cursor = self._db.execute(sql)
        if "PASSIVE" in sql:
            cursor.fetchall()
            self._reader.execute("COMMIT")
        return cursor


def _log_file(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    path = tmp_path / "w.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t (b BLOB)")
    for _ in range(20):
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
    return path, writer


def test_a_pass_that_missed_frames_still_restarts_the_log(tmp_path: Path) -> None:
    # Without the RESTART pass the log is not complete when the next writer begins, so
    # the commits after it extend the file (and a durable one's fdatasync waits for the
    # filesystem's journal) until some later pass happens to find the log still.
    path, writer = _log_file(tmp_path)
    reader = sqlite3.connect(path, isolation_level=None)
    checkpoints = Checkpointer(path)
    db = checkpoint.connect(path)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (20,)
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
        checkpoints._checkpoint(_ReaderLeaves(db, reader))  # type: ignore[arg-type]
        assert checkpoints.restarts == 1
        size = Path(f"{path}-wal").stat().st_size
        for _ in range(3):
            writer.execute("INSERT INTO t VALUES (randomblob(3000))")
        assert Path(f"{path}-wal").stat().st_size == size  # overwritten, not extended
    finally:
        db.close()
        reader.close()
        writer.close()
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT count(*) FROM t").fetchone() == (24,)
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_reader_in_the_log_keeps_it_and_its_snapshot(tmp_path: Path) -> None:
    path, writer = _log_file(tmp_path)
    reader = sqlite3.connect(path, isolation_level=None)
    checkpoints = Checkpointer(path)
    db = checkpoint.connect(path)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (20,)
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
        checkpoints._checkpoint(db)
        assert (checkpoints.passes, checkpoints.restarts) == (1, 0)  # refused, not waited
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (20,)
        reader.execute("COMMIT")
        checkpoints._checkpoint(db)
        assert (checkpoints.passes, checkpoints.restarts) == (2, 1)
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (21,)
    finally:
        db.close()
        reader.close()
        writer.close()


def test_a_store_s_checkpointer_restarts_the_log(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    try:
        store.write(upserts=[_memory(i) for i in range(40)])
        assert _until(lambda: store._checkpoints.restarts > 0)
    finally:
        store.close()
