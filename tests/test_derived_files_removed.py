"""A user's derived indexes' files leave the disk with the user (issue 18, session 29, h5;
docs/scale.md "Session 29: …"; ``store/derived_files.py``): every way a user's last memory
goes (the store's write, ``Engine.forget``, ``engrain forget``, ``POST /v1/forget``) deletes
the user's rows of ``derived_indexes`` in its transaction and the files after it commits;
a process that dies in between leaves files no pointer names, which no reader opens and the
next open sweeps; a save begun before the deletion writes nothing after it; and a reader
never takes a file of another database left in the directory, even one holding other bytes
of the same CRC-32 and length. Small stores, thresholds lowered, as
``tests/test_derived_files.py``."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from engrain import Engine
from engrain.cli.app import cli
from engrain.embed import HashEmbedder
from engrain.keys import KeyRing
from engrain.server import create_app
from engrain.store import derived_files
from tests.conftest import cli_env, make_settings
from tests.test_ann import USER, _memories
from tests.test_ann_stamp import _crash_after, _lexical, _open
from tests.test_ann_stamp import _small_images as _small_images  # autouse: images at 100 rows
from tests.test_ann_stamp import _taken as _taken  # autouse: records each load's adoption
from tests.test_derived_files import _files, _small_files  # noqa: F401  (autouse)
from tests.test_derived_files import db as db  # a store whose user's indexes have files

OTHER = "bob"


def _user_rows(path: Path, user_id: str = USER) -> list[str]:
    with sqlite3.connect(path) as con:
        return [r[0] for r in con.execute(
            "SELECT kind FROM derived_indexes WHERE user_id = ?", (user_id,))]  # fmt: skip


def _on_disk(path: Path) -> list[str]:
    """The files beside the database (temporary ones too)."""
    where = derived_files.directory(path)
    assert where is not None
    return sorted(p.name for p in where.iterdir()) if where.is_dir() else []


def _ids(path: Path) -> list[str]:
    store = _open(path)
    ids = [m.id for m in store.query(USER)]
    store.close()
    return ids


def _with_other_user(path: Path) -> list[str]:
    """Give another user a file of their own (kept when ``USER`` goes): its names."""
    where = derived_files.directory(path)
    assert where is not None
    store = _open(path)
    store.write([m.__class__(**{**m.__dict__, "user_id": OTHER}) for m in _memories(5, seed=9)])
    store._stash(OTHER, "bm25").write(b"another user's copy")
    store.close()
    with sqlite3.connect(path) as con:
        pointer = derived_files.read_pointer(con, OTHER, "bm25")
    assert pointer is not None
    return [derived_files.file_name(OTHER, "bm25", pointer)]


def _gone(path: Path, kept: list[str]) -> None:
    """Nothing of ``USER`` is left beside the database or in ``derived_indexes``."""
    assert _user_rows(path) == []
    assert _on_disk(path) == sorted(kept)


def test_a_write_deleting_the_user_s_last_memory_removes_rows_and_files(db: Path) -> None:
    assert set(_files(db)) and all(p.is_file() for p in _files(db).values())
    kept = _with_other_user(db)
    store = _open(db)
    memories = store.query(USER)
    store.write(deletes=memories[:10])  # some: the user stays, so do the files
    assert set(_files(db)) == {"usearch", "usearch-learnings", "columns", "bm25"}
    store.write(deletes=memories[10:])
    _gone(db, kept)
    store.close()  # nothing saved for the user after: no save brings them back
    _gone(db, kept)
    assert _user_rows(db, OTHER) and _open(db).query(OTHER)


def test_engine_forget_of_every_memory_removes_the_files(db: Path, tmp_path: Path) -> None:
    kept = _with_other_user(db)
    engine = Engine(settings=make_settings(tmp_path), store=_open(db), embedder=HashEmbedder())
    assert engine.forget(_ids(db), USER) == 600
    _gone(db, kept)
    engine.close()
    _gone(db, kept)


def test_engrain_forget_removes_the_files(db: Path, tmp_path: Path) -> None:
    kept = _with_other_user(db)
    result = CliRunner().invoke(
        cli, ["--url", f"sqlite:///{db}", "--user", USER, "forget", *_ids(db)],
        env=cli_env(tmp_path), catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    _gone(db, kept)


def test_the_http_forget_removes_the_files(db: Path, tmp_path: Path) -> None:
    kept = _with_other_user(db)
    engine = Engine(settings=make_settings(tmp_path), store=_open(db), embedder=HashEmbedder())
    ring = KeyRing(engine.store)
    key = ring.create([USER])[0]
    with TestClient(create_app(engine, ring)) as http:
        r = http.post("/v1/forget", json={"memory_ids": _ids(db)},
                      headers={"Authorization": f"Bearer {key}"})  # fmt: skip
        assert r.status_code == 200, r.text
    _gone(db, kept)
    engine.close()


def test_a_process_killed_between_the_commit_and_the_files_leaves_nothing_read(
    db: Path,
) -> None:
    """The deletion committed (rows and pointers gone) and the process died before
    removing the files: no pointer names them, so no reader opens them; the next open
    removes them."""
    names = _on_disk(db)
    assert names
    _crash_after(
        db, "from engrain.store import derived_files",
        "derived_files.remove_user = lambda where, user_id: None",
        f"store.write(deletes=store.query({USER!r}))",
    )  # fmt: skip
    assert _user_rows(db) == [] and _on_disk(db) == names  # left, named by nothing
    store = _open(db)
    assert store.query(USER) == []
    store.close()  # waits for the open's sweep
    assert _on_disk(db) == []


def test_a_save_begun_before_the_deletion_writes_nothing_after_it(db: Path) -> None:
    """A process built a copy of the user's index, another deleted the user meanwhile:
    the save commits nothing, rows or file."""
    store = _open(db)
    store.query(USER)
    data = _files(db)["bm25"].read_bytes()
    other = _open(db)
    other.write(deletes=other.query(USER))
    other.close()
    store._stash(USER, "bm25").write(data)
    store.close()
    _gone(db, [])


def test_a_killed_save_s_file_is_swept_by_the_next_open(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that wrote its file and died before its pointer committed leaves a file named
    by nothing: the next store opened on the file removes it (not only the next save of
    the kind)."""
    before = set(_on_disk(db))
    store = _open(db)
    store.query(USER)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies inside the write

    with monkeypatch.context() as killing, pytest.raises(KeyboardInterrupt):
        killing.setattr(derived_files, "write_pointer", killed)
        store._stash(USER, "bm25").write(_files(db)["bm25"].read_bytes() + b"more")
    left = set(_on_disk(db)) - before
    assert len(left) == 1
    store.close()
    reopened = _open(db)
    reopened.close()
    assert set(_on_disk(db)) == before


def _forged(data: bytes, crc: int, at: int) -> bytes:
    """``data`` with the 4 bytes at ``at`` changed so that its CRC-32 is ``crc`` (CRC-32 is
    affine over GF(2): solve for the 32 bits)."""
    base = bytearray(data)
    base[at : at + 4] = b"\0\0\0\0"
    start = zlib.crc32(bytes(base))
    effects = []
    for bit in range(32):
        flipped = bytearray(base)
        flipped[at + bit // 8] ^= 1 << (bit % 8)
        effects.append(zlib.crc32(bytes(flipped)) ^ start)
    # Gaussian elimination: which bits to flip so that the effects XOR to start ^ crc
    rows = [(effects[b], 1 << b) for b in range(32)]
    target, chosen = start ^ crc, 0
    basis: list[tuple[int, int]] = []
    for value, mask in rows:
        for b_value, b_mask in basis:
            if value ^ b_value < value:
                value, mask = value ^ b_value, mask ^ b_mask
        if value:
            basis.append((value, mask))
            basis.sort(reverse=True)
    for b_value, b_mask in basis:
        if target ^ b_value < target:
            target, chosen = target ^ b_value, chosen ^ b_mask
    assert target == 0
    for bit in range(32):
        if chosen >> bit & 1:
            base[at + bit // 8] ^= 1 << (bit % 8)
    out = bytes(base)
    assert zlib.crc32(out) == crc and len(out) == len(data) and out != data
    return out


def test_a_stale_directory_beside_another_database_of_the_name_is_never_read(
    db: Path, tmp_path: Path
) -> None:
    """The database is moved away without its directory and another one (the same user,
    other memories) is put in its place: a file of the old directory is never taken for
    the new database's bytes, even one holding other bytes of the same CRC-32 and length
    under the name those make (each write's token is in its file's name)."""
    where = derived_files.directory(db)
    assert where is not None
    other = tmp_path / "other" / "engrain.db"  # another database: its own files, elsewhere
    other.parent.mkdir()
    store = _open(other)
    store.write(_memories(400, seed=5))
    _lexical(store)  # its BM25 copy saved, with its file
    store.close()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            os.replace(f"{db}{suffix}", tmp_path / f"moved.db{suffix}")
        if Path(f"{other}{suffix}").exists():
            shutil.copy(f"{other}{suffix}", f"{db}{suffix}")
    with sqlite3.connect(db) as con:
        pointer = derived_files.read_pointer(con, USER, "bm25")
        rows = con.execute("SELECT data FROM derived_indexes WHERE user_id = ? AND kind = ?",
                           (USER, "bm25")).fetchone()  # fmt: skip
    assert pointer is not None
    right = bytes(rows[0])
    wrong = _forged(right[::-1], pointer.crc, len(right) // 2)
    # the stale directory holds other bytes of the pointer's CRC-32 and length, under the
    # name another database's write of them gave them
    (where / derived_files.file_name(USER, "bm25", derived_files.Pointer.of(wrong))).write_bytes(
        wrong
    )
    assert derived_files.read(where, USER, "bm25", pointer) != wrong
    store = _open(db)
    assert store._stash(USER, "bm25").read() == right
    store.close()


def test_sweep_keeps_named_files_and_what_is_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE derived_indexes (user_id TEXT NOT NULL, kind TEXT NOT NULL, "
            "data BLOB NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (user_id, kind))"
        )
        where = tmp_path / "x.db-derived"
        where.mkdir()
        named = derived_files.write(where, USER, "usearch-learnings", b"x" * 100)
        unnamed = derived_files.write(where, USER, "usearch", b"y" * 100)
        assert named is not None and unnamed is not None
        derived_files.write_pointer(con, USER, "usearch-learnings", named, "now")
        (where / "notes.txt").write_text("not ours")
        young = where / (derived_files.file_name(USER, "usearch", unnamed) + "abc.tmp")
        young.write_bytes(b"a writer's")
        old = where / (derived_files.file_name(USER, "bm25", unnamed) + "def.tmp")
        old.write_bytes(b"a dead writer's")
        stale = time.time() - derived_files.STALE_SECONDS - 10
        os.utime(old, (stale, stale))
        derived_files.sweep(con, where)
    assert sorted(p.name for p in where.iterdir()) == sorted(
        [derived_files.file_name(USER, "usearch-learnings", named), "notes.txt", young.name]
    )
    derived_files.remove_user(where, OTHER)
    assert len(list(where.iterdir())) == 3
    derived_files.remove_user(where, USER)
    assert [p.name for p in where.iterdir()] == ["notes.txt"]
