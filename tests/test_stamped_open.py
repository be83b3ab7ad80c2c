"""A stamped open reads no row of ``memories`` (issue 18, session 27, h6): when the columns
image and the first index's stamp both vouch for the file's revision, the load takes which
rows have a vector from the stamp and the rowids from a user index, so the table's pages
(every one of them at a million memories: ~3 s of CPU) are not visited. Anything the stamp
cannot vouch for still reads the rows: never a forgotten memory, never a committed one
missed (the other cases, a commit or a killed process between the stamp and the open, a
copy saved over since, are ``tests/test_ann_stamp.py``'s, on this same path)."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import Memory
from engrain.store import ann, columns
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _memories
from tests.test_ann_stamp import _keys_only, _loaded_without_vectors, _open, _stamps
from tests.test_ann_stamp import _taken as _taken  # autouse: records each load's adoption

ROWS = 600


@pytest.fixture(autouse=True)
def _small_images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 100)


def _written() -> list[Memory]:
    """The user's memories: every seventh without a vector."""
    return [m if i % 7 else replace(m, embedding=None) for i, m in enumerate(_memories(ROWS))]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store whose user's indexes are saved and stamped (written, served, closed)."""
    path = tmp_path / "engrain.db"
    store = _open(path)
    store.write(_written())
    assert store.wait_for_index(USER)
    store.close()
    store = _open(path)
    assert store.wait_for_index(USER)
    store.close()
    return path


def _table_reads(path: Path, statements: list[str]) -> list[str]:
    """The steps of ``statements``' plans that read rows of the table ``memories`` (a
    scan, or a search by rowid), not only one of its indexes."""
    with sqlite3.connect(path) as con:
        out = []
        for sql in statements:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            for step in con.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall():
                detail = str(step[-1])
                names_table = " memories " in f"{detail} " or " m " in f"{detail} "
                if names_table and "COVERING INDEX" not in detail:
                    out.append(f"{detail}: {sql[:80]}")
        return out


def _load_traced(store: SQLiteStore) -> list[str]:
    """The statements the user's load runs on the store's connection."""
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    try:
        store._cache(USER)
    finally:
        store._db.set_trace_callback(None)
    return statements


def test_a_stamped_open_reads_no_row_of_the_table(db: Path) -> None:
    store = _open(db)
    statements = _load_traced(store)
    assert _loaded_without_vectors(store)
    assert statements and _table_reads(db, statements) == []
    store.close()


def test_which_rows_have_a_vector_comes_from_the_stamp(db: Path) -> None:
    """The stamp keeps one bit a row; the open's rows without a vector are the ones
    written without, never proposed by a search, and every other row is found."""
    stamp = _stamps(db)["usearch-stamp"]
    written = _written()
    assert stamp is not None and stamp.vectors is not None
    assert int(np.count_nonzero(~stamp.vectors)) == sum(m.embedding is None for m in written)
    store = _open(db)
    rows = store.query(USER)
    assert _loaded_without_vectors(store)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    without = {m.id for m in rows if m.embedding is None}
    assert {arrays.ids[i] for i in np.flatnonzero(~arrays.has_vector).tolist()} == without
    assert len(without) == sum(m.embedding is None for m in written)
    for memory in rows[:40]:
        if memory.embedding is None:
            continue
        found = store.search(USER, memory.embedding, 10)
        assert found[0][0].id == memory.id and not {m.id for m, _ in found} & without
    store.close()


def test_a_stamp_of_an_earlier_version_is_taken_reading_the_vectors_lengths(db: Path) -> None:
    """A stamp saved before the bits were kept is still taken: the open reads each row's
    vector length, as before; its close writes the stamp again with the bits."""
    _keys_only(db)
    assert _stamps(db)["usearch-stamp"].vectors is None  # type: ignore[union-attr]
    store = _open(db)
    statements = _load_traced(store)
    assert _loaded_without_vectors(store)
    assert _table_reads(db, statements) != []
    store.close()
    reopened = _open(db)
    statements = _load_traced(reopened)
    assert _loaded_without_vectors(reopened) and _table_reads(db, statements) == []
    reopened.close()


def test_a_row_deleted_behind_the_store_s_back_is_never_returned(db: Path) -> None:
    """A delete that does not move the revision (another program's ``DELETE``): the
    rowids read from the user index are not the image's, so the rows are read and the
    deleted memory is not among them."""
    store = _open(db)
    victim = next(m for m in store.query(USER) if m.embedding is not None)
    store.close()
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", (USER, victim.id))
    reopened = _open(db)
    assert victim.id not in {m.id for m in reopened.query(USER)}
    assert not _loaded_without_vectors(reopened)
    found = reopened.search(USER, victim.embedding, 20)  # type: ignore[arg-type]
    assert victim.id not in {m.id for m, _ in found}
    reopened.close()


def test_a_row_added_behind_the_store_s_back_is_found(db: Path) -> None:
    """An insert that does not move the revision: the rowids differ from the image's,
    the rows are read, and the new memory is found by its vector."""
    store = _open(db)
    template = store.query(USER)[0]
    store.close()
    fresh = _memories(1, seed=31)[0]
    with sqlite3.connect(db) as con:
        row = con.execute("SELECT * FROM memories WHERE user_id = ? AND id = ?",
                          (USER, template.id)).fetchone()  # fmt: skip
        names = [c[1] for c in con.execute("PRAGMA table_info(memories)").fetchall()]
        values = dict(zip(names, row, strict=True))
        vector = np.asarray(fresh.embedding, dtype=np.float32).tobytes()
        values.update(id=fresh.id, content=fresh.content, content_hash=fresh.content_hash,
                      embedding=vector)  # fmt: skip
        con.execute(f"INSERT INTO memories ({', '.join(names)}) VALUES "
                    f"({', '.join('?' for _ in names)})", list(values.values()))  # fmt: skip
    reopened = _open(db)
    found = reopened.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.id for m, _ in found] == [fresh.id]
    assert not _loaded_without_vectors(reopened)
    reopened.close()


def test_a_viewed_index_s_first_patch_copies_it_in_while_searches_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stamped copy is read in place; its first patch copies it in (a view cannot be
    changed) outside the index's lock, so a search during the copy is answered from the
    view (the same graph), and the patch's vector is found once it is done."""
    rng = np.random.default_rng(41)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    keys = np.arange(500, dtype=np.uint64) + 1
    data = ann.VectorIndex.build(keys, vectors).dump()
    viewed = ann.VectorIndex.viewed(memoryview(data), 16)
    assert viewed is not None and viewed.is_view
    expected = viewed.search(vectors[3], 5).tolist()
    copying, release = threading.Event(), threading.Event()
    usearch = ann._usearch()

    class Paused(usearch):  # type: ignore[misc,valid-type]
        @staticmethod
        def restore(*args: Any, **kwargs: Any) -> Any:
            copying.set()
            assert release.wait(60.0)
            return usearch.restore(*args, **kwargs)

    monkeypatch.setattr(ann, "_usearch", lambda: Paused)
    moved = rng.standard_normal((1, 16)).astype(np.float32)
    patching = threading.Thread(target=viewed.patch, args=(keys[:1], moved))
    patching.start()
    try:
        assert copying.wait(60.0)
        searched: list[list[int]] = []
        search = threading.Thread(target=lambda: searched.append(
            viewed.search(vectors[3], 5).tolist()))  # fmt: skip
        search.start()
        search.join(60.0)  # a bound for a search held by the copy: it answers at once
        assert searched == [expected]  # answered while the copy waits, from the view
    finally:
        release.set()
        patching.join(10.0)
    assert not viewed.is_view and viewed.saved is None
    assert viewed.search(moved[0], 1).tolist() == [int(keys[0])]
