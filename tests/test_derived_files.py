"""A large derived index's bytes kept in a file beside the SQLite database too (issue 18,
session 28, h2; ``store/derived_files.py``): a stamped open reads them from there instead
of through SQLite, and never takes a file for what the rows do not hold — a file missing,
stale, changed, or left by a killed save, another process's write between the save and the
open, an earlier version's write that knows nothing of files. Small stores, thresholds
lowered, as ``tests/test_stamped_open.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.store import ann, derived_blobs, derived_files, lexical_file
from engrain.store.ann import VectorIndex
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _memories
from tests.test_ann_stamp import _crash_after, _lexical, _loaded_without_vectors, _open
from tests.test_ann_stamp import _small_images as _small_images  # autouse: images at 100 rows
from tests.test_ann_stamp import _taken as _taken  # autouse: records each load's adoption

ROWS = 600
KINDS = ("usearch", "usearch-learnings", "columns", "bm25")


@pytest.fixture(autouse=True)
def _small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derived_files, "FILE_MIN_BYTES", 1)
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 100)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store whose user's indexes are saved, stamped and kept in files (written, served,
    closed twice: the second open writes the files of what the first saved by itself)."""
    path = tmp_path / "engrain.db"
    store = _open(path)
    store.write(_memories(ROWS))
    assert store.wait_for_index(USER)
    _lexical(store)
    store.close()
    store = _open(path)
    assert store.wait_for_index(USER)
    _lexical(store)
    store.close()
    return path


def _files(path: Path) -> dict[str, Path]:
    """The user's files by kind, if the pointer names them."""
    where = derived_files.directory(path)
    assert where is not None
    out: dict[str, Path] = {}
    with sqlite3.connect(path) as con:
        for kind in KINDS:
            pointer = derived_files.read_pointer(con, USER, kind)
            if pointer is not None:
                out[kind] = where / derived_files.file_name(USER, kind, pointer)
    return out


def _rows_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds whose bytes are read from the rows (``derived_blobs.read``), recorded."""
    kinds: list[str] = []
    original = derived_blobs.read

    def spy(db: sqlite3.Connection, user_id: str, kind: str) -> bytes | None:
        kinds.append(kind)
        return original(db, user_id, kind)

    monkeypatch.setattr(derived_blobs, "read", spy)
    return kinds


def _answers(store: SQLiteStore, memories: list[Any]) -> list[list[tuple[str, float]]]:
    return [
        [(m.id, round(s, 5)) for m, s in store.search(USER, q.embedding, 10)] for q in memories[:30]
    ]


def test_a_stamped_open_reads_the_saved_copies_from_their_files(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(db)
    assert set(files) == set(KINDS) and all(p.is_file() for p in files.values())
    with sqlite3.connect(db) as con:  # each file holds exactly the rows' bytes
        for kind, path in files.items():
            assert path.read_bytes() == derived_blobs.read(con, USER, kind)
    memories = _open(db).query(USER)
    with monkeypatch.context() as spying:
        rows = _rows_read(spying)
        store = _open(db)
        answers, words = _answers(store, memories), _lexical(store)
        assert _loaded_without_vectors(store)
        assert not set(rows) & set(KINDS)  # not one of them read through SQLite
        store.close()
    plain = _open(db)  # the same answers from a store without files
    for path in files.values():
        path.unlink()
    assert _answers(plain, memories) == answers and _lexical(plain) == words
    plain.close()


def test_a_missing_file_reads_the_rows_and_is_written_again(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(db)
    files["usearch"].unlink()
    rows = _rows_read(monkeypatch)
    store = _open(db)
    store.query(USER)
    assert _loaded_without_vectors(store)
    assert "usearch" in rows
    store.close()  # waits for the file's save
    assert _files(db)["usearch"].is_file()
    rows.clear()
    again = _open(db)
    again.query(USER)
    assert _loaded_without_vectors(again) and "usearch" not in rows
    again.close()


@pytest.mark.parametrize("damage", ["cut short", "changed", "another copy"])
def test_a_file_not_holding_the_pointer_s_bytes_is_not_read(
    db: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A file cut short, changed in place, or replaced by another index's copy (a stale
    file) is never taken: the rows' copy is, and answers as before."""
    memories = _open(db).query(USER)
    path = _files(db)["usearch"]
    data = bytearray(path.read_bytes())
    if damage == "cut short":
        data = data[: len(data) // 2]
    elif damage == "changed":
        data[len(data) // 2] ^= 0xFF
    else:
        keys = ann.memory_keys([m.id for m in memories[:300]])
        other = VectorIndex.build(keys, np.stack([m.embedding for m in memories[:300]]))  # type: ignore[misc]
        data = bytearray(other.dump())
    path.write_bytes(bytes(data))
    rows = _rows_read(monkeypatch)
    store = _open(db)
    for memory in memories[::37]:
        assert [m.id for m, _ in store.search(USER, memory.embedding, 1)] == [memory.id]  # type: ignore[arg-type]
    assert "usearch" in rows and _loaded_without_vectors(store)
    store.close()


def test_an_earlier_version_s_write_drops_the_pointer(db: Path) -> None:
    """An earlier version saves another copy through ``derived_blobs`` alone (it knows
    nothing of files): its write deletes the pointer with the old parts, so the old file is
    never read for it."""
    with sqlite3.connect(db) as con:
        derived_blobs.write(con, USER, "bm25", b"another copy", "2026-01-01T00:00:00")
        assert derived_files.read_pointer(con, USER, "bm25") is None
    store = _open(db)
    assert store._stash(USER, "bm25").read() == b"another copy"
    store.close()


def test_another_process_s_write_between_the_save_and_the_open(db: Path) -> None:
    """Another process adds a memory, forgets one and saves the patched index (a new copy,
    a new file, the old one swept), then dies before stamping: the next open finds the new
    memory and never returns the forgotten one."""
    before = _open(db)
    victim = before.query(USER)[3]
    before.close()
    old = _files(db)["usearch"]
    fresh = _memories(1, seed=12)[0]
    _crash_after(db, "from engrain.store import derived_files, lexical_file",
                 "derived_files.FILE_MIN_BYTES = 1", "fresh = _memories(1, seed=12)[0]",
                 f"store.write([fresh], deletes=store.get(USER, [{victim.id!r}]))",
                 "store.wait_for_index(USER)",
                 "store._slots[USER].update(memory_keys([fresh.id]), "
                 "fresh.embedding.reshape(1, -1))")  # fmt: skip
    assert not old.exists() and _files(db)["usearch"].is_file()
    store = _open(db)
    found = store.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.content for m, _ in found] == [fresh.content]
    assert victim.id not in {m.id for m, _ in store.search(USER, victim.embedding, 20)}  # type: ignore[arg-type]
    assert not _loaded_without_vectors(store)
    store.close()


def test_a_save_killed_after_its_file_leaves_the_rows_copy_read(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that wrote its file and died before its transaction committed: the rows and
    the pointer are the old copy's, whose file is still there; the new file is not named
    by anything and is swept by the next save of the kind."""
    memories = _open(db).query(USER)
    before = _files(db)["usearch"]
    store = _open(db)
    store.query(USER)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies inside the write

    keys = ann.memory_keys([m.id for m in memories[:100]])
    other = VectorIndex.build(keys, np.stack([m.embedding for m in memories[:100]]))  # type: ignore[misc]
    with monkeypatch.context() as killing, pytest.raises(KeyboardInterrupt):
        killing.setattr(derived_blobs, "write", killed)
        store._stash(USER, "usearch").write(other.dump())
    store.close()
    where = derived_files.directory(db)
    assert where is not None
    left = [p for p in where.glob("*-usearch-*.bin")
            if p != before and "-usearch-learnings-" not in p.name]  # fmt: skip
    assert len(left) == 1 and _files(db)["usearch"] == before
    reopened = _open(db)
    answers = _answers(reopened, memories)
    assert _loaded_without_vectors(reopened)
    assert all(a[0][0] == m.id for a, m in zip(answers, memories, strict=False))
    reopened._stash(USER, "usearch").write(before.read_bytes())  # the next save sweeps it
    assert not left[0].exists()
    reopened.close()


def test_no_pointer_when_the_rows_changed_while_the_file_was_written(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file made on a read (the rows had none) gets its pointer only if the rows are
    still the ones read: a save of the kind in between makes it write none."""
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM derived_indexes WHERE kind = ?",
                    (derived_files.pointer_kind("bm25"),))  # fmt: skip
    store = _open(db)
    original = derived_files.write

    def raced(where: Path, user_id: str, kind: str, data: bytes) -> Any:
        kept = original(where, user_id, kind, data)
        with sqlite3.connect(db) as con:  # another process saves another copy meanwhile
            derived_blobs.write(con, user_id, kind, data + b"!", "2026-01-01T00:00:00")
        return kept

    with monkeypatch.context() as racing:
        racing.setattr(derived_files, "write", raced)
        saved = store._stash(USER, "bm25").read()
        assert saved is not None and not saved.endswith(b"!")
        store.close()  # waits for the file's save
    with sqlite3.connect(db) as con:
        assert derived_files.read_pointer(con, USER, "bm25") is None
    again = _open(db)
    assert again._stash(USER, "bm25").read() == saved + b"!"
    again.close()


def test_sweep_keeps_other_kinds_whose_names_start_alike(tmp_path: Path) -> None:
    data = b"x" * 100
    first = derived_files.write(tmp_path, USER, "usearch", data)
    learnings = derived_files.write(tmp_path, USER, "usearch-learnings", data)
    assert first is not None and learnings is not None
    derived_files.sweep(tmp_path, USER, "usearch", None)
    names = [p.name for p in tmp_path.iterdir()]
    assert names == [derived_files.file_name(USER, "usearch-learnings", learnings)]
