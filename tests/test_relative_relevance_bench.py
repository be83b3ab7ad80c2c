"""``bench/relative_relevance.py``'s measures on a hand-checked message: the per-message
transforms of the cosine, the bridge through the message's best learnings, the AUC and the
threshold read at 95% recall. No assertion on any score of the evaluation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import relative_relevance as rr  # noqa: E402


def _message() -> tuple[dict[str, dict[str, float]], dict[str, object], dict[str, np.ndarray]]:
    components = {
        "a": {"cosine": 0.5, "calibrated_relevance": 1.0},
        "b": {"cosine": 0.1, "calibrated_relevance": 0.2},
        "c": {"cosine": 0.0, "calibrated_relevance": 0.0},
        "d": {"cosine": 0.2, "calibrated_relevance": 0.4},
    }
    message = {"id": "m1", "must_include": ["a", "c"], "must_exclude": ["b"]}
    e = np.eye(3, dtype=np.float32)
    # c lies at 0.6 of the best learning a; b and d are orthogonal to a
    vectors = {"a": e[0], "b": e[1], "c": 0.6 * e[0] + 0.8 * e[2], "d": e[2]}
    return components, message, vectors


def test_each_learning_gets_its_label_and_the_relative_measures() -> None:
    rows = {r["memory"]: r for r in rr.message_rows(*_message())}
    assert [rows[m]["label"] for m in "abcd"] == ["include", "exclude", "include", "other"]
    # cosines 0.5, 0.1, 0.0, 0.2: mean 0.2, population sd 0.1871, median 0.15
    sd = float(np.std([0.5, 0.1, 0.0, 0.2]))
    assert rows["a"]["z"] == pytest.approx(0.3 / sd)
    assert rows["c"]["z"] == pytest.approx(-0.2 / sd)
    assert [rows[m]["quantile"] for m in "abcd"] == pytest.approx([1.0, 1 / 3, 0.0, 2 / 3])
    assert rows["d"]["excess"] == pytest.approx(0.05)
    assert rows["b"]["over_best"] == pytest.approx(0.2)
    assert rows["a"]["background"] == pytest.approx(0.2)


def test_the_bridge_lifts_a_learning_close_to_the_best_ones_and_never_lowers() -> None:
    rows = {r["memory"]: r for r in rr.message_rows(*_message())}
    # anchors a (1.0), d (0.4), b (0.2): c is 0.6 from a and 0.8 from d → max(0.6, 0.32)
    assert rows["c"]["spread"] == pytest.approx(0.6)
    # a itself: orthogonal to the other anchors, and its own 1.0 stands
    assert rows["a"]["spread"] == pytest.approx(1.0)
    # b is orthogonal to every anchor: its own relevance
    assert rows["b"]["spread"] == pytest.approx(0.2)


def test_auc_counts_ties_half_and_needs_both_sides() -> None:
    assert rr.auc([0.9, 0.5], [0.5, 0.1]) == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert rr.auc([], [0.1]) is None


def test_the_threshold_passes_95_percent_of_the_values() -> None:
    values = [float(v) for v in range(1, 101)]
    at = rr.threshold(values)
    assert at == 5.0
    assert np.mean(np.asarray(values) >= at) == pytest.approx(0.96)


def test_a_summary_reads_the_left_out_threshold_from_the_other_sets() -> None:
    def rows(include: list[float], other: list[float]) -> list[dict[str, object]]:
        base = {m: 0.0 for m in rr.MEASURES} | {"message": "m", "background": 0.0,
                                                "background_sd": 0.0}  # fmt: skip
        return [base | {"label": "include", "cosine": v, "relevance": v, "spread": v}
                for v in include] + [
            base | {"label": "other", "cosine": v, "relevance": v, "spread": v}
            for v in other
        ]  # fmt: skip

    summary = rr.summarise({"x": rows([0.5, 0.6], [0.1]), "y": rows([0.2, 0.3], [0.25])})
    # x's includes pass from 0.5: neither of y's (0.2, 0.3) does; y's pass x's all
    assert summary["y"]["cosine"]["left_out_threshold"] == 0.5
    assert summary["y"]["cosine"]["left_out_include_recall"] == 0.0
    assert summary["x"]["cosine"]["left_out_threshold"] == 0.2
    assert summary["x"]["cosine"]["left_out_include_recall"] == 1.0
    assert summary["y"]["cosine"]["auc_include_vs_rest"] == 0.5


def test_lifted_counts_only_learnings_the_bridge_raises_over_the_level() -> None:
    rows = rr.message_rows(*_message())
    cell = rr.summarise({"s": rows})["s"]
    # c: relevance 0.0 → 0.6; b stays at 0.2, d at 0.4 (already over 0.3)
    assert cell["lifted"] == {"include": 1, "exclude": 0, "other": 0}
    assert cell["under_lift"] == {"include": 1, "exclude": 1, "other": 0}


def test_across_sets_gives_the_ranges_and_a_lone_set_has_no_left_out_threshold() -> None:
    rows = rr.message_rows(*_message())
    lone = rr.summarise({"s": rows})
    assert lone["s"]["cosine"]["left_out_threshold"] is None
    ranges = rr.across_sets(lone)["cosine"]
    assert ranges["left_out_recall_min"] is None
    # includes a (0.5), c (0.0) against b (0.1), d (0.2): a wins both, c loses both
    assert ranges["auc_min"] == ranges["auc_max"] == 0.5
    assert ranges["own_thresholds"] == [0.0]


def test_matched_reads_the_threshold_from_the_other_sets_others() -> None:
    def rows(values: dict[str, list[float]]) -> list[dict[str, object]]:
        return [{m: v for m in rr.MEASURES} | {"label": label, "message": "m"}
                for label, vs in values.items() for v in vs]  # fmt: skip

    x = rows({"include": [0.95, 0.5], "other": [float(v) / 10 for v in range(10)]})
    y = rows({"include": [0.85], "exclude": [0.1], "other": [0.9, 0.0]})
    cell = rr.matched({"x": x, "y": y})["0.1"]["cosine"]
    # x's others 0.0 … 0.9: the top 10% from 0.81 → y's include passes, its exclude not
    assert cell["y"] == {"include": 1.0, "exclude": 0.0, "other": 0.5}
    # y's others 0.9, 0.0: the top 10% from 0.81 → only x's 0.95 and its other 0.9
    assert cell["x"] == {"include": 0.5, "exclude": None, "other": 0.1}


def test_the_word_bridge_is_the_best_jaccard_through_the_users_learnings() -> None:
    postings = rr.Postings({
        "a": "The HLC clock orders edits",
        "b": "Each HLC tick is stored with the row",
        "c": "Sync conflicts resolved by HLC",
        "d": "The clock screen shows the time",
    })  # fmt: skip
    # "clock" is used by a, d; "hlc" by a, b, c: Jaccard 1 / 4 through a
    assert postings.bridge("what if the clock is off", "c") == pytest.approx(0.25)
    # a term of the query the memory also uses is no bridge; c shares none with "wandb"
    assert postings.bridge("wandb login fails", "c") == 0.0
    rows = rr.message_rows(*_message())
    assert {r["cooccurrence"] for r in rows} == {0.0}  # no postings: no word bridge


def test_reach_lets_in_the_best_bridged_learning_under_the_level_per_message() -> None:
    rows = rr.message_rows(*_message())
    cell = rr.reach({"s": rows})["spread"]["s"]
    # under 0.3: b (0.2), c (0.0); 5% of two rounds to none, so one: c (bridge 0.6)
    assert (cell["include"], cell["exclude"], cell["other_per_message"]) == (1, 0, 0.0)
    assert cell["auc_under_lift"] == 1.0
