"""The per-call work of a large SQLite user made cheaper without changing what it gives
(issue 18, session 12): memories built from the columns with the caller's ids, times made
without keyword parsing and coded columns asked once per code (``store/built.py``); a
counted use's copy of a memory filled directly (``store/rows.py``); the rows' vectors and
texts read by rowid without object arrays (``SQLiteStore._row_vectors``)."""

from __future__ import annotations

import copy
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.store import built, columns, rows
from engrain.store.sqlite import SQLiteStore
from tests.test_columnar import NOW, USER, _image_saved
from tests.test_columnar import db as db  # the fixture


def test_memories_built_with_the_callers_ids_equal_those_built_one_by_one(db: Path) -> None:
    """Given the rows' ids (``rows_memories`` has them decoded already), ``built.memories``
    builds the same memories, field for field and in the same field order, as
    ``Columns.memory`` row by row (rows with and without domains, provenance, times)."""
    _image_saved(db)
    store = SQLiteStore(db, ann_min_vectors=None)
    arrays = store._cache(USER)._built().arrays
    assert arrays is not None and arrays.rows.base is not None
    table = arrays.rows.base
    order = [13, 0, 5, 3, 8, 10, 9, 7, 6, 4, 1, 2, 11, 12]
    vectors = [None if i % 4 == 1 else np.full(8, i, dtype=np.float32) for i in range(14)]
    counts = list(range(100, 114))
    last = [columns.NO_TIME if i % 3 else columns.micros(NOW + timedelta(hours=i))
            for i in range(14)]  # fmt: skip
    ids = [str(table.ids[row]) for row in order]
    got = built.memories(table, order, vectors, counts, last, ids)
    want = [table.memory(row, vectors[i], counts[i], last[i]) for i, row in enumerate(order)]
    assert got == want and [m.id for m in got] == ids
    for a, b in zip(got, want, strict=True):
        assert list(vars(a)) == list(vars(b))
        assert a.provenance == b.provenance and a.domains == b.domains
    assert len({m.provenance.turn_ids for m in got}) > 1  # rows with and without provenance
    store.close()


def test_times_are_those_of_from_micros() -> None:
    """``built._times`` is ``columns.from_micros`` of each value: missing, the epoch, before
    it, and the limits of ``datetime``, each an aware UTC time."""
    values = [columns.NO_TIME, 0, -1, 1, columns.micros(NOW), -62_135_596_800_000_000,
              253_402_300_799_999_999, 1_700_000_000_123_456]  # fmt: skip
    got = built._times(values)
    assert got == [columns.from_micros(v) for v in values]
    assert got[0] is None and all(t.tzinfo is UTC for t in got[1:] if t is not None)


def test_a_coded_column_is_asked_once_per_code() -> None:
    """``built._by_code`` gives each row its value, asking once per code and once for each
    row without a code (a default made per row stays one object per row, as before)."""
    asked: list[int] = []
    codes = [2, -1, 2, 0, -1, 0, 2]

    def value(row: int) -> object:
        asked.append(row)
        return ("shared", codes[row]) if codes[row] >= 0 else object()

    out = built._by_code(codes, list(range(7)), value)
    assert asked == [0, 1, 3, 4]
    assert out[0] is out[2] is out[6] and out[3] is out[5] and out[1] is not out[4]
    assert out[0] == ("shared", 2) and out[3] == ("shared", 0)


def _memory() -> Memory:
    return Memory.new(USER, "the deploy runs on Fridays", MemoryType.SEMANTIC, Kind.FACT,
                      now=NOW, domains=("ops",), provenance=Provenance(("t1",), {"a": 1}),
                      embedding=np.ones(4, dtype=np.float32))  # fmt: skip


def test_a_counted_use_copies_the_memory_with_its_new_count() -> None:
    """``rows.with_access`` gives what ``copy.copy`` and setting the two fields gave: a new
    object, equal in every other field (the same vector object), fields in the same order,
    the original untouched."""
    memory = _memory()
    at = NOW + timedelta(days=1)
    touched = rows.with_access(memory, 7, at)
    expected = copy.copy(memory)
    object.__setattr__(expected, "access_count", 7)
    object.__setattr__(expected, "last_accessed_at", at)
    assert touched is not memory and type(touched) is Memory
    assert touched == expected and list(vars(touched)) == list(vars(expected))
    assert touched.embedding is memory.embedding
    assert (memory.access_count, memory.last_accessed_at) == (0, None)
    assert (touched.access_count, touched.last_accessed_at) == (7, at)


def test_a_subclass_is_copied_as_before() -> None:
    """A memory of a subclass (which may keep state ``copy.copy`` knows about) is copied by
    ``copy.copy``: its type and its own fields stay."""

    @dataclass(frozen=True)
    class Tagged(Memory):
        tag: str = "x"

    memory = Tagged(**{f: getattr(_memory(), f) for f in vars(_memory())}, tag="y")
    touched = rows.with_access(memory, 3, NOW)
    assert type(touched) is Tagged and touched.tag == "y" and touched.access_count == 3


@pytest.mark.parametrize("texts", [False, True])
def test_rows_vectors_are_read_by_rowid_for_each_position(tmp_path: Path, texts: bool) -> None:
    """``SQLiteStore._row_vectors``: each position gets its rowid's vector (and text) even
    when a rowid is asked twice, is found only where the row still holds the memory id asked
    for (its vector read all the same), and a missing row, a row without a vector or one of
    another size read as not found, zeros and ``None``."""
    path = tmp_path / "r.db"
    store = SQLiteStore(path, ann_min_vectors=None)
    made = [Memory.new(USER, f"text {i}", MemoryType.SEMANTIC, Kind.FACT, now=NOW,
                       embedding=np.full(4, i + 1, dtype=np.float32) if i != 2 else None)
            for i in range(4)]  # fmt: skip
    store.write(made)
    with closing(sqlite3.connect(path)) as raw:
        rowid = {i: r for r, i in raw.execute("SELECT rowid, id FROM memories")}
        raw.execute("UPDATE memories SET embedding = ? WHERE id = ?",
                    (np.ones(3, dtype=np.float32).tobytes(), made[3].id))  # fmt: skip
        raw.commit()
    read = store._row_vectors(USER)
    asked = [rowid[made[i].id] if i >= 0 else 10_000 for i in (1, 0, 1, -1, 2, 3, 0)]
    ids = [made[1].id, made[0].id, made[1].id, "gone", made[2].id, made[3].id, "other"]
    found, vectors, read_texts = read(np.asarray(asked, dtype=np.int64), ids, 4, texts=texts)
    assert found.tolist() == [True, True, True, False, False, False, False]
    want = [2, 1, 2, 0, 0, 0, 1]  # the row's vector, found or not (the last: another id)
    assert vectors.dtype == np.float32 and vectors.shape == (7, 4)
    assert vectors.tolist() == [[float(v)] * 4 for v in want]
    if texts:
        assert read_texts == ["text 1", "text 0", "text 1", None, None, None, "text 0"]
    else:
        assert read_texts is None
    store.close()
