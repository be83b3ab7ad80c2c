"""The coarse pass before the exact product over a large filter's rows (issue 18,
store/coarse.py): which rows it proposes, and that a store's search through it returns the
exact search's memories and scores when the projection loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind, Memory
from engrain.store import MemoryFilter, ann_kinds, coarse, vector_search
from engrain.store.arrays import Arrays
from engrain.store.coarse import Projection, basis_of
from engrain.store.sqlite import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
USER = "ada"
DIM = 32
RANK = 6


def _unit(v: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _in_subspace(n: int, seed: int) -> np.ndarray:
    """Unit vectors spanning only ``RANK`` of ``DIM`` dimensions (a fixed random subspace):
    projected on ``RANK`` or more principal directions, their products are exact."""
    rng = np.random.default_rng(seed)
    span = np.linalg.qr(np.random.default_rng(0).standard_normal((DIM, RANK)))[0].T
    return _unit(rng.standard_normal((n, RANK)) @ span)


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM))
    return _unit(centres[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, DIM)))


def test_the_directions_are_orthonormal_and_ordered_by_energy() -> None:
    vectors = _clustered(2_000, seed=1)
    basis = basis_of(vectors, dims=8)
    assert basis.shape == (8, DIM)
    assert np.allclose(basis @ basis.T, np.eye(8), atol=1e-5)
    energy = ((vectors @ basis.T) ** 2).sum(axis=0)
    assert np.all(np.diff(energy) <= 1e-3 * energy[0])  # largest first


def test_candidates_hold_the_exact_best_when_the_projection_loses_nothing() -> None:
    vectors = _in_subspace(3_000, seed=2)
    projection = Projection.of(vectors, basis_of(vectors, dims=RANK))
    for query in _in_subspace(20, seed=3):
        picked = projection.candidates(query, 10)
        assert picked is not None and picked.size == coarse.fetch(10) < len(vectors)
        best = set(np.argsort(-(vectors @ query), kind="stable")[:10].tolist())
        assert best <= set(picked.tolist())


def test_candidates_on_clustered_vectors_hold_nearly_all_of_the_best() -> None:
    # 20 of 32 directions: 0.99 of the best 20 among 256 candidates (12: 0.88, 16: 0.96)
    vectors = _clustered(4_000, seed=4)
    projection = Projection.of(vectors, basis_of(vectors, dims=20))
    found = 0
    queries = _clustered(30, seed=5)
    for query in queries:
        picked = projection.candidates(query, 20)
        assert picked is not None
        best = np.argsort(-(vectors @ query))[:20]
        found += len(set(best.tolist()) & set(picked.tolist()))
    assert found / (20 * len(queries)) >= 0.97


def test_no_candidates_when_they_would_be_a_large_share_of_the_rows() -> None:
    vectors = _clustered(600, seed=6)
    projection = Projection.of(vectors, basis_of(vectors, dims=8))
    assert projection.candidates(vectors[0], 100) is None  # 300 of 600: score them all
    assert projection.candidates(vectors[0], 0) is None


# -- through the store ---------------------------------------------------------------------


def _memories(vectors: np.ndarray) -> list[Memory]:
    kinds = [Kind.FACT, Kind.PREFERENCE, Kind.EVENT, Kind.FACT, Kind.EVENT]
    return [
        Memory.new(USER, f"note {i}", kinds[i % 5].default_memory_type, kinds[i % 5], now=NOW,
                   embedding=vector, key=f"k{i}" if kinds[i % 5] is Kind.PREFERENCE else None)
        for i, vector in enumerate(vectors)
    ]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteStore:
    """A user of 1,000 memories searched through the index, whose preferences (200 rows,
    20 %) are a filter copied once and searched through a projection on ``RANK``
    directions."""
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    # preferences searched as any large filter, not through the learnings' own index
    monkeypatch.setattr(ann_kinds, "INDEXED_KINDS", frozenset())
    monkeypatch.setattr(coarse, "MIN_ROWS", 100)
    monkeypatch.setattr(coarse, "DIMS", RANK)
    monkeypatch.setattr(coarse, "FETCH_MIN", 10)
    monkeypatch.setattr(coarse, "FETCH_FACTOR", 2)
    path = tmp_path / "engrain.db"
    writer = SQLiteStore(path, ann_min_vectors=None)
    writer.write(_memories(_in_subspace(1_000, seed=7)))
    writer.close()
    opened = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    assert opened.wait_for_index(USER)
    return opened


PREFERENCES = MemoryFilter(kinds=(Kind.PREFERENCE,))


def _arrays(store: SQLiteStore) -> Arrays:
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    return arrays


def test_a_large_filter_is_searched_through_the_projection_with_exact_results(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proposed: list[int] = []
    candidates = Projection.candidates

    def counted(self: Projection, query: np.ndarray, k: int) -> np.ndarray | None:
        picked = candidates(self, query, k)
        proposed.append(-1 if picked is None else picked.size)
        return picked

    monkeypatch.setattr(Projection, "candidates", counted)
    exact = SQLiteStore(tmp_path / "engrain.db", ann_min_vectors=None)
    for query in _in_subspace(15, seed=8):
        got = store.search(USER, query, 8, PREFERENCES)
        want = exact.search(USER, query, 8, PREFERENCES)
        assert [m.id for m, _ in got] == [m.id for m, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
        for memory, _ in got:
            assert memory.kind is Kind.PREFERENCE
    assert proposed == [16] * 15  # 2 x 8 of the 200 rows each time, never all of them
    found = _arrays(store).subsets[PREFERENCES]
    assert found.coarse is not None and found.coarse.coords.shape == (200, RANK)
    exact.close()
    store.close()


def test_the_directions_are_kept_when_vectors_change(store: SQLiteStore) -> None:
    query = _in_subspace(1, seed=9)[0]
    store.search(USER, query, 5, PREFERENCES)
    before = _arrays(store).subsets[PREFERENCES]
    assert before.coarse is not None
    preference = next(m for m, _ in store.search(USER, query, 5, PREFERENCES))
    moved = _in_subspace(1, seed=10)[0]
    store.write([preference.evolve(embedding=moved)])
    found = store.search(USER, moved, 5, PREFERENCES)
    assert found[0][0].id == preference.id
    assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    after = _arrays(store).subsets[PREFERENCES]
    assert after.coarse is not None and after.vectors is not None
    assert after.coarse.basis is before.coarse.basis  # not computed again
    assert after.vectors is not before.vectors  # the new vector is in the new copy
    store.close()


def test_the_counts_of_a_filter_follow_the_rows_and_the_index_record(store: SQLiteStore) -> None:
    query = _in_subspace(1, seed=11)[0]
    store.search(USER, query, 5, PREFERENCES)
    snapshot = store._cache(USER).snapshot
    assert snapshot.arrays is not None and snapshot.ann is not None
    held, mask, passing, kept = snapshot.arrays.counted[PREFERENCES]
    assert held is snapshot.ann.held
    assert (passing, kept) == (200, 200) == (int((mask & held).sum()), int(mask.sum()))
    fresh = _memories(_in_subspace(2, seed=12))[1]  # a preference the index does not hold
    store.write([fresh])
    assert fresh.embedding is not None
    assert store.search(USER, fresh.embedding, 1, PREFERENCES)[0][0].id == fresh.id
    snapshot = store._cache(USER).snapshot
    assert snapshot.arrays is not None and snapshot.ann is not None
    held, mask, passing, kept = snapshot.arrays.counted[PREFERENCES]
    assert held is snapshot.ann.held
    assert (passing, kept) == (200, 201)
    store.close()
