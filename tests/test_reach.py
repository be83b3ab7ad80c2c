"""Which candidates of an int8 search are read and scored exactly (issue 18, session 12,
store/reach.py): only those that can be among the k best; the results stay the exact
search's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind
from engrain.store import MemoryFilter, coarse, vector_search
from engrain.store.ann import VectorIndex
from engrain.store.reach import INT8_ERROR, reachable
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


def test_the_int8_index_s_similarities_are_within_the_bound_of_exact() -> None:
    """384-dimensional unit vectors, as the model's: usearch's int8 cosine of every
    candidate within INT8_ERROR of the float32 one (random vectors: errors ~0.005)."""
    rng = np.random.default_rng(2)
    vectors = _unit(rng.standard_normal((2_000, 384)))
    index = VectorIndex.build(np.arange(len(vectors), dtype=np.uint64), vectors, threads=1)
    worst = 0.0
    for query in _unit(rng.standard_normal((20, 384))):
        found, similar = index.search_similar(query, 200)
        exact = vectors[found.astype(np.intp)] @ query
        worst = max(worst, float(np.abs(similar - exact).max()))
    assert 0.0 < worst < INT8_ERROR


# -- through the store ---------------------------------------------------------------------


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
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    monkeypatch.setattr(vector_search, "SUBSET_SHARE", 0.4)  # a third of the rows are preferences
    monkeypatch.setattr(coarse, "MIN_ROWS", 100)
    monkeypatch.setattr(coarse, "FETCH_MIN", 40)
    with closing(_indexed(db)) as opened:
        assert opened.wait_for_index(USER)
        yield opened


PREFERENCES = MemoryFilter(kinds=(Kind.PREFERENCE,))


def test_the_walk_reads_only_the_candidates_that_can_win(
    store: SQLiteStore, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept: list[tuple[int, int]] = []  # (candidates passing, kept to be scored)

    def counting(similar: np.ndarray, k: int, error: float = INT8_ERROR) -> np.ndarray:
        out = reachable(similar, k, error)
        kept.append((len(similar), int(out.sum())))
        return out

    monkeypatch.setattr(vector_search, "reachable", counting)
    exact = SQLiteStore(db, ann_min_vectors=None)
    for memory in exact.query(USER, limit=10):
        assert memory.embedding is not None
        kept.clear()
        found = store.search(USER, memory.embedding, 1)
        assert [m.id for m, _ in found] == [memory.id]
        # 17 candidates passed: only itself and any other within 0.05 of it are scored
        assert len(kept) == 1 and kept[0][0] == 17 and 1 <= kept[0][1] < 17
        for query in _vectors(3, seed=5):
            got = store.search(USER, query, 10)
            # the same walk with every candidate scored: pruning changes nothing
            monkeypatch.setattr(vector_search, "reachable", _every)
            unpruned = store.search(USER, query, 10)
            monkeypatch.setattr(vector_search, "reachable", counting)
            assert [m.id for m, _ in got] == [m.id for m, _ in unpruned]
            assert [s for _, s in got] == pytest.approx([s for _, s in unpruned], abs=1e-6)
            # and the walk is the exact search's but for what the graph may miss: a query
            # far from every cluster, on a graph built by several threads, may miss one
            want = exact.search(USER, query, 10)
            assert len({m.id for m, _ in got} & {m.id for m, _ in want}) >= 9
    exact.close()


def _every(similar: np.ndarray, k: int, error: float = INT8_ERROR) -> np.ndarray:
    return np.ones(len(similar), dtype=bool)
