"""A loaded working set's vectors and texts read by rowid on SQLite
(``store/sqlite_rowids.py``, issue 18): each position asked gets its row's vector and text,
a rowid asked twice is read once and given to both, and a row that no longer holds the
memory asked for (another id, no vector, a vector of another size) is told apart."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from engrain.store import sqlite_rowids
from engrain.store.sqlite import SQLiteStore

from .test_store_contract import mem

DIM = 3


def _blob(*values: float) -> bytes:
    return np.asarray(values, dtype=np.float32).tobytes()


#: rowid -> (id, vector blob, text) as the user's rows hold them.
ROWS: dict[int, tuple[str, bytes | None, str]] = {
    1: ("a", _blob(1, 0, 0), "text a"),
    2: ("b", _blob(0, 1, 0), "text b"),
    3: ("c", None, "text c"),  # no vector
    4: ("d", _blob(1, 1), "text d"),  # a vector of another size
    5: ("e", _blob(0, 0, 1), "text e"),
}


class _Rows:
    """Serves ``SELECT … rowid IN (…)`` from :data:`ROWS`, noting each statement's rowids."""

    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    @contextmanager
    def __call__(self, sql: str, params: Sequence[Any]) -> Iterator[Iterator[tuple[Any, ...]]]:
        assert params[0] == "alice"
        rowids = list(params[1:])
        self.asked.append(rowids)
        texts = "content" in sql
        yield iter(
            (r, *ROWS[r][:2], *((ROWS[r][2],) if texts else ())) for r in rowids if r in ROWS
        )


def test_each_position_gets_its_rows_vector_and_text_and_a_changed_row_is_told_apart() -> None:
    rows = _Rows()
    read = sqlite_rowids.reader(rows, "alice")
    rowids = np.array([2, 1, 9, 2, 3, 4, 5, 5], dtype=np.int64)
    ids = ["b", "a", "x", "b", "c", "d", "other", "e"]
    same, vectors, texts = read(rowids, ids, DIM, texts=True)
    assert rows.asked == [[1, 2, 3, 4, 5, 9]]  # each rowid once
    assert same.tolist() == [True, True, False, True, False, False, False, True]
    expected = [[0, 1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1],
                [0, 0, 1]]  # fmt: skip
    assert vectors.tolist() == expected
    assert vectors.dtype == np.float32
    vectors[0] = 7.0  # the caller's to change
    assert texts == ["text b", "text a", None, "text b", None, None, "text e", "text e"]
    same, vectors, texts = read(rowids[:2], ["b", "a"], DIM)
    assert same.tolist() == [True, True] and texts is None
    assert vectors.tolist() == [[0, 1, 0], [1, 0, 0]]


def test_nothing_asked_reads_nothing() -> None:
    rows = _Rows()
    same, vectors, texts = sqlite_rowids.reader(rows, "alice")(
        np.zeros(0, dtype=np.int64), [], DIM, texts=True
    )
    assert rows.asked == [] and same.shape == (0,) and vectors.shape == (0, DIM) and texts == []


def test_more_rowids_than_one_list_takes_are_read_in_lists(monkeypatch: Any) -> None:
    monkeypatch.setattr(sqlite_rowids, "IN_CHUNK", 2)
    rows = _Rows()
    same, vectors, _ = sqlite_rowids.reader(rows, "alice")(
        np.array([5, 1, 2, 1, 9], dtype=np.int64), ["e", "a", "b", "a", "x"], DIM
    )
    assert rows.asked == [[1, 2], [5, 9]]
    assert same.tolist() == [True, True, True, True, False]
    assert vectors[:, 2].tolist() == [1, 0, 0, 0, 0]


def test_the_store_reads_its_rows_by_rowid(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db", ann_min_vectors=None)
    store.write([mem("a", vector=(1.0, 0.0, 0.0, 0.0)), mem("b", vector=(0.0, 1.0, 0.0, 0.0))])
    found = {i: r for r, i in store._db.execute("SELECT rowid, id FROM memories")}
    same, vectors, texts = store._row_vectors("alice")(
        np.array([found["b"], found["a"], found["b"]], dtype=np.int64), ["b", "a", "a"], 4,
        texts=True,
    )  # fmt: skip
    assert same.tolist() == [True, True, False]
    assert vectors.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    assert texts == ["memory b of alice", "memory a of alice", "memory b of alice"]
    store.close()
