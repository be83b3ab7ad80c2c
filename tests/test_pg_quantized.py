"""The held learnings' product in stages (``store/postgres/quantized.py``, session 26): rows
held in a basis of their own, most rows dropped after a partial product, and still every row
the exact float32 search ranks among the best is a candidate, so the answer is the exact
search's, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("psycopg")
quantized = pytest.importorskip("engrain.store.postgres.quantized")

DIM = 384


def _sentences(n: int, rng: np.random.Generator) -> Any:
    """``n`` float32 vectors (not unit: the exact search divides by their length) whose
    energy falls off along some directions, as sentence embeddings' does: a few topics, each
    a random mix, plus a little noise in every direction."""
    topics = rng.standard_normal((24, DIM)) * np.linspace(1.0, 0.2, 24)[:, None]
    mix = rng.standard_normal((n, 24))
    noisy = mix @ topics + 0.15 * rng.standard_normal((n, DIM))
    return (noisy * rng.uniform(0.5, 2.0, (n, 1))).astype(np.float32)


def _exact(vectors: Any, query: Any, k: int, keep: Any) -> list[tuple[int, float]]:
    """The exact float32 search over the rows ``keep`` lets through (row, score)."""
    rows = np.flatnonzero(keep)
    top = quantized.exact_top(query, k, vectors[rows], rows.astype(np.int64))
    return [(int(rows[r]), score) for r, score in top]


def _held(vectors: Any) -> Any:
    blobs = [v.tobytes() for v in vectors]
    basis = quantized.basis_of(vectors[:2048])
    return basis, quantized.quantize(vectors, blobs, basis)


def _candidates(held: Any, basis: Any, query: Any, k: int, dropped: Any) -> Any:
    length = float(np.linalg.norm(query.astype(np.float64)))
    rows, _ = quantized.staged_window(held, quantized.rotated(query, basis), k, dropped, length)
    return rows


def test_a_staged_search_keeps_every_row_of_the_exact_top_and_multiplies_few_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """6,000 rows, 40 questions near stored rows and 4 in random directions, every third
    row filtered out for half of them: the candidates hold the exact top 50 and, ranked by
    their float32 vectors, give the exact search's rows, order and scores bit for bit; for
    the questions near stored rows, fewer than a fifth of the rows are multiplied in full."""
    rng = np.random.default_rng(3)
    vectors = _sentences(6_000, rng)
    basis, held = _held(vectors)
    assert basis.shape == (DIM, DIM)
    np.testing.assert_allclose(basis @ basis.T, np.eye(DIM), atol=1e-12)  # orthonormal
    multiplied: list[int] = []
    original = quantized._gathered
    last = DIM - quantized.STAGES[-1]

    def counted(block: Any, rows: Any, query: Any) -> Any:
        if block.shape[1] == last:  # the rows multiplied in full
            multiplied.append(len(rows))
        return original(block, rows, query)

    monkeypatch.setattr(quantized, "_gathered", counted)
    near = vectors[rng.choice(len(vectors), 40, replace=False)] + 0.3 * rng.standard_normal(
        (40, DIM)
    ).astype(np.float32)
    odd = rng.standard_normal((4, DIM)).astype(np.float32)
    for i, raw in enumerate([*near, *odd]):
        query = (raw / np.linalg.norm(raw)).astype(np.float32)
        keep = np.ones(len(vectors), dtype=bool)
        if i % 2:
            keep[::3] = False
        dropped = np.flatnonzero(~keep)
        multiplied.clear()
        rows = _candidates(held, basis, query, 50, dropped)
        expected = _exact(vectors, query, 50, keep)
        assert {r for r, _ in expected} <= set(rows.tolist())
        assert not set(rows.tolist()) & set(dropped.tolist())
        picked = np.zeros(len(vectors), dtype=bool)
        picked[rows] = True
        assert _exact(vectors, query, 50, picked) == expected  # bit for bit
        if i < len(near):
            assert 0 < sum(multiplied) < len(vectors) / 5


def test_rows_the_steps_cannot_tell_apart_are_all_candidates() -> None:
    """Sixty rows at the same angle from the question, a millionth apart, among 5,000 others:
    the steps cannot order them (each is within ~10⁻⁴ of its vector), so every one that the
    exact search could rank in the top 20 is a candidate, and ranked by their float32 vectors
    the candidates give the exact answer."""
    rng = np.random.default_rng(4)
    others = _sentences(5_000, rng)
    query = others[0] / np.linalg.norm(others[0])
    side = rng.standard_normal(DIM)
    side -= (side @ query) * query
    side /= np.linalg.norm(side)
    close = np.stack([(0.9 + i * 1e-6) * query + 0.436 * side for i in range(60)])
    vectors = np.concatenate([others[1:], close]).astype(np.float32)
    basis, held = _held(vectors)
    keep = np.ones(len(vectors), dtype=bool)
    rows = _candidates(held, basis, query.astype(np.float32), 20, np.empty(0, dtype=np.intp))
    expected = _exact(vectors, query.astype(np.float32), 20, keep)
    assert {r for r, _ in expected} <= set(rows.tolist())
    assert len(rows) >= 20
    picked = np.zeros(len(vectors), dtype=bool)
    picked[rows] = True
    assert _exact(vectors, query.astype(np.float32), 20, picked) == expected


def test_a_row_quantized_in_a_basis_is_within_its_bound() -> None:
    """Every row's approximate score, from its steps in the basis and the rotated question,
    is within the held bound (times the question's length) of the exact float32 score."""
    rng = np.random.default_rng(5)
    vectors = _sentences(3_000, rng)
    basis, held = _held(vectors)
    for raw in rng.standard_normal((10, DIM)).astype(np.float32) * 3.0:
        scores = quantized.approximate(held.blocks, held.factor, quantized.rotated(raw, basis))
        exact = np.einsum("ij,j->i", vectors, raw) * quantized.inverse_norms(vectors)
        length = float(np.linalg.norm(raw.astype(np.float64)))
        assert np.max(np.abs(scores.astype(np.float64) - exact)) <= held.error * length
