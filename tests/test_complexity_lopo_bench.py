"""``bench/complexity_lopo.py``: the set it scores is never fitted on, nor is any held half
nor the fresh set; its counts and label shares on hand-made cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import complexity_lopo as lopo  # noqa: E402

from engrain.recall.classify import classify  # noqa: E402


def test_the_left_out_set_and_every_held_half_stay_out_of_the_training_rows() -> None:
    rows = lopo.load_rows()
    groups = np.array([r["group"] for r in rows])
    splits = np.array([r["split"] for r in rows])
    assert set(groups) == {*lopo.SETS, *lopo.FRESH, *lopo.EXTRA}
    halved = {*lopo.SETS, *lopo.FRESH}
    assert {r["split"] for r in rows if r["group"] in halved} == {"tune", "held"}
    for name in (*lopo.SETS, *lopo.FRESH):
        train, seed, narrow = lopo.training_rows(groups, splits, name)
        assert not (train & (groups == name)).any()
        assert not (train & (splits == "held")).any()
        assert not (seed & ~train).any() and not (narrow & ~train).any()
        assert set(groups[seed]) == set(lopo.SEED_FOLLOWING) - {name}
        assert set(groups[narrow]) == set(lopo.SHIPPED_FROM) - {name}
        # every other set's tune half and every train file is there, the fresh set never
        assert set(groups[train]) == {*lopo.SETS, *lopo.EXTRA} - {name}


def test_the_scored_rows_labels_do_not_change_what_they_are_read_as() -> None:
    rows = [r for r in lopo.load_rows() if r["split"] != "held"][::12]
    rules = [classify(r["text"], turn=r.get("turn", 0)) for r in rows]
    vectors = np.random.default_rng(0).normal(size=(len(rows), 8))
    x = np.stack([lopo.im.features(c, r["text"], v) for r, c, v in zip(rows, rules, vectors,
                                                                       strict=True)])  # fmt: skip
    groups = np.array([r["group"] for r in rows])
    splits = np.array([r["split"] for r in rows])
    train, seed, narrow = lopo.training_rows(groups, splits, "quill")
    test = groups == "quill"
    assert test.sum() >= 3
    first = lopo.read_set(rows, rules, x, x[:, 8:], train, seed, narrow, test)
    relabelled = [
        {**r, "intent": "greeting", "complexity": "trivial"} if r["group"] == "quill" else r
        for r in rows
    ]
    second = lopo.read_set(relabelled, rules, x, x[:, 8:], train, seed, narrow, test)
    assert first == second
    assert set(first) >= {"intent LOPO", "intent LOPO, shipped files", *lopo.LEARNED}
    assert all(len(v) == test.sum() for v in first.values())


def test_hits_count_the_writer_the_second_reader_and_their_agreement() -> None:
    rows = [
        {"id": "a", "intent": "question", "complexity": "simple"},
        {"id": "b", "intent": "debugging", "complexity": "moderate"},
        {"id": "c", "intent": "analysis", "complexity": "deep"},
    ]
    got = [("question", "simple"), ("debugging", "complex"), ("discussion", "deep")]
    second = {"a": "simple", "b": "complex"}
    hits = lopo._hits(rows, got, second)
    assert (hits["n"], hits["intent"], hits["complexity"]) == (3, 2, 2)
    # b: the second reader says complex, as read; a: both readers agree, read so
    assert (hits["second_n"], hits["vs_second"]) == (2, 2)
    assert (hits["agreed_n"], hits["on_agreed"]) == (1, 1)
    rates = lopo._rates(hits)
    assert rates["complexity"] == round(2 / 3, 3) and rates["on_agreed"] == 1.0


def test_label_shares_count_each_readers_levels_by_group_and_intent() -> None:
    rows = [
        {"id": "a", "group": "g", "intent": "debugging", "complexity": "simple"},
        {"id": "b", "group": "g", "intent": "debugging", "complexity": "complex"},
        {"id": "c", "group": "h", "intent": "question", "complexity": "simple"},
    ]
    shares = lopo.label_shares(rows, {"a": "complex", "b": "complex"})
    assert shares["g"]["debugging"] == {
        "writer": {"simple": 1, "complex": 1},
        "second": {"complex": 2},
    }
    assert shares["h"]["question"] == {"writer": {"simple": 1}}
