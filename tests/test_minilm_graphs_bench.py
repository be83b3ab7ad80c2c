"""``bench/minilm_graphs.py``: how far a graph's vectors are from the reference's, measured
as the tests and the thresholds see them (cosine per text, similarity shifts of close pairs,
the near-duplicate pairs), and the sentence vector of one text's hidden state."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import minilm_graphs as mg  # noqa: E402


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def test_the_same_vectors_agree_exactly() -> None:
    rng = np.random.default_rng(3)
    base = _unit(rng.normal(size=(6, 8)) + 3.0)  # all pairs close (> 0.6)
    row = mg.agreement(base, base, [(0, 1)])
    assert row["cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert row["pairs_close"] == 15
    assert row["shift_mean"] == 0.0 and row["shift_abs_p95"] == 0.0
    assert row["near_duplicates"] == [0.0]


def test_noise_lowers_the_similarities_of_close_pairs() -> None:
    rng = np.random.default_rng(4)
    base = _unit(rng.normal(size=(40, 64)) + 1.5)
    noisy = _unit(base + rng.normal(scale=0.05, size=base.shape))
    row = mg.agreement(noisy, base, [(0, 1), (2, 3)])
    assert row["cosine_median"] < 1.0
    # independent noise on both sides of a pair shrinks its similarity on average: the
    # systematic lowering that moved near-duplicates below the 0.85 merge (docs/ingest.md)
    assert row["shift_mean"] < 0.0 < row["shift_abs_p95"]
    expected = float(noisy[0] @ noisy[1] - base[0] @ base[1])
    assert row["near_duplicates"][0] == pytest.approx(expected, abs=1e-4)


def test_a_sentence_vector_is_the_unit_mean_of_its_tokens() -> None:
    hidden = np.array([[1.0, 0.0], [5.0, 8.0]], dtype=np.float32)  # mean (3, 4)
    assert mg.pooled(hidden) == pytest.approx(np.array([0.6, 0.8]))
