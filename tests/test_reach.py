"""Which candidates of an int8 search are read and scored exactly (issue 18, session 12,
store/reach.py): only those that can be among the k best, in the index's walk and in a
large filter's projected subset; the results stay the exact search's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind
from engrain.store import MemoryFilter, cache, coarse
from engrain.store.ann import VectorIndex, quantized
from engrain.store.reach import INT8_ERROR, reachable, similarities
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _indexed, _memories, _vectors


def _unit(v: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return unit


def test_reachable_keeps_what_is_within_twice_the_error_of_the_kth() -> None:
    similar = np.array([0.9, 0.5, 0.8, 0.76, 0.7, 0.749], dtype=np.float32)
    # the 2nd best is 0.8: 0.75 and above may still be among the best 2 by exact score
    assert reachable(similar, 2, error=0.025).tolist() == [True, False, True, True, False, False]
    assert reachable(similar, 6).all() and reachable(similar, 9).all()
    assert not reachable(similar, 0).any()


def test_the_exact_best_are_never_left_out_for_errors_within_the_bound() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        exact = rng.uniform(0.2, 0.6, 300).astype(np.float32)
        similar = exact + rng.uniform(-INT8_ERROR, INT8_ERROR, 300).astype(np.float32)
        keep = reachable(similar, 20)
        best = set(np.argsort(-exact)[:20].tolist())
        assert best <= set(np.flatnonzero(keep).tolist())
        assert keep.sum() < 300


def test_similarities_are_the_int8_index_s_and_within_the_bound_of_exact() -> None:
    rng = np.random.default_rng(2)
    vectors = _unit(rng.standard_normal((2_000, 384)))
    queries = _unit(rng.standard_normal((20, 384)))
    keys = np.arange(len(vectors), dtype=np.uint64)
    index = VectorIndex.build(keys, vectors, threads=1)
    codes = quantized(vectors)
    worst = 0.0
    for query in queries:
        found, similar = index.search_similar(query, 50)
        mine = similarities(codes[found.astype(np.intp)], query)
        assert mine == pytest.approx(similar, abs=1e-4)
        everything = similarities(codes, query)
        worst = max(worst, float(np.abs(everything - vectors @ query).max()))
    assert worst < INT8_ERROR


def test_similarities_of_a_zero_row_are_zero() -> None:
    codes = np.zeros((2, 8), dtype=np.int8)
    codes[1, 0] = 127
    query = np.eye(8, dtype=np.float32)[0]
    assert similarities(codes, query).tolist() == [0.0, 1.0]
    assert similarities(codes[:0], query).shape == (0,)


# -- through the store ---------------------------------------------------------------------


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows whose vectors a search asks of its working set, one entry per call."""
    counted: list[int] = []
    vectors = cache._Arrays.vectors

    def counting(self: cache._Arrays, rows: np.ndarray, *, texts: bool = False) -> Any:
        counted.append(len(rows))
        return vectors(self, rows, texts=texts)

    monkeypatch.setattr(cache._Arrays, "vectors", counting)
    return counted


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "engrain.db"
    with closing(SQLiteStore(path)) as store:
        store.write(_memories(600))
    return path


@pytest.fixture
def store(db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    """The 600 memories searched through the index; preferences (200 rows) a filter
    searched through a projection and int8 codes."""
    monkeypatch.setattr(cache, "EXACT_SUBSET", 20)
    monkeypatch.setattr(cache, "SUBSET_SHARE", 0.4)  # a third of the rows are preferences
    monkeypatch.setattr(coarse, "MIN_ROWS", 100)
    monkeypatch.setattr(coarse, "FETCH_MIN", 40)
    with closing(_indexed(db)) as opened:
        assert opened.wait_for_index(USER)
        yield opened


PREFERENCES = MemoryFilter(kinds=(Kind.PREFERENCE,))


def test_the_walk_reads_only_the_candidates_that_can_win(
    store: SQLiteStore, db: Path, read: list[int]
) -> None:
    exact = SQLiteStore(db, ann_min_vectors=None)
    for memory in exact.query(USER, limit=10):
        assert memory.embedding is not None
        read.clear()
        found = store.search(USER, memory.embedding, 1)
        assert [m.id for m, _ in found] == [memory.id]
        assert read == [1]  # 17 candidates passed; one can be the best
        for query in _vectors(3, seed=5):
            got = store.search(USER, query, 10)
            want = exact.search(USER, query, 10)
            assert [m.id for m, _ in got] == [m.id for m, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    exact.close()


def test_a_projected_filter_keeps_int8_codes_and_reads_only_what_can_win(
    store: SQLiteStore, db: Path, read: list[int]
) -> None:
    exact = SQLiteStore(db, ann_min_vectors=None)
    for query in _vectors(10, seed=6):
        got = store.search(USER, query, 5, PREFERENCES)
        want = exact.search(USER, query, 5, PREFERENCES)
        assert [m.id for m, _ in got] == [m.id for m, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    subset = arrays.subsets[PREFERENCES]
    assert subset.vectors is None and subset.codes is not None  # no float32 copy kept
    assert subset.codes.dtype == np.int8 and subset.codes.shape == (200, 32)
    preference = exact.query(USER, PREFERENCES, limit=1)[0]
    assert preference.embedding is not None
    read.clear()
    found = store.search(USER, preference.embedding, 1, PREFERENCES)
    assert [m.id for m, _ in found] == [preference.id]
    assert read == [1]  # of the 40 candidates the projection proposed
    exact.close()
