"""A refreshed image is made without every text in memory, and is the image a load from the
rows saves (issue 18, ``store/image_refresh.py``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Provenance
from engrain.store import image_refresh
from engrain.store.base import Patch
from engrain.store.columns import Strings, texts_digest
from engrain.store.sqlite import SQLiteStore
from engrain.store.texts import RowTexts
from tests.test_columnar import USER, _image_saved, _memories, _saved, db  # noqa: F401

TEXTS = ["naïve café ☕", "", "with\0a NUL", "plain", "ü" * 40, "last"]


@pytest.mark.parametrize(
    "rows", [[0], [5], [0, 5], [1, 2, 3], [0, 1, 2, 3, 4, 5], [2]], ids=lambda rows: str(rows)
)
def test_a_spliced_column_is_the_column_of_the_replaced_strings(rows: list[int]) -> None:
    values = [f"new {row} ☕" if row % 2 else "" for row in rows]
    want = list(TEXTS)
    for row, value in zip(rows, values, strict=True):
        want[row] = value
    got = image_refresh.spliced(Strings.of(TEXTS), rows, values)
    expected = Strings.of(want)
    assert got.blob == expected.blob and np.array_equal(got.at, expected.at)
    assert [got[i] for i in range(len(got))] == want


def test_a_column_viewing_a_larger_blob_is_spliced_from_its_own_entries() -> None:
    whole = Strings.of(["before", *TEXTS])
    view = Strings(whole.blob, whole.at[1:])  # entries 1.. of a larger blob
    got = image_refresh.spliced(view, [3], ["x"])
    want = Strings.of([*TEXTS[:3], "x", *TEXTS[4:]])
    assert got.blob == want.blob and np.array_equal(got.at, want.at)


@pytest.mark.parametrize("chunk", [1, 2, 4, 100])
def test_the_chunked_digest_is_the_digest_of_the_joined_texts(chunk: int) -> None:
    chunks = (TEXTS[i : i + chunk] for i in range(0, len(TEXTS), chunk))
    want = texts_digest(len(TEXTS), Strings.of(TEXTS).blob)
    assert image_refresh.chunked_digest(len(TEXTS), chunks) == want
    assert image_refresh.chunked_digest(0, iter([])) == texts_digest(0, b"")
    assert image_refresh.chunked_digest(2, iter([["a"], [], ["b"]])) == texts_digest(2, b"a\0b")


def _refreshed(path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes | None:
    """Patch two rows (one text changed) in a process that loaded the image, and return the
    image it saves at close; every text read at once is refused."""

    def refused(self: RowTexts) -> list[str]:
        raise AssertionError("every text read at once")

    _image_saved(path)
    monkeypatch.setattr(RowTexts, "all", refused)
    monkeypatch.setattr(image_refresh, "DIGEST_CHUNK", 5)  # chunks of 5 of 14 texts
    memories = _memories(14)
    writer = SQLiteStore(path, ann_min_vectors=None)
    writer.working_set(USER)
    writer.write(patches=[Patch(USER, memories[2].id, {"pinned": True, "content": "moved ☕"}),
                          Patch(USER, memories[13].id, {"domains": (), "provenance": Provenance(),
                                                        "superseded_by": "m1"})])  # fmt: skip
    writer.close()
    monkeypatch.undo()
    return _saved(path)


def test_a_refreshed_image_is_the_image_a_load_from_the_rows_saves(
    db: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Byte for byte (ids, hashes, codes, arrays, the texts' digest), made with no list of
    every text: the rows' texts are read a chunk at a time for the digest."""
    refreshed = _refreshed(db, monkeypatch)
    assert refreshed is not None
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM derived_indexes WHERE user_id = ? AND kind = 'columns'", (USER,))
    monkeypatch.setattr("engrain.store.columns.PERSIST_MIN_ROWS", 1)
    _image_saved(db)  # read from the rows, saved again
    assert _saved(db) == refreshed


def test_a_process_that_patched_nothing_saves_the_loaded_columns_as_they_are(
    db: Path,  # noqa: F811
) -> None:
    _image_saved(db)
    store = SQLiteStore(db, ann_min_vectors=None)
    store.working_set(USER)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    table = image_refresh.patched_columns(arrays.rows, arrays.ids, lambda m: ())
    assert table is arrays.rows.base  # nothing read, nothing copied
    store.close()
