"""bench/sentence_ranks.py: a learning ranked by its own vector, its best piece, its chance."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import sentence_ranks as sr

from engrain.embed import make_embedder


def test_auc_counts_the_pairs_ordered_right_and_ties_half() -> None:
    positive = np.array([True, False, False])
    assert sr.auc(np.array([0.9, 0.1, 0.2]), positive) == 1.0
    assert sr.auc(np.array([0.1, 0.9, 0.2]), positive) == 0.0
    assert sr.auc(np.array([0.5, 0.5, 0.1]), positive) == 0.75
    assert sr.auc(np.array([0.5, 0.5]), np.array([True, True])) is None


def test_every_ranking_is_measured_on_the_split_asked() -> None:
    got = sr.measure(["main"], "tune", make_embedder("hash"))["main"]
    assert got["messages"] == 64  # main's tune messages with a must-include label
    assert set(got["auc"]) == set(sr.RANKINGS)
    for value in got["auc"].values():
        assert 0.5 < value <= 1.0
    # a bare maximum over more pieces favours the long learnings in the top ten
    assert got["top10_pieces"]["best_piece"] >= got["top10_pieces"]["own"]
    assert got["messages_of_sentences"] > 0
    for value in got["query_side_auc"].values():
        assert 0.5 < value <= 1.0
