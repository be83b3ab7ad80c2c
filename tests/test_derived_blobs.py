"""A derived index larger than one SQLite value (issue 18, docs/scale.md defect 2): kept
as a manifest and parts (``store/derived_blobs.py``), read back as one, never torn, mixed
with another write's parts or another user's; a store written before reads the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engrain.store import columns, derived_blobs, lexical_file
from engrain.store.ann import VectorIndex
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _ids, _memories
from tests.test_columnar import _Spy

AT = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(
        "CREATE TABLE derived_indexes (user_id TEXT NOT NULL, kind TEXT NOT NULL, "
        "data BLOB NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (user_id, kind))"
    )
    return conn


def _rows(db: sqlite3.Connection, user: str = "ada") -> list[str]:
    return [r[0] for r in db.execute(
        "SELECT kind FROM derived_indexes WHERE user_id = ? ORDER BY kind", (user,))]  # fmt: skip


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 3500, 10_000])
def test_bytes_of_any_size_read_back_as_written(
    db: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 1000)
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    derived_blobs.write(db, "ada", "usearch", data, AT)
    assert derived_blobs.read(db, "ada", "usearch") == data
    assert len(_rows(db)) == (1 if size <= 1000 else 1 + -(-size // 1000))
    assert derived_blobs.read(db, "ada", "bm25") is None
    assert derived_blobs.read(db, "bob", "usearch") is None


def test_a_value_over_sqlites_limit_is_saved_in_parts(
    db: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4096)  # stands for SQLite's 1,000,000,000 bytes
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 4000)
    data = bytes(range(256)) * 60  # 15,360 bytes
    with pytest.raises(sqlite3.DataError):  # what one row did
        db.execute("INSERT INTO derived_indexes VALUES ('ada', 'columns', ?, ?)", (data, AT))
    derived_blobs.write(db, "ada", "columns", data, AT)
    assert derived_blobs.read(db, "ada", "columns") == data


def test_a_new_write_replaces_every_part_of_the_last(
    db: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 100)
    derived_blobs.write(db, "ada", "usearch", b"a" * 950, AT)
    derived_blobs.write(db, "ada", "usearch-old", b"keep" * 100, AT)  # another kind's parts
    derived_blobs.write(db, "ada", "usearch", b"b" * 420, AT)
    assert derived_blobs.read(db, "ada", "usearch") == b"b" * 420
    assert len([k for k in _rows(db) if k.startswith("usearch#")]) == 5
    derived_blobs.write(db, "ada", "usearch", b"small", AT)
    assert derived_blobs.read(db, "ada", "usearch") == b"small"
    assert [k for k in _rows(db) if k.startswith("usearch")] == [
        "usearch",
        "usearch-old",
        *[k for k in _rows(db) if k.startswith("usearch-old#")],
    ]
    assert derived_blobs.read(db, "ada", "usearch-old") == b"keep" * 100


def test_torn_stale_or_foreign_parts_read_as_nothing_saved(
    db: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 100)
    derived_blobs.write(db, "ada", "bm25", b"x" * 350, AT)
    manifest = db.execute("SELECT data FROM derived_indexes WHERE kind = 'bm25'").fetchone()[0]
    parts = [k for k in _rows(db) if k.startswith("bm25#")]
    # torn: a part missing
    db.execute("DELETE FROM derived_indexes WHERE kind = ?", (parts[1],))
    assert derived_blobs.read(db, "ada", "bm25") is None
    # stale: the parts are of a newer write than the manifest
    derived_blobs.write(db, "ada", "bm25", b"y" * 350, AT)
    fresh = db.execute("SELECT data FROM derived_indexes WHERE kind = 'bm25'").fetchone()[0]
    db.execute("UPDATE derived_indexes SET data = ? WHERE kind = 'bm25'", (manifest,))
    assert derived_blobs.read(db, "ada", "bm25") is None
    # a part of the wrong length, or an extra one
    db.execute("UPDATE derived_indexes SET data = ? WHERE kind = 'bm25'", (fresh,))
    assert derived_blobs.read(db, "ada", "bm25") == b"y" * 350
    last = [k for k in _rows(db) if k.startswith("bm25#")][-1]
    db.execute("UPDATE derived_indexes SET data = ? WHERE kind = ?", (b"y" * 60, last))
    assert derived_blobs.read(db, "ada", "bm25") is None
    db.execute("UPDATE derived_indexes SET data = ? WHERE kind = ?", (b"y" * 50, last))
    assert derived_blobs.read(db, "ada", "bm25") == b"y" * 350
    db.execute("INSERT INTO derived_indexes VALUES ('ada', ?, ?, ?)",
               (last[:-8] + "00000004", b"z", AT))  # fmt: skip
    assert derived_blobs.read(db, "ada", "bm25") is None
    # foreign: another user's parts under this user's manifest are not read
    db.execute("DELETE FROM derived_indexes WHERE user_id = 'ada' AND kind LIKE 'bm25#%'")
    derived_blobs.write(db, "bob", "bm25", b"y" * 350, AT)
    bob = db.execute("SELECT data FROM derived_indexes WHERE user_id = 'bob' AND kind = 'bm25'")
    db.execute("UPDATE derived_indexes SET data = ? WHERE user_id = 'ada' AND kind = 'bm25'",
               (bob.fetchone()[0],))  # fmt: skip
    assert derived_blobs.read(db, "ada", "bm25") is None
    assert derived_blobs.read(db, "bob", "bm25") == b"y" * 350


def test_a_store_saves_and_reopens_its_indexes_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 4096)
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 100)
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 100)
    path = tmp_path / "e.db"
    store = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    memories = _memories(600)
    store.write(memories)
    store.close()
    first = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    assert first.wait_for_index(USER)
    assert first.lexical_search(USER, "note", 5)
    first.close()
    with sqlite3.connect(path) as conn:
        kinds = [r[0] for r in conn.execute("SELECT kind FROM derived_indexes")]
    for kind in ("usearch", "bm25", "columns"):
        assert kind in kinds and sum(k.startswith(f"{kind}#") for k in kinds) > 1, kind

    spy = _Spy(monkeypatch)
    built: list[int] = []
    original = VectorIndex.build.__func__  # type: ignore[attr-defined]

    def counting(cls: type[VectorIndex], keys: np.ndarray, *args: object) -> VectorIndex:
        built.append(len(keys))
        return original(cls, keys, *args)  # type: ignore[no-any-return]

    monkeypatch.setattr(VectorIndex, "build", classmethod(counting))
    again = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    assert again.wait_for_index(USER)
    assert (spy.image, spy.rows) == (1, 0)  # the image read back from its parts
    assert built == []  # the index too
    for memory in memories[:10]:
        assert memory.embedding is not None
        assert _ids(again.search(USER, memory.embedding, 1)) == [memory.id]
    assert again.lexical_search(USER, memories[7].content, 1)[0][0].id == memories[7].id
    again.close()


def test_an_index_saved_in_one_row_by_an_earlier_version_still_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "e.db"
    store = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    memories = _memories(300)
    store.write(memories)
    assert store.wait_for_index(USER)
    store.close()
    with sqlite3.connect(path) as conn:  # as the earlier version left it: one row
        kinds = [r[0] for r in conn.execute("SELECT kind FROM derived_indexes ORDER BY kind")]
        # the learnings' index: ann_kinds.py; each index's stamp: ann_stamp.py (no parts)
        assert kinds == ["usearch", "usearch-learnings", "usearch-learnings-stamp", "usearch-stamp"]
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 1024)  # this version would split it
    again = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    saved = again._stash(USER, "usearch").read()
    assert saved is not None and VectorIndex.load(saved, 32) is not None
    again.close()


class _CountedLock:
    """A store's lock that counts how often it is taken."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.taken = 0

    def __enter__(self) -> _CountedLock:
        self.taken += 1
        self.inner.__enter__()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)  # type: ignore[attr-defined]


def test_a_store_reads_a_derived_index_without_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index job's read of a saved index (tens of MB) goes through a connection of its
    own, so a caller's reads are not queued behind the copy; parts and all, the bytes are
    those written, and a commit made after it opened is seen."""
    monkeypatch.setattr(derived_blobs, "PART_BYTES", 1000)
    store = SQLiteStore(tmp_path / "engrain.db")
    stash = store._stash("ada", "usearch")
    data = bytes(range(256)) * 15
    stash.write(data)
    lock = _CountedLock(store._lock)
    monkeypatch.setattr(store, "_lock", lock)
    assert stash.read() == data
    assert store._stash("bob", "usearch").read() is None
    assert lock.taken == 0
    store.close()
    other = SQLiteStore(tmp_path / "engrain.db")
    other._stash("ada", "usearch").write(b"newer")
    other.close()
    assert derived_blobs.read_apart(tmp_path / "engrain.db", "ada", "usearch") == b"newer"


def test_an_in_memory_store_reads_its_derived_indexes_on_its_own_connection() -> None:
    store = SQLiteStore(":memory:")
    store._stash("ada", "bm25").write(b"postings")
    lock = _CountedLock(store._lock)
    store._lock = lock  # type: ignore[assignment]
    assert store._stash("ada", "bm25").read() == b"postings"
    assert lock.taken == 1
    store.close()
