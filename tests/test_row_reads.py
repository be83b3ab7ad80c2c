"""The reads of a large SQLite user's rows that one ``context()`` makes (issue 18, session
10): the texts of the memories a search builds come in the same read as the vectors it
scores with (``store/cache.py``, ``SQLiteStore._row_vectors``), so the table's
:class:`~engrain.store.texts.RowTexts` does not read them again; a text is kept only from
a row that still holds the memory.

As in tests/test_ann_int8.py the index is built inside the call and ``PERSIST_MIN_ROWS`` is
forced low so the working set is loaded from its image (texts left in the store)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind
from engrain.store import MemoryFilter, ann_kinds, columns, texts, vector_search
from engrain.store.arrays import SMALL_FIELDS, Arrays
from engrain.store.base import Patch
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _indexed, _memories, _vectors
from tests.test_columnar import NOW


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    # preferences searched over a copy, not through the learnings' own index
    monkeypatch.setattr(ann_kinds, "INDEXED_KINDS", frozenset())
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 1)
    path = tmp_path / "engrain.db"
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        store.write(_memories(400))
        store.working_set(USER)  # its image saved at close
    return path


def _loaded(store: SQLiteStore) -> tuple[Arrays, list[int]]:
    """The user's arrays once the index holds every row, with the table's texts read from
    the store; each read of the table's own text reader is counted (rows read)."""
    assert store.wait_for_index(USER)
    store.search(USER, _vectors(1, seed=1)[0], 5)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None and arrays.matrix is None and arrays.held is not None
    base = arrays.rows.base
    assert base is not None and isinstance(base.content, texts.RowTexts)
    reads: list[int] = []
    read = base.content._read

    def counted(rows: Sequence[int]) -> Any:
        reads.append(len(rows))
        return read(rows)

    base.content._read = counted
    return arrays, reads


def _texts(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, content FROM memories WHERE user_id = ?", (USER,)))


def test_a_search_builds_its_memories_with_the_texts_read_beside_their_vectors(
    db: Path,
) -> None:
    want = _texts(db)
    with closing(_indexed(db)) as store:
        _, reads = _loaded(store)
        found = store.search(USER, _vectors(1, seed=7)[0], 30)
        assert len(found) == 30
        assert [m.content for m, _ in found] == [want[m.id] for m, _ in found]
        assert reads == []  # no second read of the rows for their texts


def test_memories_built_without_their_vectors_read_them_and_their_texts_at_once(
    db: Path,
) -> None:
    want = _texts(db)
    with closing(_indexed(db)) as store:
        arrays, reads = _loaded(store)
        rows = list(range(0, 400, 7))
        built = arrays.memories_of(rows)
        assert [m.id for m in built] == [str(arrays.ids[row]) for row in rows]
        assert [m.content for m in built] == [want[m.id] for m in built]
        assert reads == []


def test_a_text_is_never_kept_from_a_row_that_holds_another_memory_now(db: Path) -> None:
    """A reader still holding a table loaded before another process forgot a memory and
    gave its rowid to a new one: the vectors read for that row are not its own, and neither
    is its text, which is not kept (the texts reader finds nothing by its id: "")."""
    with closing(_indexed(db)) as store:
        arrays, reads = _loaded(store)
        base = arrays.rows.base
        assert base is not None
        last = int(np.argmax(base.rowids))
        gone = store.get(USER, [str(arrays.ids[last])])[0]
        stranger = _memories(1, seed=99)[0]
        with closing(SQLiteStore(db, ann_min_vectors=None)) as other:
            other.write(deletes=[gone])
            other.write([stranger])  # SQLite gives it the largest rowid again
        arrays.vectors(np.array([last, 0], dtype=np.intp), texts=True)
        assert reads == []
        assert base.content[0] == _texts(db)[str(arrays.ids[0])]  # kept: not read again
        assert reads == []
        assert base.content[last] == ""  # not the stranger's: read (by rowid, then id)
        assert reads == [1]


def test_kept_texts_are_served_without_a_read_and_start_over_like_prefetched_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(texts, "KEPT_MAX", 4)
    reads: list[list[int]] = []

    def read(rows: Sequence[int]) -> list[str | None]:
        reads.append(list(rows))
        return [f"read {row}" for row in rows]

    column = texts.RowTexts(10, read)
    column.keep([0, 1, 2], ["a", "b", "c"])
    column.prefetch([1, 2])
    assert reads == [] and [column[row] for row in (0, 1, 2)] == ["a", "b", "c"]
    column.keep([5, 6], ["f", "g"])  # 3 kept + 2 > 4: starts over with these
    assert column[5] == "f" and column[6] == "g" and reads == []
    assert column[0] == "read 0" and reads == [[0]]


def test_a_deferred_batch_is_read_once_when_one_of_its_texts_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search's rows deferred (``RowTexts.defer``) are not read until a text of theirs is
    asked for; then the batch's texts not kept are read in one query, and kept. A batch
    pushed out by newer ones is read a row at a time; rows kept are never deferred."""
    monkeypatch.setattr(texts, "BATCHES_MAX", 2)
    reads: list[list[int]] = []

    def read(rows: Sequence[int]) -> list[str | None]:
        reads.append(list(rows))
        return [f"read {row}" for row in rows]

    column = texts.RowTexts(20, read)
    column.keep([0], ["a"])
    column.defer([0, 1, 2, 3])
    assert reads == []  # nothing read until asked
    assert column[2] == "read 2" and reads == [[1, 2, 3]]  # its batch, the kept 0 left out
    assert [column[row] for row in (0, 1, 3)] == ["a", "read 1", "read 3"]
    assert reads == [[1, 2, 3]]
    column.defer([4, 5])
    column.defer([6, 7])
    column.defer([8, 9])  # the third batch pushes out the first: 4 and 5 are read alone
    assert column[9] == "read 9" and reads[-1] == [8, 9]
    assert column[4] == "read 4" and reads[-1] == [4]
    assert column[6] == "read 6" and reads[-1] == [6, 7]
    prefetched = len(reads)
    column.defer([10, 11, 12])
    column.prefetch([11])  # a memory built: its own text only
    assert reads[-1] == [11] and column[11] == "read 11" and len(reads) == prefetched + 1
    assert column[12] == "read 12" and reads[-1] == [10, 12]  # the rest of the batch


def test_a_patch_that_changes_no_column_keeps_the_filters_masks_and_subsets(
    db: Path, tmp_path: Path
) -> None:
    """A promotion (or any patch of fields no filter reads) copies no column and keeps the
    masks, counts and vector subsets the filters computed (the next call recomputes none);
    a patch of a filtered field (a mute) copies that column only and drops them. Searches
    answer as a store that reads the rows afresh."""
    flt = MemoryFilter(include_muted=False)
    learnings = MemoryFilter(kinds=(Kind.PREFERENCE,), include_muted=False)
    query = _vectors(1, seed=11)[0]
    with closing(_indexed(db)) as store:
        _loaded(store)
        store.search_many(USER, query, [(10, flt), (10, learnings)])
        before = store._cache(USER).snapshot.arrays
        assert before is not None and flt in before.masks and learnings in before.subsets
        target = store.search(USER, query, 1, flt)[0][0]
        store.write(patches=[Patch(USER, target.id, {"promoted_at": NOW})])
        after = store._cache(USER).snapshot.arrays
        assert after is not None and after is not before
        assert after.masks is before.masks and after.subsets is before.subsets
        assert after.counted is before.counted
        assert all(getattr(after, name) is getattr(before, name) for name in SMALL_FIELDS)
        assert store.get(USER, [target.id])[0].promoted_at == NOW
        store.write(patches=[Patch(USER, target.id, {"muted": True})])
        muted = store._cache(USER).snapshot.arrays
        assert muted is not None and muted.masks == {} and muted.subsets == {}
        changed = [n for n in SMALL_FIELDS if getattr(muted, n) is not getattr(after, n)]
        assert changed == ["muted"] and not after.muted[after.position[target.id]]
        pool = store.search(USER, query, 10, flt)  # through the index: approximate
        assert len(pool) == 10 and target.id not in {m.id for m, _ in pool}
        assert not any(m.muted for m, _ in pool)
        with closing(SQLiteStore(db, ann_min_vectors=None)) as fresh:  # the subset: exact
            got = [(m.id, round(s, 5)) for m, s in store.search(USER, query, 10, learnings)]
            want = [(m.id, round(s, 5)) for m, s in fresh.search(USER, query, 10, learnings)]
            assert got == want and target.id not in dict(got)
