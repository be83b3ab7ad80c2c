"""Per-call passes over every row of a large user (issue 18). The rows a search merges
beside the approximate index's candidates are those passing the filter that the index does
not hold: when it holds every passing row (counted once per set of columns) none are
looked for, without a pass over every row; a write the index does not hold yet makes them
found again (store/vector_search.py). Whether a user is large is counted on every search,
without summing every row as integers (store/cache.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from engrain.store import MemoryFilter, vector_search
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _ids, _indexed, _memories, _vectors, _written

Call = tuple[bool, npt.NDArray[np.intp], npt.NDArray[np.intp]]


pytestmark = pytest.mark.usefixtures("through_the_index")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return _written(tmp_path / "engrain.db", 600, ann_min_vectors=None)


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Each call's ``held_all``, its answer, and the rows a pass over every row finds."""
    calls: list[Call] = []
    original = vector_search._unheld

    def spy(mask: npt.NDArray[np.bool_], held: npt.NDArray[np.bool_], held_all: bool) -> object:
        found = original(mask, held, held_all)
        calls.append((held_all, found, np.flatnonzero(mask & ~held)))
        return found

    monkeypatch.setattr(vector_search, "_unheld", spy)
    return calls


def test_no_row_is_looked_for_while_the_index_holds_them_all(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _indexed(db)
    assert store.wait_for_index(USER)
    calls = _spied(monkeypatch)
    query = _vectors(1, seed=40)[0]
    store.search_many(USER, query, [(10, MemoryFilter()), (5, MemoryFilter(project="p1"))])
    assert len(calls) == 2
    for held_all, found, every in calls:
        assert held_all and found.size == 0 and every.size == 0
    store.close()


def test_rows_written_since_are_merged_and_found(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _indexed(db)
    assert store.wait_for_index(USER)
    fresh = _memories(3, seed=41)  # fewer than PATCH_AFTER: the index is not patched
    store.write(fresh)
    calls = _spied(monkeypatch)
    for memory in fresh:
        assert memory.embedding is not None
        assert _ids(store.search(USER, memory.embedding, 1)) == [memory.id]
    assert calls
    for held_all, found, every in calls:
        assert not held_all
        assert found.tolist() == every.tolist() and found.size == len(fresh)
    store.close()


@pytest.mark.parametrize(("memories", "indexed"), [(99, False), (100, True)])
def test_a_user_is_indexed_from_the_threshold_on(
    tmp_path: Path, memories: int, indexed: bool
) -> None:
    # the count of vectors is asked on every search (without summing every row as integers)
    store = SQLiteStore(tmp_path / "e.db", ann_min_vectors=100, ann_background=False)
    store.write(_memories(memories))
    assert store.wait_for_index(USER) is indexed
    store.close()
