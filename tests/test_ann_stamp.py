"""A saved approximate index stamped with the revision it holds every row at (issue 18,
session 15, ``store/ann_stamp.py``): a process opening the store at that revision reads no
vector and searches through the index from its first call; a stamp made stale by any
later commit, a crash before the next stamp included, or naming a copy saved over since,
is ignored and the index is checked row by row as before: never a forgotten memory, never
a committed one missed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import StoreError
from engrain.model import Memory
from engrain.store import (
    ann,
    ann_kinds,
    ann_stamp,
    columns,
    derived_blobs,
    lexical,
    lexical_file,
    reads,
    sqlite_load,
    sqlite_stamps,
)
from engrain.store.ann import VectorIndex
from engrain.store.arrays import HeldTable
from engrain.store.base import ALL, Patch
from engrain.store.sqlite import MIGRATIONS, SQLiteStore
from tests.test_ann import NOW, USER, _memories, _vectors

ROWS = 600
_TAKEN: list[bool] = []


@pytest.fixture(autouse=True)
def _small_images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 100)


def _open(path: Path) -> SQLiteStore:
    _TAKEN.clear()  # what the loads of this store do
    return SQLiteStore(path, ann_min_vectors=0, ann_background=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store whose user's indexes are saved and stamped: written, opened, closed."""
    path = tmp_path / "engrain.db"
    store = _open(path)
    store.write(_memories(ROWS))
    store.close()
    store = _open(path)
    assert store.wait_for_index(USER)
    store.close()
    return path


def _stamps(path: Path) -> dict[str, ann_stamp.IndexStamp | None]:
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT kind, data FROM derived_indexes WHERE user_id = ? AND kind LIKE '%-stamp'",
            (USER,),
        ).fetchall()
    return {kind: ann_stamp.load(bytes(data)) for kind, data in rows}


def _revision(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT revision FROM revisions WHERE user_id = ?",
                              (USER,)).fetchone()[0])  # fmt: skip


@pytest.fixture(autouse=True)
def _taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record whether each load took the stamps' word (``sqlite_stamps.adopted``)."""
    _TAKEN.clear()
    original = sqlite_stamps.adopted

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        _TAKEN.append(found is not None)
        return found

    monkeypatch.setattr(sqlite_stamps, "adopted", spy)


def _loaded_without_vectors(store: SQLiteStore) -> bool:
    """Whether the user's working set was read without vectors (the stamps' word taken)
    by the last load, and is searched through the index."""
    cache = store._cache(USER)
    arrays = cache.snapshot.arrays
    taken = bool(_TAKEN) and _TAKEN[-1]
    assert not taken or (arrays is not None and arrays.matrix is None
                         and cache.snapshot.ann is not None)  # fmt: skip
    return taken


def _exact_ids(memories: list[Memory], query: np.ndarray, k: int) -> list[str]:
    matrix = np.stack([m.embedding for m in memories if m.embedding is not None])
    sims = matrix @ query
    order = np.argsort(-sims, kind="stable")[:k]
    return [memories[i].id for i in order.tolist()]


def test_close_stamps_both_indexes_at_the_file_s_revision(db: Path) -> None:
    stamps = _stamps(db)
    assert set(stamps) == {"usearch-stamp", "usearch-learnings-stamp"}
    first = stamps["usearch-stamp"]
    assert first is not None and first.revision == _revision(db) and first.dim == 32
    assert len(first.keys) == ROWS


def test_a_reopen_at_the_stamped_revision_reads_no_vector_and_searches_the_index(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[int] = []
    original = VectorIndex._holds

    def spy(self: VectorIndex, keys: ann.Keys, vectors: ann.Matrix) -> ann.BoolArray:
        checked.append(len(keys))
        return original(self, keys, vectors)

    monkeypatch.setattr(VectorIndex, "_holds", spy)
    store = _open(db)
    memories = store.query(USER)
    assert _loaded_without_vectors(store)
    query = _vectors(1, seed=9)[0]
    found = [m.id for m, _ in store.search(USER, query, 10)]
    assert checked == []  # no row was compared with the index
    assert found[:5] == _exact_ids(memories, query, 10)[:5]
    store.close()


def test_the_stamp_s_keys_are_the_rows_keys(db: Path) -> None:
    store = _open(db)
    store.query(USER)
    ann_rows = store._cache(USER).snapshot.ann
    assert ann_rows is not None
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    assert np.array_equal(ann_rows.keys, ann.memory_keys(arrays.ids.tolist()))
    store.close()


def test_a_commit_after_the_stamp_makes_it_stale(db: Path) -> None:
    store = _open(db)
    fresh = _memories(1, seed=11)[0]
    store.write([fresh])
    store._closed = True  # a crash: no stamp, no save at close
    store._db.close()
    reopened = _open(db)
    reopened.query(USER)
    assert not _loaded_without_vectors(reopened)
    found = [m.id for m, _ in reopened.search(USER, fresh.embedding, 1)]  # type: ignore[arg-type]
    assert found == [fresh.id]
    reopened.close()


def _crash_after(path: Path, *lines: str) -> None:
    """Run ``lines`` on a store over ``path`` in another process that then dies at once
    (``os._exit``: no close, no thread joined, nothing saved)."""
    script = "\n".join([
        "import os, sys", f"sys.path[:0] = {sys.path!r}",
        "from engrain.store import columns", "columns.PERSIST_MIN_ROWS = 100",
        "from engrain.store.ann import memory_keys",
        "from engrain.store.sqlite import SQLiteStore",
        "from tests.test_ann import USER, _memories",
        f"store = SQLiteStore({str(path)!r}, ann_min_vectors=0, ann_background=False)",
        *lines, "os._exit(0)",
    ])  # fmt: skip
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parent.parent)


def test_a_process_killed_after_a_commit_leaves_no_false_stamp(db: Path) -> None:
    """Another process writes (one memory added, one forgotten) and dies before any
    stamp or index save: the next open ignores the stamp, finds the new memory, and
    never returns the forgotten one."""
    before = _open(db)
    victim = before.query(USER)[3]
    before.close()
    fresh = _memories(1, seed=12)[0]
    _crash_after(db, "fresh = _memories(1, seed=12)[0]",
                 f"store.write([fresh], deletes=store.get(USER, [{victim.id!r}]))")  # fmt: skip
    assert _stamps(db)["usearch-stamp"].revision < _revision(db)  # type: ignore[union-attr]
    store = _open(db)
    found = store.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.content for m, _ in found] == [fresh.content]  # ids are random: the other's
    assert victim.id not in {m.id for m, _ in store.search(USER, victim.embedding, 20)}  # type: ignore[arg-type]
    assert not _loaded_without_vectors(store)
    store.close()


def test_a_process_killed_after_saving_the_index_but_before_the_stamp(db: Path) -> None:
    """The index was patched and saved (a new copy) but the process died before the
    stamp: the old stamp is of an older revision and names the old copy: ignored."""
    fresh = _memories(1, seed=13)[0]
    _crash_after(db, "fresh = _memories(1, seed=13)[0]", "store.write([fresh])",
                 "store.wait_for_index(USER)",  # the index patched with it and saved
                 "store._slots[USER].update(memory_keys([fresh.id]), "
                 "fresh.embedding.reshape(1, -1))")  # fmt: skip
    store = _open(db)
    found = store.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.content for m, _ in found] == [fresh.content]  # ids are random: the other's
    assert not _loaded_without_vectors(store)
    store.close()
    # that close stamped the current revision: the next open takes its word again
    again = _open(db)
    found = again.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.content for m, _ in found] == [fresh.content]
    assert _loaded_without_vectors(again)
    again.close()


def test_a_stamp_naming_a_copy_saved_over_since_is_ignored(db: Path) -> None:
    """Another process saved a different copy of the index (last writer wins) without
    writing rows: the stamp's revision still matches, but the copy is not the one it
    vouches for, so the rows' vectors are read and the index is checked."""
    store = _open(db)
    memories = store.query(USER)
    store.close()
    keys = ann.memory_keys([m.id for m in memories[:50]])
    other = VectorIndex.build(keys, np.stack([m.embedding for m in memories[:50]]))  # type: ignore[misc]
    with sqlite3.connect(db) as con:
        con.execute("UPDATE derived_indexes SET data = ? WHERE user_id = ? AND kind = 'usearch'",
                    (other.dump(), USER))  # fmt: skip
    reopened = _open(db)
    rows = reopened.query(USER)
    assert not _loaded_without_vectors(reopened)
    last = rows[-1]
    assert [m.id for m, _ in reopened.search(USER, last.embedding, 1)] == [last.id]  # type: ignore[arg-type]
    reopened.close()


def test_counted_uses_keep_the_stamp_and_a_patch_moves_it(db: Path) -> None:
    store = _open(db)
    rows = store.query(USER)
    store.record_access(USER, [rows[0].id], NOW)  # a counted use: no revision
    store.close()
    assert _stamps(db)["usearch-stamp"].revision == _revision(db)  # type: ignore[union-attr]
    reopened = _open(db)
    reopened.query(USER)
    assert _loaded_without_vectors(reopened)
    reopened.close()


def _keys_only(path: Path) -> None:
    """Write the user's stamps again as an earlier version wrote them (``ENGRSTP1``: no
    bits saying which rows have a vector)."""
    with sqlite3.connect(path) as con:
        for kind, data in con.execute(
            "SELECT kind, data FROM derived_indexes WHERE user_id = ? AND kind LIKE '%-stamp'",
            (USER,),
        ).fetchall():
            _, header_length, keys_length, _ = ann_stamp._FRAME.unpack_from(data)
            end = ann_stamp._FRAME.size + header_length + keys_length
            body = bytes(data[ann_stamp._FRAME.size : end])
            old = ann_stamp._FRAME.pack(b"ENGRSTP1", header_length, keys_length,
                                        zlib.crc32(body)) + body  # fmt: skip
            con.execute("UPDATE derived_indexes SET data = ? WHERE user_id = ? AND kind = ?",
                        (old, USER, kind))  # fmt: skip


def test_a_vector_of_another_size_reads_the_rows(db: Path) -> None:
    """With a stamp of an earlier version (no bits for which rows have a vector) the open
    reads each vector's length, and one of another size written behind the store's back
    (the revision not moved) makes it read the rows. A stamp written now keeps those
    bits, and the open reads no row (``tests/test_stamped_open.py``): a write that does
    not move the revision is not seen by the image's columns either."""
    _keys_only(db)
    with sqlite3.connect(db) as con:  # behind the store's back: the revision does not move
        con.execute("UPDATE memories SET embedding = ? WHERE rowid = (SELECT min(rowid) "
                    "FROM memories)", (np.zeros(8, dtype=np.float32).tobytes(),))  # fmt: skip
    store = _open(db)
    store.query(USER)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None and not isinstance(arrays, HeldTable)
    assert not _loaded_without_vectors(store)
    store.close()


def test_a_damaged_stamp_is_ignored() -> None:
    vectors = np.array([True, False, True, True, False])
    stamp = ann_stamp.IndexStamp(3, ("001",), 7, 9, 4, "d", np.arange(5, dtype=np.uint64),
                                 vectors)  # fmt: skip
    data = ann_stamp.dump(stamp)
    loaded = ann_stamp.load(data)
    assert loaded is not None and loaded.revision == 3 and loaded.migrations == ("001",)
    assert np.array_equal(loaded.keys, stamp.keys) and (loaded.crc, loaded.length) == (7, 9)
    assert loaded.vectors is not None and np.array_equal(loaded.vectors, vectors)
    assert ann_stamp.load(data[:-1]) is None
    assert ann_stamp.load(data[:-9] + b"\x01" * 8 + data[-1:]) is None
    assert ann_stamp.load(data[:-1] + b"\xff") is None
    assert ann_stamp.load(None) is None
    assert loaded.vouches_for(3, ("001",)) and not loaded.vouches_for(4, ("001",))
    assert not loaded.vouches_for(3, ("001", "002"))


def test_a_vector_patched_in_place_after_the_stamp_is_found_by_its_new_vector(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process patches a row's vector in place (its rowid kept) and refreshes the
    columns image at close, but dies before stamping: the image matches the file, the
    stamp does not, so the rows' vectors are read and the row is found by its new vector."""
    store = _open(db)
    target = store.query(USER)[5]
    moved = _vectors(1, seed=21)[0]
    store.write(patches=[Patch(USER, target.id, {"embedding": moved})])
    with monkeypatch.context() as crash:  # dies before stamping
        crash.setattr(SQLiteStore, "_stamp_indexes", lambda self, user_id: None)
        store.close()
    with sqlite3.connect(db) as con:
        image = derived_blobs.read(con, USER, "columns")
    names = tuple(name for name, _ in MIGRATIONS)
    assert columns.load(image, columns.Stamp(_revision(db), names), USER) is not None
    assert _stamps(db)["usearch-stamp"].revision < _revision(db)  # type: ignore[union-attr]
    reopened = _open(db)
    found = reopened.search(USER, moved, 1)
    assert [m.id for m, _ in found] == [target.id] and found[0][1] == pytest.approx(1.0)
    assert not _loaded_without_vectors(reopened)
    reopened.close()


def test_a_vector_patched_after_a_stamped_open_is_searched_exactly_and_not_stamped(
    db: Path,
) -> None:
    store = _open(db)
    target = store.query(USER)[7]
    assert _loaded_without_vectors(store)
    moved = _vectors(1, seed=22)[0]
    store.write(patches=[Patch(USER, target.id, {"embedding": moved})])
    found = store.search(USER, moved, 1)
    assert [m.id for m, _ in found] == [target.id] and found[0][1] == pytest.approx(1.0)
    store.close()  # the index does not hold the new vector: no stamp of this revision
    assert _stamps(db)["usearch-stamp"].revision < _revision(db)  # type: ignore[union-attr]


def test_rows_without_a_vector_are_known_without_reading_any(tmp_path: Path) -> None:
    """Read without vectors, a row has one exactly when its stored vector has the
    index's size; the rows without one are never proposed, the others found."""
    path = tmp_path / "engrain.db"
    memories = [m if i % 5 else replace(m, embedding=None) for i, m in enumerate(_memories(ROWS))]
    store = _open(path)
    store.write(memories)
    assert store.wait_for_index(USER)
    store.close()
    store = _open(path)
    store.wait_for_index(USER)
    store.close()
    reopened = _open(path)
    rows = reopened.query(USER)
    assert _loaded_without_vectors(reopened)
    arrays = reopened._cache(USER).snapshot.arrays
    assert arrays is not None
    without = {m.id for m in memories if m.embedding is None}
    assert {arrays.ids[i] for i in np.flatnonzero(~arrays.has_vector).tolist()} == without
    query = next(m for m in memories if m.embedding is not None).embedding
    found = reopened.search(USER, query, 50)  # type: ignore[arg-type]
    assert found and not {m.id for m, _ in found} & without
    assert {m.id for m in rows} == {m.id for m in memories}
    reopened.close()


def test_a_process_behind_another_s_commit_does_not_stamp_at_close(db: Path) -> None:
    """Store A serves the user; store B (another process's connection) adds a memory;
    A closes without having read it: its stamps would vouch for rows it does not hold,
    so it writes none, and the next open reads the vectors and finds B's memory."""
    a = _open(db)
    a.query(USER)
    assert _loaded_without_vectors(a)
    before = _stamps(db)["usearch-stamp"]
    b = _open(db)
    fresh = _memories(1, seed=31)[0]
    b.write([fresh])
    b.close()
    a.close()
    after = _stamps(db)["usearch-stamp"]
    assert before is not None and after is not None and after.revision == before.revision
    c = _open(db)
    found = c.search(USER, fresh.embedding, 1)  # type: ignore[arg-type]
    assert [m.id for m, _ in found] == [fresh.id]
    assert not _loaded_without_vectors(c)
    c.close()


# -- the stamped copies loaded beside the rows' read (session 21, h10) -------------------


def _searches(store: SQLiteStore) -> list[list[tuple[str, float]]]:
    """The nearest of a few queries, over every row and over the typed learnings (the
    second index's rows)."""
    out = []
    for query in _vectors(3, seed=11):
        for flt in (ALL, ann_kinds.FILTER):
            out.append([(m.id, round(s, 6)) for m, s in store.search(USER, query, 10, flt)])
    return out


def _serial(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, float]]]:
    """:func:`_searches` of a store that loads the stamped copies in the loading thread,
    when they are asked for (as before this change)."""
    with monkeypatch.context() as serial:
        serial.setattr(SQLiteStore, "_beside", lambda self, load: reads.lazy(load))
        store = _open(path)
        try:
            assert _loaded_without_vectors(store)
            return _searches(store)
        finally:
            store.close()


def _loader_waits_for_the_scan(monkeypatch: pytest.MonkeyPatch, *, bm25: bool = False) -> list[str]:
    """Make the rows' read wait (up to 5 s) until the stamped copies' loader has begun
    reading a copy (and, with ``bm25``, the BM25 copy's job, its own since session 27),
    so the loaders run beside it; the threads the copies were read on."""
    begun = threading.Event()
    lexical_begun = threading.Event()
    threads: list[str] = []
    stash_bytes, live = SQLiteStore._stash_bytes, sqlite_load._live
    stash = SQLiteStore._stash

    def loading(self: SQLiteStore, user_id: str, kind: str) -> bytes | None:
        if kind in sqlite_stamps.KINDS:
            threads.append(threading.current_thread().name)
            begun.set()
        return stash_bytes(self, user_id, kind)

    def stashed(self: SQLiteStore, user_id: str, kind: str) -> ann.Stash:
        found = stash(self, user_id, kind)
        if kind != "bm25":
            return found

        def read() -> bytes | None:
            lexical_begun.set()
            return found.read()

        return replace(found, read=read)

    def scan(*args: Any) -> Any:
        # bounds for a stuck test only (each wait ends when its job begins): 5 s was short
        # of a pool thread's first slice under a load of 30 on two cores
        assert begun.wait(60.0)
        assert not bm25 or lexical_begun.wait(60.0)
        return live(*args)

    if bm25:
        monkeypatch.setattr(SQLiteStore, "_stash", stashed)

    monkeypatch.setattr(SQLiteStore, "_stash_bytes", loading)
    monkeypatch.setattr(sqlite_load, "_live", scan)
    return threads


def test_the_stamped_copies_load_on_another_thread_while_the_rows_are_read(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _serial(db, monkeypatch)
    threads = _loader_waits_for_the_scan(monkeypatch)
    store = _open(db)
    try:
        assert _loaded_without_vectors(store)
        assert _searches(store) == expected
    finally:
        store.close()
    # both copies (the first index and the learnings'), on a pool thread, not the caller's
    assert len(threads) == 2
    assert all(t.startswith("engrain-read") for t in threads), threads


def test_first_calls_racing_the_load_get_the_serial_answer(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _serial(db, monkeypatch)
    store = _open(db)
    results: list[list[list[tuple[str, float]]]] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            results.append(_searches(store))
        except BaseException as exc:
            errors.append(exc)

    callers = [threading.Thread(target=call) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(30.0)
    store.close()
    assert errors == [] and len(results) == 4
    assert all(result == expected for result in results)


def test_a_failed_load_beside_raises_the_store_s_error_in_the_caller(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _serial(db, monkeypatch)
    stash_bytes = SQLiteStore._stash_bytes
    threads = _loader_waits_for_the_scan(monkeypatch)
    loading = SQLiteStore._stash_bytes

    def failing(self: SQLiteStore, user_id: str, kind: str) -> bytes | None:
        if kind == sqlite_stamps.FIRST:
            loading(self, user_id, kind)  # begun: the rows' read goes on
            raise StoreError("read from the file failed: disk I/O error")
        return stash_bytes(self, user_id, kind)

    store = _open(db)
    with monkeypatch.context() as broken:
        broken.setattr(SQLiteStore, "_stash_bytes", failing)
        with pytest.raises(StoreError, match="disk I/O error"):
            store.search(USER, _vectors(1, seed=11)[0], 10)
    assert threads and all(t.startswith("engrain-read") for t in threads)
    # nothing was kept of the failed load: the next call loads again, and answers as before
    assert _searches(store) == expected
    assert _loaded_without_vectors(store)
    store.close()


def test_a_copy_saved_over_while_the_rows_are_read_is_not_taken(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process saves a different copy of the first index after the load's stamps
    were read but before the copy is loaded beside the rows' read (outside the load's
    transaction): the copy read is not the one the stamp names, so it is not taken; the
    rows' vectors are read and the answers are the serial ones."""
    expected = _serial(db, monkeypatch)
    store = _open(db)
    memories = store.query(USER)
    store.close()
    keys = ann.memory_keys([m.id for m in memories[:50]])
    other = VectorIndex.build(keys, np.stack([m.embedding for m in memories[:50]]))  # type: ignore[misc]
    stash_bytes = SQLiteStore._stash_bytes

    def saved_over_first(self: SQLiteStore, user_id: str, kind: str) -> bytes | None:
        if kind == sqlite_stamps.FIRST:
            with sqlite3.connect(db) as con:
                con.execute("UPDATE derived_indexes SET data = ? WHERE user_id = ? "
                            "AND kind = 'usearch'", (other.dump(), USER))  # fmt: skip
        return stash_bytes(self, user_id, kind)

    monkeypatch.setattr(SQLiteStore, "_stash_bytes", saved_over_first)
    reopened = _open(db)
    found = _searches(reopened)
    assert not _loaded_without_vectors(reopened)
    reopened.close()
    assert [[i for i, _ in f] for f in found] == [[i for i, _ in f] for f in expected]


def _lexical(store: SQLiteStore) -> list[list[tuple[str, float]]]:
    return [
        [(m.id, round(s, 6)) for m, s in store.lexical_search(USER, text, 10)]
        for text in ("note 3-17", "note 3-400 3-41")
    ]


@pytest.fixture
def saved_bm25(db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``db`` with the user's BM25 index saved too (a small user's is saved here)."""
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 100)
    store = _open(db)
    _lexical(store)
    store.close()  # waits for the BM25 save
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT 1 FROM derived_indexes WHERE kind = 'bm25'").fetchall()
    return db


def test_the_saved_bm25_index_is_read_beside_the_rows_and_answers_the_same(
    saved_bm25: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    original = lexical.LexicalIndex.__init__

    def building(self: lexical.LexicalIndex, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        original(self, *args, **kwargs)

    with monkeypatch.context() as serial:
        serial.setattr(SQLiteStore, "_beside", lambda self, load: reads.lazy(load))
        store = _open(saved_bm25)
        expected = _lexical(store)
        store.close()
    parsed_on: list[str] = []
    parse = lexical_file.parsed

    def spy(*args: Any) -> Any:
        parsed_on.append(threading.current_thread().name)
        return parse(*args)

    monkeypatch.setattr(lexical_file, "parsed", spy)
    monkeypatch.setattr(lexical.LexicalIndex, "__init__", building)
    _loader_waits_for_the_scan(monkeypatch, bm25=True)
    store = _open(saved_bm25)
    assert _lexical(store) == expected
    store.close()
    assert built == []  # the saved copy was taken, not built again
    assert parsed_on and parsed_on[0].startswith("engrain-read"), parsed_on


def test_a_failed_bm25_read_beside_builds_the_index_as_before(
    saved_bm25: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(saved_bm25)
    expected = _lexical(store)
    store.close()
    monkeypatch.setattr(SQLiteStore, "_stash", _failing_bm25_stash(SQLiteStore._stash))
    store = _open(saved_bm25)
    assert _lexical(store) == expected  # built from the texts: the same answers
    assert _loaded_without_vectors(store)
    store.close()


def _failing_bm25_stash(stash: Any) -> Any:
    """``SQLiteStore._stash`` whose BM25 reads fail (as a damaged file's would)."""

    def failing(self: SQLiteStore, user_id: str, kind: str) -> ann.Stash:
        found = stash(self, user_id, kind)
        if kind != "bm25":
            return found

        def read() -> bytes | None:
            raise StoreError("read from the file failed: disk I/O error")

        return replace(found, read=read)

    return failing
