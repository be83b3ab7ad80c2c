"""The typed learnings' own approximate index (issue 18, session 12, store/ann_kinds.py):
a filter of their kinds walks it and gets the exact search's results, it is saved beside
the file and checked when loaded, and it never returns a forgotten memory nor misses one
written since, in this process or after another process's writes.

As in tests/test_ann.py the thresholds are forced low and the indexes built inside the
call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind
from engrain.recall.gate import LEARNING_KINDS
from engrain.store import MemoryFilter, ann_kinds, cache, vector_search
from engrain.store.ann import VectorIndex
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import DIM, USER, _ids, _indexed, _memories, _saved, _vectors

PREFERENCES = MemoryFilter(kinds=(Kind.PREFERENCE,))
FACTS = MemoryFilter(kinds=(Kind.FACT,))


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    monkeypatch.setattr(ann_kinds, "MIN_ROWS", 50)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "engrain.db"
    with closing(SQLiteStore(path)) as store:
        store.write(_memories(600))  # 200 preferences
    return path


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    with closing(_indexed(db)) as opened:
        assert opened.wait_for_index(USER)
        yield opened


def _part(store: SQLiteStore) -> cache.AnnRows:
    found = store._cache(USER).snapshot.part
    assert found is not None
    return found


def test_the_indexed_kinds_are_the_gate_s_learnings() -> None:
    assert set(LEARNING_KINDS) == ann_kinds.INDEXED_KINDS
    assert ann_kinds.covers(PREFERENCES) and ann_kinds.covers(ann_kinds.FILTER)
    assert not ann_kinds.covers(FACTS) and not ann_kinds.covers(MemoryFilter())
    assert not ann_kinds.covers(MemoryFilter(kinds=(Kind.PREFERENCE, Kind.FACT)))


def test_a_learnings_filter_walks_their_own_index_with_exact_results(
    store: SQLiteStore, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[int] = []
    search = VectorIndex.search_similar

    def counting(
        index: VectorIndex, vector: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        walked.append(len(index))
        return search(index, vector, count)

    monkeypatch.setattr(VectorIndex, "search_similar", counting)
    exact = SQLiteStore(db, ann_min_vectors=None)
    for query in _vectors(10, seed=21):
        got = store.search(USER, query, 8, PREFERENCES)
        want = exact.search(USER, query, 8, PREFERENCES)
        assert _ids(got) == _ids(want)
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    part = _part(store)
    assert len(part.index) == 200 and int(part.held.sum()) == 200
    assert walked[-1] == 200  # the last searches walked the 200 preferences' index
    found = store.search_many(USER, _vectors(1, seed=22)[0], [(5, FACTS), (5, PREFERENCES)])
    assert walked[-2:] == [600, 200]  # facts through the first index, one walk each
    assert [m.kind for m, _ in found[0]] == [Kind.FACT] * 5
    assert [m.kind for m, _ in found[1]] == [Kind.PREFERENCE] * 5
    saved = VectorIndex.load(_saved(db, ann_kinds.STASH_KIND), DIM)
    assert saved is not None and len(saved) == 200
    exact.close()


def test_no_second_index_below_its_threshold(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold scales with the first index's: 50 x 600 / 20,000 = 1 row at most,
    with the default MIN_ROWS 8,192 x 600 / 20,000 = 245, more than the 200 preferences."""
    with closing(SQLiteStore(db, ann_min_vectors=600, ann_background=False)) as opened:
        assert opened.wait_for_index(USER)
        opened.search(USER, _vectors(1, seed=23)[0], 5, PREFERENCES)
        assert opened._cache(USER).snapshot.part is not None
    assert ann_kinds.min_rows(600) == 1 and ann_kinds.min_rows(0) == 1
    monkeypatch.setattr(ann_kinds, "MIN_ROWS", 8_192)  # the default
    assert ann_kinds.min_rows(600) == 245 and ann_kinds.min_rows(20_000) == 8_192
    with closing(SQLiteStore(db, ann_min_vectors=600, ann_background=False)) as opened:
        assert opened.wait_for_index(USER)
        found = opened.search(USER, _vectors(1, seed=23)[0], 5, PREFERENCES)
        assert opened._cache(USER).snapshot.part is None
        assert [m.kind for m, _ in found] == [Kind.PREFERENCE] * 5


def test_writes_since_are_found_and_forgotten_ones_never_returned(
    store: SQLiteStore, db: Path
) -> None:
    store.search(USER, _vectors(1, seed=24)[0], 5, PREFERENCES)
    preferences = store.query(USER, PREFERENCES)
    moved = preferences[0].evolve(embedding=_vectors(1, seed=25)[0])
    fresh = [m for m in _memories(30, seed=26) if m.kind is Kind.PREFERENCE]
    gone = preferences[1]
    store.write(upserts=[moved, *fresh], deletes=[gone])
    for memory in [moved, *fresh]:
        assert memory.embedding is not None
        assert _ids(store.search(USER, memory.embedding, 1, PREFERENCES)) == [memory.id]
    assert gone.embedding is not None
    assert gone.id not in _ids(store.search(USER, gone.embedding, 50, PREFERENCES))
    part = _part(store)
    rows = store._cache(USER).snapshot.arrays
    assert rows is not None and not part.held[rows.position[moved.id]]  # searched exactly
    store.close()

    # another process: the saved learnings' index holds the old vector and the forgotten
    # memory; loaded, it is checked against the rows and patched
    reopened = _indexed(db)
    assert reopened.wait_for_index(USER)
    for memory in [moved, *fresh]:
        assert memory.embedding is not None
        assert _ids(reopened.search(USER, memory.embedding, 1, PREFERENCES)) == [memory.id]
    assert gone.id not in _ids(reopened.search(USER, gone.embedding, 50, PREFERENCES))
    part = _part(reopened)
    assert int(part.held.sum()) == 200 - 1 + len(fresh)
    assert _ids(reopened.search(USER, moved.embedding, 1, PREFERENCES)) == [moved.id]
    reopened.close()


def test_another_process_s_writes_are_seen_through_the_loaded_index(db: Path) -> None:
    first = _indexed(db)
    assert first.wait_for_index(USER)
    first.search(USER, _vectors(1, seed=27)[0], 5, PREFERENCES)
    assert _saved(db, ann_kinds.STASH_KIND) is not None
    other = SQLiteStore(db, ann_min_vectors=None)
    preferences = other.query(USER, PREFERENCES)
    moved = [m.evolve(embedding=v) for m, v in
             zip(preferences[:5], _vectors(5, seed=28), strict=True)]  # fmt: skip
    other.write(upserts=moved, deletes=preferences[5:10])
    other.close()
    for memory in moved:  # the first store reloads its working set after the commit
        assert memory.embedding is not None
        assert _ids(first.search(USER, memory.embedding, 1, PREFERENCES)) == [memory.id]
    for memory in preferences[5:10]:
        assert memory.embedding is not None
        assert memory.id not in _ids(first.search(USER, memory.embedding, 50, PREFERENCES))
    first.close()
