"""A SQLite working set held as columns and its saved image (issue 18: cold start, RSS).

A store reads a user's rows into columns and builds a ``Memory`` only for the rows a call
returns; a large user's columns are saved in ``derived_indexes`` (``store/columns.py``) and
read back by the next process only while they match the rows: the revision, the rowids,
and the access counts and vectors read from the rows themselves. ``PERSIST_MIN_ROWS`` is
forced low so a few memories exercise the image."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import StoreError
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.store import (
    MemoryFilter,
    columns,
    derived_blobs,
    image_refresh,
    lexical_file,
    rows,
    sqlite_load,
    sqlite_rows,
    sqlite_saves,
    texts,
)
from engrain.store.base import Patch
from engrain.store.columns import Stamp, texts_digest
from engrain.store.sqlite import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
USER = "ada"


def _memories(n: int = 12) -> list[Memory]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        vector = rng.standard_normal(8).astype(np.float32)
        out.append(replace(Memory.new(
            USER, f"note {i} – naïve café ☕" + ("\0with a NUL" if i == 3 else ""),
            MemoryType.SEMANTIC if i % 2 else MemoryType.PROCEDURAL,
            Kind.FACT if i % 2 else Kind.PREFERENCE, now=NOW + timedelta(minutes=i),
            embedding=vector / np.linalg.norm(vector),
            project=None if i % 3 else "p1", domains=("work", "home") if i % 4 else (),
            session_id=f"s{i % 2}" if i % 5 else None, key=f"k{i}" if not i % 2 else None,
            event_at=NOW - timedelta(days=i) if i % 3 == 1 else None,
            importance=0.3 + i / 100, confidence=0.9, usefulness=0.25 + i / 50,
            access_count=i, last_accessed_at=NOW + timedelta(seconds=i) if i % 2 else None,
            pinned=i == 4, muted=i == 5, compressed=i == 6, compression_source=i == 7,
            promoted_at=NOW if i == 8 else None, source_session_id="src" if i == 9 else None,
            superseded_by="m0" if i == 10 else None,
            provenance=Provenance(("t1", f"t{i}"), {"via": "test", "n": i}) if i % 3 else
            Provenance(),
        ), id=f"m{i}"))  # fmt: skip
    return out


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 1)
    path = tmp_path / "e.db"
    store = SQLiteStore(path, ann_min_vectors=None)
    store.write(_memories())
    store.write([_memory_of("bob", 0)])  # another user's row between
    store.write(_memories(14)[12:])
    store.close()
    return path


def _memory_of(user: str, i: int) -> Memory:
    return Memory.new(user, f"bob {i}", MemoryType.SEMANTIC, Kind.FACT, now=NOW,
                      embedding=np.ones(8, dtype=np.float32) / np.sqrt(8))  # fmt: skip


class _Spy:
    """Counts loads from the saved image and from the rows."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.image = self.rows = 0
        live, builder = sqlite_load._live, sqlite_load.ColumnsBuilder

        def counted_live(*args: Any) -> Any:
            found = live(*args)
            self.image += found is not None
            return found

        def counted_builder(*args: Any) -> Any:
            self.rows += 1
            return builder(*args)

        monkeypatch.setattr(sqlite_load, "_live", counted_live)
        monkeypatch.setattr(sqlite_load, "ColumnsBuilder", counted_builder)


def _as_rows_hold(store: SQLiteStore) -> dict[str, Memory]:
    """The user's memories as the rows hold them (decoded one by one, not as columns)."""
    ids = [r[0] for r in store._read("SELECT id FROM memories WHERE user_id = ?", (USER,))]
    return {m.id: m for m in store.get(USER, ids)}


def _same(loaded: dict[str, Memory], want: dict[str, Memory]) -> None:
    assert loaded == want  # every field but the vector and the stored count
    counts = {memory_id: m.content_tokens for memory_id, m in want.items()}
    assert {memory_id: m.content_tokens for memory_id, m in loaded.items()} == counts
    for memory_id, memory in want.items():
        assert memory.embedding is not None
        assert np.array_equal(loaded[memory_id].embedding, memory.embedding)


def _image_saved(path: Path) -> None:
    """Load the user's working set in a store that saves its image (waited for at close)."""
    store = SQLiteStore(path, ann_min_vectors=None)
    store.working_set(USER)
    store.close()


def _saved(path: Path) -> bytes | None:
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT data FROM derived_indexes WHERE user_id = ? AND kind = 'columns'", (USER,)
        ).fetchall()
    return bytes(found[0][0]) if found else None


def _put(path: Path, data: bytes) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE derived_indexes SET data = ? WHERE user_id = ? AND kind = 'columns'",
                     (data, USER))  # fmt: skip


def test_columns_hold_every_field_as_the_rows_do_and_the_image_too(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch)
    first = SQLiteStore(db, ann_min_vectors=None)
    _same(dict(first.working_set(USER)), _as_rows_hold(first))
    first.close()  # waits for the image being saved
    assert (spy.rows, spy.image) == (1, 0) and _saved(db) is not None
    second = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(second.working_set(USER))
    assert (spy.rows, spy.image) == (1, 1)
    _same(loaded, _as_rows_hold(second))
    assert list(loaded) == [m.id for m in _memories(14)]  # insertion order
    assert [m.user_id for m in second.working_set("bob").values()] == ["bob"]
    # a listing and a search build their memories together: the same values
    second.close()
    third = SQLiteStore(db, ann_min_vectors=None)
    _same({m.id: m for m in third.query(USER)}, _as_rows_hold(third))
    found = third.search(USER, _memories(14)[7].embedding, 14)  # type: ignore[arg-type]
    _same({m.id: m for m, _ in found}, _as_rows_hold(third))


def test_an_image_is_not_used_once_another_process_changed_the_rows(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_saved(db)
    other = SQLiteStore(db, ann_min_vectors=None)
    memories = _memories(14)
    gone, pinned, fresh = memories[1], memories[2], _memories(15)[14]
    other.write(upserts=[fresh, replace(pinned, pinned=True)], deletes=[gone])
    other.close()
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(reader.working_set(USER))
    assert (spy.rows, spy.image) == (1, 0)  # the stale image was not trusted
    assert gone.id not in loaded and loaded[pinned.id].pinned and fresh.id in loaded
    _same(loaded, _as_rows_hold(reader))
    assert gone.id not in {m.id for m, _ in reader.search(USER, gone.embedding, 15)}  # type: ignore[arg-type]
    reader.close()
    again = SQLiteStore(db, ann_min_vectors=None)
    _same(dict(again.working_set(USER)), _as_rows_hold(again))
    assert (spy.rows, spy.image) == (1, 1)  # the image saved at the new revision


def test_a_patch_in_place_makes_the_image_stale_though_the_rowids_stay(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_saved(db)
    memories = _memories(14)
    other = SQLiteStore(db, ann_min_vectors=None)
    other.write(patches=[Patch(USER, memories[2].id, {"pinned": True, "content": "moved"})])
    other.close()
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = reader.working_set(USER)
    assert (spy.rows, spy.image) == (1, 0)  # only the revision tells: the rows were read
    assert loaded[memories[2].id].pinned and loaded[memories[2].id].content == "moved"
    _same(dict(loaded), _as_rows_hold(reader))


def test_counted_uses_are_read_from_the_rows_not_from_the_image(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_saved(db)
    memories = _memories(14)
    other = SQLiteStore(db, ann_min_vectors=None)
    later = NOW + timedelta(days=3)
    other.record_access(USER, [memories[0].id, memories[0].id, memories[11].id], later)
    other.close()
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = reader.working_set(USER)
    assert spy.image == 1  # counted uses change no revision: the image still holds
    assert loaded[memories[0].id].access_count == memories[0].access_count + 2
    assert loaded[memories[11].id].last_accessed_at == later
    _same(dict(loaded), _as_rows_hold(reader))


@pytest.mark.parametrize("damage", ["flipped byte", "torn", "other rowids", "other user"])
def test_a_damaged_or_mismatched_image_is_ignored(
    db: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    _image_saved(db)
    data = _saved(db)
    assert data is not None
    if damage == "flipped byte":
        data = data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]
    elif damage == "torn":
        data = data[: len(data) // 2]
    else:
        with sqlite3.connect(db) as conn:
            revision = conn.execute("SELECT revision FROM revisions WHERE user_id = ?",
                                    (USER,)).fetchall()[0][0]  # fmt: skip
            names = tuple(r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name"))
        stamp = Stamp(revision, names)
        table = columns.load(data, stamp, USER)
        assert table is not None
        if damage == "other rowids":  # same stamp, same count, rows it was not read from
            data = columns.dump(replace(table, rowids=table.rowids + 1), stamp)
        else:
            assert columns.load(data, stamp, "bob") is None
            data = columns.dump(replace(table, user_id="bob"), stamp)
    _put(db, data)
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    _same(dict(reader.working_set(USER)), _as_rows_hold(reader))
    assert (spy.rows, spy.image) == (1, 0)


def test_a_saved_bm25_index_is_checked_against_the_texts_digest_of_the_image(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 1)
    first = SQLiteStore(db, ann_min_vectors=None)
    want = first.lexical_search(USER, "café note", 5)
    first.close()
    built = []
    monkeypatch.setattr(lexical_file.LexicalIndex, "__init__",
                        lambda self, docs: built.append(docs))  # fmt: skip
    reader = SQLiteStore(db, ann_min_vectors=None)
    assert [(m.id, s) for m, s in reader.lexical_search(USER, "café note", 5)] == [
        (m.id, s) for m, s in want
    ]
    assert built == []  # read back: the image's digest matched the saved index
    texts = [m.content for m in _memories(14)]
    assert lexical_file.fingerprint(texts) == lexical_file.fingerprint_of(
        texts_digest(len(texts), "\0".join(texts).encode())
    )


def test_a_rebuilt_bm25_index_is_saved_with_the_fingerprint_it_was_checked_against(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 1)
    first = SQLiteStore(db, ann_min_vectors=None)
    want = first.lexical_search(USER, "café note", 5)
    first.close()
    # lexical.py changed (an upgrade): the saved copy is stale, built again and saved
    monkeypatch.setattr(lexical_file, "_tokenizer_digest", lambda: b"another tokenizer")
    joined = []  # the documents' texts joined to fingerprint them: not done to save
    fingerprint = lexical_file.fingerprint
    monkeypatch.setattr(lexical_file, "fingerprint",
                        lambda docs: joined.append(len(docs)) or fingerprint(docs))  # fmt: skip
    reader = SQLiteStore(db, ann_min_vectors=None)
    assert [(m.id, s) for m, s in reader.lexical_search(USER, "café note", 5)] == [
        (m.id, s) for m, s in want
    ]
    reader.close()  # waits for the save
    assert joined == []
    with sqlite3.connect(db) as con:
        saved = derived_blobs.read(con, USER, "bm25")
    texts = [m.content for m in _memories(14)]
    assert lexical_file.load(saved, texts) is not None  # the new tokenizer's copy
    monkeypatch.setattr(lexical_file, "fingerprint", fingerprint)
    built = []
    monkeypatch.setattr(lexical_file.LexicalIndex, "__init__",
                        lambda self, docs: built.append(docs))  # fmt: skip
    again = SQLiteStore(db, ann_min_vectors=None)
    assert [(m.id, s) for m, s in again.lexical_search(USER, "café note", 5)] == [
        (m.id, s) for m, s in want
    ]
    assert built == []  # the copy saved is taken


def test_writes_and_counted_uses_leave_a_published_snapshot_as_it_was(db: Path) -> None:
    store = SQLiteStore(db, ann_min_vectors=None)
    memories = _memories(14)
    held = store.working_set(USER)
    before = dict(held)
    store.record_access(USER, [memories[3].id], NOW + timedelta(days=1))
    store.write(upserts=[replace(memories[4], content="edited", pinned=False)],
                deletes=[memories[5]])  # fmt: skip
    assert dict(held) == before  # the reader's mapping: the memories as they were
    now = store.working_set(USER)
    assert now[memories[3].id].access_count == memories[3].access_count + 1
    assert now[memories[4].id].content == "edited" and memories[5].id not in now
    assert [m.id for m in store.query(USER, MemoryFilter(pinned=True))] == []
    assert store.lexical_search(USER, "edited", 1)[0][0].id == memories[4].id
    _same(dict(now), _as_rows_hold(store))


def test_built_memories_are_kept_until_their_row_changes(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(db, ann_min_vectors=None)
    memories = _memories(14)
    view = store.working_set(USER)
    assert view[memories[0].id] is view[memories[0].id]  # one object per row
    kept = store.working_set(USER)[memories[1].id]
    store.record_access(USER, [memories[0].id], NOW)
    assert store.working_set(USER)[memories[1].id] is kept  # untouched rows keep theirs
    monkeypatch.setattr(rows, "DECODED_MAX", 2)  # a full cache drops half: same values
    _same(dict(store.working_set(USER)), _as_rows_hold(store))


def _image_revision(path: Path) -> int | None:
    """The revision the saved image is stamped with (``None``: none saved)."""
    data = _saved(path)
    if data is None:
        return None
    with sqlite3.connect(path) as conn:
        names = tuple(r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name"))
        revision = conn.execute("SELECT revision FROM revisions WHERE user_id = ?",
                                (USER,)).fetchall()[0][0]  # fmt: skip
    for stamped in (revision, *range(revision - 1, -1, -1)):
        if columns.load(data, Stamp(stamped, names), USER) is not None:
            return int(stamped)
    return None


def _revision(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT revision FROM revisions WHERE user_id = ?",
                                (USER,)).fetchall()[0][0])  # fmt: skip


def test_a_process_that_only_patched_rows_saves_the_image_it_holds(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promotion (a patch in place) no longer leaves the image stale for the next
    process: the writer saves it from its own working set when it closes."""
    _image_saved(db)
    memories = _memories(14)
    writer = SQLiteStore(db, ann_min_vectors=None)
    writer.working_set(USER)
    writer.write(patches=[Patch(USER, memories[2].id, {"pinned": True, "content": "moved"}),
                          Patch(USER, memories[9].id, {"domains": (), "provenance": Provenance(),
                                                       "superseded_by": "m1"})])  # fmt: skip
    writer.record_access(USER, [memories[2].id], NOW + timedelta(days=2))
    writer.close()
    assert _image_revision(db) == _revision(db)
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(reader.working_set(USER))
    assert (spy.rows, spy.image) == (0, 1)  # the image, not every row
    assert loaded[memories[2].id].pinned and loaded[memories[2].id].content == "moved"
    assert loaded[memories[9].id].superseded_by == "m1" and loaded[memories[9].id].domains == ()
    _same(loaded, _as_rows_hold(reader))
    assert reader.lexical_search(USER, "moved", 1)[0][0].id == memories[2].id
    reader.close()


def test_the_image_is_refreshed_while_the_process_runs(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("engrain.store.sqlite_saves.IMAGE_REFRESH_SECONDS", 0.0)
    _image_saved(db)
    writer = SQLiteStore(db, ann_min_vectors=None)
    writer.working_set(USER)
    writer.write(patches=[Patch(USER, _memories(14)[4].id, {"muted": True})])
    for thread in threading.enumerate():
        if thread.name == "engrain-columns":
            thread.join()
    assert _image_revision(db) == _revision(db)  # saved before the store closes
    writer.close()


def test_a_slow_refresh_waits_longer_before_the_next(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh may take at most IMAGE_REFRESH_SHARE of the time: after one that took
    10 s the next waits 500 s, so a patch soon after leaves the image stale until then
    (or until the store closes)."""
    monkeypatch.setattr("engrain.store.sqlite_saves.IMAGE_REFRESH_SECONDS", 0.0)
    _image_saved(db)
    stale = _saved(db)
    writer = SQLiteStore(db, ann_min_vectors=None)
    writer.working_set(USER)
    assert writer._refresh_interval(USER) == 0.0
    writer._refresh_cost[USER] = 10.0
    assert writer._refresh_interval(USER) == pytest.approx(10.0 / sqlite_saves.IMAGE_REFRESH_SHARE)
    writer._refreshed[USER] = time.monotonic()
    writer.write(patches=[Patch(USER, _memories(14)[4].id, {"muted": True})])
    assert not [t for t in threading.enumerate() if t.name == "engrain-columns"]
    assert _saved(db) == stale  # not refreshed yet
    writer.close()
    assert _image_revision(db) == _revision(db)  # the close still saves it


@pytest.mark.parametrize("between", ["another process's commit", "this process's write"])
def test_no_image_is_saved_from_a_working_set_written_since_it_was_read(
    db: Path, monkeypatch: pytest.MonkeyPatch, between: str
) -> None:
    """The image is stamped with the revision the working set was current at; a write
    between that read and the transaction that saves it (by another process, or by this
    one) stops the save: the stale image stays, and the next process reads the rows."""
    _image_saved(db)
    memories = _memories(14)
    writer = SQLiteStore(db, ann_min_vectors=None)
    writer.working_set(USER)
    writer.write(patches=[Patch(USER, memories[2].id, {"pinned": True})])
    built = image_refresh.patched_columns
    late = Patch(USER, memories[6].id, {"content": "late"})

    def racing(*args: Any) -> Any:
        table = built(*args)
        if between == "this process's write":
            writer.write(patches=[late])
        else:
            other = SQLiteStore(db, ann_min_vectors=None)
            other.write(patches=[late])
            other.close()
        return table

    monkeypatch.setattr(image_refresh, "patched_columns", racing)
    stale = _saved(db)
    writer._refresh_image(USER)
    assert _saved(db) == stale
    monkeypatch.setattr(image_refresh, "patched_columns", built)
    writer._stale_images.clear()  # the close would try again (and then succeed): not here
    writer.close()
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(reader.working_set(USER))
    assert (spy.rows, spy.image) == (1, 0)
    assert loaded[memories[2].id].pinned and loaded[memories[6].id].content == "late"
    _same(loaded, _as_rows_hold(reader))
    reader.close()


def test_an_inserted_or_deleted_row_keeps_the_image_from_being_saved_by_the_writer(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_saved(db)
    memories = _memories(14)
    writer = SQLiteStore(db, ann_min_vectors=None)
    writer.working_set(USER)
    writer.write(patches=[Patch(USER, memories[2].id, {"pinned": True})], deletes=[memories[3]])
    writer.close()
    assert _image_revision(db) != _revision(db)
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(reader.working_set(USER))
    assert (spy.rows, spy.image) == (1, 0) and memories[3].id not in loaded
    _same(loaded, _as_rows_hold(reader))
    reader.close()


def test_the_ids_are_the_tables_own_blob_and_find_every_row(db: Path) -> None:
    """Ids are held once: a loaded working set's ids are the table's blob (no ``str`` per
    row, no copy), and its positions find each row, after a load and after writes."""
    store = SQLiteStore(db, ann_min_vectors=None)
    store.working_set(USER)
    loaded = store._cache(USER).snapshot.arrays
    assert loaded is not None and loaded.rows.base is not None
    assert loaded.ids.strings is loaded.rows.base.ids
    store.write([_memories(15)[14]])
    arrays = store._cache(USER).snapshot.arrays  # loaded, then one row appended
    assert arrays is not None
    assert list(arrays.position) == arrays.ids.tolist()
    assert [arrays.position[i] for i in arrays.ids.tolist()] == list(range(len(arrays)))
    counted = arrays.ids[3]
    before = store.get(USER, [counted])[0].access_count
    store.record_access(USER, [counted, "not-a-memory", counted], NOW)  # touch: one search
    assert store.get(USER, [counted])[0].access_count == before + 2
    gone = arrays.ids[0]
    store.write(deletes=store.get(USER, [gone]))
    after = store._cache(USER).snapshot.arrays
    assert after is not None and gone not in after.position
    assert [after.position[i] for i in after.ids.tolist()] == list(range(len(after)))
    assert [m.id for m in after.memories] == after.ids.tolist()
    store.close()


def test_a_loaded_working_set_shares_the_tables_arrays_and_a_patch_copies_them(
    db: Path,
) -> None:
    """Columns whose type is already the table's are the table's arrays (no second copy);
    a write of a row copies the column it changes, so the table and older snapshots keep
    their values."""
    store = SQLiteStore(db, ann_min_vectors=None)
    store.working_set(USER)
    loaded = store._cache(USER).snapshot.arrays
    assert loaded is not None and loaded.rows.base is not None
    table = loaded.rows.base
    assert loaded.importance is table.importance and loaded.muted is table.muted
    before = table.importance.copy()
    target = store.get(USER, [loaded.ids[2]])[0]
    store.write([replace(target, importance=0.123, muted=not target.muted)])
    after = store._cache(USER).snapshot.arrays
    assert after is not None and after.importance is not table.importance
    assert after.importance[2] == 0.123 and bool(after.muted[2]) is not target.muted
    assert np.array_equal(table.importance, before) and np.array_equal(loaded.importance, before)
    assert bool(loaded.muted[2]) is target.muted
    store.close()


def _loaded_from_image(path: Path) -> tuple[SQLiteStore, Any]:
    """A store whose working set of USER was loaded from the saved image, and its table."""
    _image_saved(path)
    store = SQLiteStore(path, ann_min_vectors=None)
    store.working_set(USER)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None and arrays.rows.base is not None
    return store, arrays.rows.base


def test_a_working_set_loaded_from_its_image_keeps_no_texts_nor_the_images_bytes(
    db: Path,
) -> None:
    store, table = _loaded_from_image(db)
    assert isinstance(table.content, texts.RowTexts)
    data = _saved(db)
    assert data is not None
    # every other column owns its memory: none is a view of the image's bytes
    assert all(getattr(table, name).base is None for name in columns._ARRAYS)
    assert table.rowids.base is None
    assert all(getattr(table, name).codes.base is None for name in columns._CODES)
    assert len(table.ids.blob) < len(data) and len(table.content_hash.blob) < len(data)
    _same(dict(store.working_set(USER)), _as_rows_hold(store))
    store.close()


def test_the_texts_of_a_listing_are_read_in_one_query(db: Path) -> None:
    store, table = _loaded_from_image(db)
    reads: list[int] = []
    read = table.content._read

    def counted(rows: Any) -> Any:
        reads.append(len(rows))
        return read(rows)

    table.content._read = counted
    listed = store.query(USER)
    assert reads == [len(listed)] and len(listed) == 14
    assert [m.content for m in listed] == [
        m.content for m in store.get(USER, [m.id for m in listed])
    ]
    store.close()


def test_texts_are_never_another_rows_and_a_replaced_memory_is_found_by_its_id(
    db: Path,
) -> None:
    """A reader still holding a table loaded before another process replaced one memory
    (a new rowid) and forgot another reads the first's new text by its id, and no text
    for the second (never the text of whatever row holds its rowid now)."""
    store, table = _loaded_from_image(db)
    memories = _memories(14)
    rows_of = {table.ids[i]: i for i in range(len(table))}
    other = SQLiteStore(db, ann_min_vectors=None)
    other.write(deletes=[memories[13]])  # the user's last row: SQLite gives its rowid again
    other.write([replace(_memory_of(USER, 7), id="newest")])
    other.write([replace(memories[1], content="replaced")])
    other.close()
    with sqlite3.connect(db) as conn:
        taken = conn.execute("SELECT rowid FROM memories WHERE id = 'newest'").fetchall()
    assert taken[0][0] == table.rowids[rows_of[memories[13].id]]
    assert table.content[rows_of[memories[1].id]] == "replaced"
    assert table.content[rows_of[memories[13].id]] == ""
    assert table.content[rows_of[memories[0].id]] == memories[0].content
    store.close()


def test_another_process_counting_uses_keeps_the_working_set_with_its_counts(db: Path) -> None:
    """Counted uses change no revision: the working set is kept (not reloaded) and its
    access counts and last accesses are read again."""
    memories = _memories(14)
    reader = SQLiteStore(db, ann_min_vectors=None)
    kept = reader._cache(USER)
    before = reader.working_set(USER)[memories[0].id]
    untouched = reader.working_set(USER)[memories[1].id]
    other = SQLiteStore(db, ann_min_vectors=None)
    later = NOW + timedelta(days=4)
    other.record_access(USER, [memories[0].id, memories[0].id, memories[3].id], later)
    other.close()
    assert reader._cache(USER) is kept
    now = reader.working_set(USER)
    assert now[memories[0].id].access_count == before.access_count + 2
    assert now[memories[0].id].last_accessed_at == later
    assert now[memories[3].id].access_count == memories[3].access_count + 1
    assert now[memories[1].id] is untouched  # built memories of other rows are kept
    _same(dict(now), _as_rows_hold(reader))
    reader.close()


@pytest.mark.parametrize("write", ["patch", "upsert", "forget", "own write then patch"])
def test_another_process_writing_rows_drops_the_working_set(db: Path, write: str) -> None:
    memories = _memories(14)
    reader = SQLiteStore(db, ann_min_vectors=None)
    kept = reader._cache(USER)
    other = SQLiteStore(db, ann_min_vectors=None)
    if write == "patch":
        other.write(patches=[Patch(USER, memories[2].id, {"content": "patched"})])
    elif write == "upsert":
        other.write([replace(memories[2], content="patched")])
    elif write == "forget":
        other.write(deletes=[memories[2]])
    else:  # this process writes after the other's commit: its own revision is not enough
        other.write(patches=[Patch(USER, memories[2].id, {"content": "patched"})])
        reader.write(patches=[Patch(USER, memories[4].id, {"pinned": True})])
    other.close()
    assert reader._cache(USER) is not kept
    now = dict(reader.working_set(USER))
    assert (
        memories[2].id not in now if write == "forget" else now[memories[2].id].content == "patched"
    )
    _same(now, _as_rows_hold(reader))
    reader.close()


def test_this_process_own_writes_keep_its_working_set_current(db: Path) -> None:
    """A write by this process leaves the revision its working set holds: another
    process's counted uses afterwards still keep it."""
    memories = _memories(14)
    reader = SQLiteStore(db, ann_min_vectors=None)
    kept = reader._cache(USER)
    reader.write(patches=[Patch(USER, memories[4].id, {"pinned": True})])
    assert reader._cache(USER) is kept
    other = SQLiteStore(db, ann_min_vectors=None)
    other.record_access(USER, [memories[5].id], NOW)
    other.close()
    assert reader._cache(USER) is kept
    _same(dict(reader.working_set(USER)), _as_rows_hold(reader))
    reader.close()


def test_a_working_set_is_checked_only_when_its_user_is_used_again(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After another process's commit, only the users a call asks for are checked (and
    their counts read again); other cached users wait for their next use."""
    reader = SQLiteStore(db, ann_min_vectors=None)
    kept = {user: reader._cache(user) for user in (USER, "bob")}
    checked: list[Any] = []
    recount = type(kept[USER]).recount

    def counted(self: Any, counts: Any) -> bool:
        checked.append(self)
        return recount(self, counts)

    monkeypatch.setattr(type(kept[USER]), "recount", counted)
    other = SQLiteStore(db, ann_min_vectors=None)
    bob = next(iter(reader.working_set("bob")))
    other.record_access("bob", [bob], NOW)
    other.close()
    assert reader._cache(USER) is kept[USER] and checked == [kept[USER]]
    assert reader._cache(USER) is kept[USER] and checked == [kept[USER]]  # checked once
    assert reader._cache("bob") is kept["bob"] and checked == [kept[USER], kept["bob"]]
    assert reader.working_set("bob")[bob].access_count == 1
    reader.close()


@pytest.mark.parametrize("direct", [True, False])
def test_memories_built_in_one_go_equal_those_built_one_by_one(
    db: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """``store/built.py`` fills a memory's fields directly (or through ``__init__`` when
    the class would not allow it): every field equals the one ``Columns.memory`` builds,
    for rows in any order, with and without vectors and counted uses."""
    from engrain.store import built

    monkeypatch.setattr(built, "DIRECT", direct)
    _image_saved(db)
    store = SQLiteStore(db, ann_min_vectors=None)
    arrays = store._cache(USER)._built().arrays
    assert arrays is not None and arrays.rows.base is not None
    table = arrays.rows.base
    rows = [13, 0, 5, 3, 8, 10, 9, 7, 6, 4, 1, 2, 11, 12]
    vectors = [None if i % 4 == 1 else np.full(8, i, dtype=np.float32) for i in range(14)]
    counts = list(range(100, 114))
    last = [columns.NO_TIME if i % 3 else columns.micros(NOW + timedelta(hours=i))
            for i in range(14)]  # fmt: skip
    got = built.memories(table, rows, vectors, counts, last)
    want = [table.memory(row, vectors[i], counts[i], last[i]) for i, row in enumerate(rows)]
    assert got == want and all(type(m) is Memory for m in got)
    for a, b in zip(got, want, strict=True):
        assert vars(a).keys() == vars(b).keys()
        assert (a.embedding is None) == (b.embedding is None)
        assert a.embedding is None or a.embedding is b.embedding
        assert a.created_at.tzinfo is UTC and list(vars(a)) == list(vars(b))
    store.close()


def test_prefetched_texts_stay_when_the_kept_ones_start_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prefetch that overflows the kept texts keeps its own rows' texts, those kept
    already included: the caller reads all of them next, and a dropped one would cost a
    query of its own (issue 18)."""
    monkeypatch.setattr(texts, "KEPT_MAX", 4)
    reads: list[list[int]] = []

    def read(rows: Sequence[int]) -> list[str | None]:
        reads.append(list(rows))
        return [f"text {row}" for row in rows]

    column = texts.RowTexts(10, read)
    column.prefetch([0, 1, 2])
    column.prefetch([2, 3, 4])  # 3 kept + 2 more > 4: starts over, row 2 with them
    assert reads == [[0, 1, 2], [3, 4]]
    assert [column[row] for row in (2, 3, 4)] == ["text 2", "text 3", "text 4"]
    assert reads == [[0, 1, 2], [3, 4]]  # nothing read alone
    assert column[0] == "text 0"  # dropped when the kept ones started over: read alone
    assert reads[-1] == [0]


def test_an_image_holds_no_texts_and_its_table_reads_them_from_the_rows(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _image_saved(db)
    data = _saved(db)
    assert data is not None
    memories = _memories(14)
    assert not any(m.content.encode("utf-8") in data for m in memories)
    assert memories[7].id.encode() in data and memories[7].content_hash.encode() in data
    with sqlite3.connect(db) as conn:
        names = tuple(r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name"))
    loaded = columns.load(data, Stamp(_revision(db), names), USER)
    assert loaded is not None and len(loaded.content) == len(memories)
    with pytest.raises(StoreError):
        loaded.content[0]  # the texts are not in the image
    # the digest of the texts is: a saved BM25 index is checked against it
    assert loaded.content_digest == texts_digest(
        len(memories), "\0".join(m.content for m in memories).encode("utf-8", "surrogatepass")
    )
    spy = _Spy(monkeypatch)
    reader = SQLiteStore(db, ann_min_vectors=None)
    _same(dict(reader.working_set(USER)), _as_rows_hold(reader))
    assert (spy.rows, spy.image) == (0, 1)
    reader.close()


def test_a_load_without_a_reader_of_texts_reads_the_rows(db: Path) -> None:
    _image_saved(db)
    store = SQLiteStore(db, ann_min_vectors=None)
    conn = store._db
    conn.execute("BEGIN")
    try:
        loaded = sqlite_load.read(
            conn, USER, lambda: _saved(db), sqlite_rows.from_row, texts=None
        )  # fmt: skip
    finally:
        conn.execute("COMMIT")
    assert loaded.table is not None and loaded.save is not None  # read from the rows
    assert loaded.table.columns.content.all() == [m.content for m in _memories(14)]
    store.close()


@pytest.mark.parametrize(
    "items",
    [
        [],
        [""],
        ["", ""],
        ["a", "", "naïve café ☕", "\ud800 lone surrogate", "x"],
        ["with a \0 NUL", "b", "\0"],  # entries holding NUL: read one by one
        ["m-1", "m-2", "\0"],
    ],
)
def test_strings_read_all_at_once_as_one_by_one(items: list[str]) -> None:
    strings = columns.Strings.of(items)
    assert strings.all() == items == [strings[i] for i in range(len(items))]
    # a view into a larger blob (an image read in place): offsets shifted
    shifted = columns.Strings(b"head\0" + strings.blob + b"\0tail", strings.at + 5)
    assert shifted.all() == items


def test_strings_read_all_at_once_on_random_texts() -> None:
    rng = np.random.default_rng(3)
    alphabet = ["a", "é", "☕", "\0", " ", "\ud83d", "\U0001f600", "z"]
    for _ in range(200):
        items = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 6))))
                 for _ in range(int(rng.integers(0, 8)))]  # fmt: skip
        strings = columns.Strings.of(items)
        assert strings.all() == items


def test_an_image_load_reads_the_uses_of_used_rows_only_and_the_rest_as_never_used(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts of a load from the image come from ``uses`` for the memories used
    (``sqlite_load._USED``) and are 0 and none for the others: a row whose ``uses`` row is
    missing, a row used once with its count set back to 0 but its time kept, and rows
    never used load as the rows hold them."""
    spy = _Spy(monkeypatch)
    first = SQLiteStore(db, ann_min_vectors=None)
    first.working_set(USER)
    first.close()  # the image saved
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM uses WHERE user_id = ? AND id = 'm3'", (USER,))
        con.execute("UPDATE uses SET access_count = 0 WHERE user_id = ? AND id = 'm5'", (USER,))
    second = SQLiteStore(db, ann_min_vectors=None)
    loaded = dict(second.working_set(USER))
    assert spy.image == 1  # from the image (the uses table is not the image's business)
    rows = _as_rows_hold(second)
    _same(loaded, rows)
    assert (loaded["m3"].access_count, loaded["m3"].last_accessed_at) == (0, None)
    assert loaded["m5"].access_count == 0 and loaded["m5"].last_accessed_at is not None
    assert loaded["m7"].access_count == 7 and loaded["m0"].access_count == 0
    second.close()
