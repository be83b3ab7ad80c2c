"""WAL checkpoints run on the checkpointer's thread, never inside a caller's commit."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

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


def _log_header(path: Path) -> bytes:
    """The log's header: its checkpoint sequence and salts change when a commit begins a
    restarted log (read, never written: SQLite's locks are on the file and its -shm)."""
    with open(f"{path}-wal", "rb") as log:
        return log.read(32)[12:24]


def _frames(path: Path) -> int:
    """Frames in the log now, read from a connection of its own (a ``PASSIVE`` pass answers
    how many the log holds)."""
    with sqlite3.connect(path, isolation_level=None, timeout=0.0) as db:
        return int(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def test_after_a_restart_the_store_begins_the_log_so_a_caller_s_count_only_appends(
    tmp_path: Path,
) -> None:
    # The first commit to a restarted log writes the log's header and syncs it (SQLite's
    # WAL header sync, at NORMAL as at FULL): a context()'s lazy count paid a disk sync
    # after every pass. The checkpointer's thread now begins the log itself.
    path = tmp_path / "e.db"
    store = SQLiteStore(path)
    try:
        store.write(upserts=[_memory(i) for i in range(40)])
        # one pass after the commits above, then none for the rest of the test
        store._checkpoints.close()
        store._checkpoints = Checkpointer(path, interval=3600.0, on_restart=store._begin_log)
        store.record_access("u", ["m1", "m2"], NOW)
        assert _until(lambda: store._checkpoints.restarts == 1)
        assert _until(lambda: store._checkpoints.begun == 1)
        header = _log_header(path)
        store.record_access("u", ["m3", "m4", "m3"], NOW)  # a caller's commit
        assert _log_header(path) == header  # appended to the begun log: no header, no sync
        assert store._db.execute("PRAGMA user_version").fetchone() == (0,)
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        counts = dict(db.execute("SELECT id, access_count FROM uses WHERE access_count > 0"))
        assert counts == {"m1": 1, "m2": 1, "m3": 2, "m4": 1}
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_log_begun_is_one_frame_and_reloads_no_working_set(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    # the writer counts in the call: a count left to its store's thread would race the RESTART
    writer, reader = SQLiteStore(path, defer_uses=False), SQLiteStore(path)
    try:
        writer.write(upserts=[_memory(i) for i in range(50)])
        assert len(reader.query("u")) == 50
        cache = reader._caches["u"]
        writer._checkpoints.close()  # its passes are this test's, below
        writer.record_access("u", ["m1"], NOW)  # the last commit lazy, as a context()'s
        db = checkpoint.connect(path)
        try:
            assert db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0] == 0
        finally:
            db.close()
        assert writer._begin_log()
        assert _frames(path) == 1
        assert len(reader.query("u")) == 50
        assert reader._caches["u"] is cache  # the same revision: its counts read again only
    finally:
        writer.close()
        reader.close()


def test_a_log_is_not_begun_while_another_writer_holds_the_file(tmp_path: Path) -> None:
    path, writer = _log_file(tmp_path)
    db = sqlite3.connect(path, isolation_level=None, timeout=7.5)
    try:
        writer.execute("BEGIN IMMEDIATE")
        begun = time.monotonic()
        try:
            checkpoint.begin_log(db)
        except sqlite3.OperationalError:
            pass
        else:
            raise AssertionError("begun while another connection held the write lock")
        assert time.monotonic() - begun < 7.5  # refused, not waited for (busy timeout 0)
        assert db.execute("PRAGMA busy_timeout").fetchone() == (7500,)
        assert not db.in_transaction
        writer.execute("COMMIT")
        assert _frames(path) == 61  # and every frame now in the file: the next write restarts
        header = _log_header(path)
        checkpoint.begin_log(db)
        assert _log_header(path) != header and _frames(path) == 1  # begun, one frame
        assert db.execute("PRAGMA user_version").fetchone() == (0,)
    finally:
        db.close()
        writer.close()


def test_a_closing_or_busy_store_does_not_begin_the_log(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    store = SQLiteStore(path)
    try:
        store.write(upserts=[_memory(i) for i in range(10)])
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with store._lock:
                held.set()
                release.wait(30.0)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(30.0)
        try:
            assert not store._begin_log()  # a caller holds the store: its commit begins it
        finally:
            release.set()
            holder.join()
    finally:
        store.close()
    assert not store._begin_log()  # closed: nothing to begin


def test_a_failing_log_begin_stops_no_checkpoint(tmp_path: Path) -> None:
    path, writer = _log_file(tmp_path)
    tries: list[int] = []

    def fails() -> bool:
        tries.append(1)
        raise RuntimeError("cannot begin")

    checkpoints = Checkpointer(path, interval=0.01, on_restart=fails)
    try:
        checkpoints.committed()
        assert _until(lambda: checkpoints.restarts >= 1 and len(tries) >= 1)
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
        passes = checkpoints.passes
        checkpoints.committed()
        assert _until(lambda: checkpoints.passes > passes)  # the thread goes on
        assert checkpoints.begun == 0
    finally:
        checkpoints.close()
        writer.close()


def test_after_a_durable_commit_the_log_is_left_to_the_next_writer(tmp_path: Path) -> None:
    # an ingest's writes sync anyway: a begin would only make the next one wait for it
    path = tmp_path / "e.db"
    store = SQLiteStore(path)
    try:
        store._checkpoints.close()  # the begins below are this test's
        store.write(upserts=[_memory(i) for i in range(10)])  # durable
        assert not store._begin_log()
        store.record_access("u", ["m1"], NOW)  # lazy: a context()'s counted uses
        assert store._begin_log()
    finally:
        store.close()


def test_a_pass_out_of_memory_stops_no_later_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session 26's ``memory_limit.py``: a pass that ran out of memory killed the thread,
    and no checkpoint ran again in the process (its log grew without end)."""
    path, writer = _log_file(tmp_path)
    connect = checkpoint.connect
    failed: list[str] = []

    class OutOfMemoryOnce:
        """The checkpointer's connection, whose first pass runs out of memory."""

        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def execute(self, sql: str) -> sqlite3.Cursor:
            if not failed:
                failed.append(sql)
                raise MemoryError
            return self.db.execute(sql)

        def close(self) -> None:
            self.db.close()

    monkeypatch.setattr(checkpoint, "connect", lambda p: OutOfMemoryOnce(connect(p)))
    checkpoints = Checkpointer(path, interval=0.01)
    try:
        checkpoints.committed()
        assert _until(lambda: bool(failed))
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
        checkpoints.committed()
        assert _until(lambda: checkpoints.passes > 0)  # the thread went on
    finally:
        checkpoints.close()
        writer.close()
