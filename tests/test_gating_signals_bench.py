"""``bench/gating_signals.py``: the classes a candidate falls in, the signals it measures and
the separation it reports; a small run with the hash embedder. No assertion on any score
of the real model."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_signals as gs  # noqa: E402


def _row(label: str, selected: bool, reason: str | None, **signals: float) -> dict[str, Any]:
    return {"label": label, "selected": selected, "reason": reason, "signals": signals}


def test_each_candidate_falls_in_one_class() -> None:
    assert gs.klass(_row("include", True, "selected")) == "hit"
    assert gs.klass(_row("include", False, "score 0.2 below 0.35")) == "miss"
    assert gs.klass(_row("exclude", True, "selected")) == "leak"
    assert gs.klass(_row("exclude", False, "score 0.1 below 0.35")) == "excluded"
    assert gs.klass(_row("", True, "selected")) == "kept"
    assert gs.klass(_row("", False, "score 0.1 below 0.35")) == "rejection"


def test_auc_counts_ties_half() -> None:
    assert gs.auc([1.0, 1.0], [0.0, 0.0]) == 1.0
    assert gs.auc([0.0], [1.0]) == 0.0
    assert gs.auc([0.5], [0.5, 0.0]) == 0.75
    assert math.isnan(gs.auc([], [1.0]))


def test_identifiers_and_their_parts() -> None:
    found = gs.entities("Report plots from fc/plotting.py via sensor_mgr and the SHT40 on MLLP")
    assert {"fc/plotting.py", "plotting", "sensor_mgr", "sensor", "sht40", "mllp"} <= found
    assert "report" not in found and "plots" not in found  # plain words are not identifiers


def test_the_projects_vocabulary_reaches_words_the_message_does_not_use() -> None:
    vocabulary = gs.Vocabulary([
        "resume a failed run from its launch dir", "resume the run after the annotation step",
        "resume the annotation with the new cache", "coverage thresholds for exomes",
        "scratch is purged monthly",
    ])  # fmt: skip
    # "annotation" shares two learnings with "resume": a learning about resuming is reached
    assert vocabulary.expanded_cosine("redo just the annotation", "resume a failed run") > 0
    assert vocabulary.expanded_cosine("redo just the annotation", "coverage thresholds") == 0


def test_the_lift_curve_counts_what_a_term_would_lift_over_its_threshold() -> None:
    rows = [
        _row("include", False, "score 0.370 below 0.40", tag_named=1.0),
        _row("include", False, "score 0.200 below 0.40", tag_named=1.0),
        _row("exclude", False, "score 0.390 below 0.40", tag_named=0.0),
        _row("", False, "score 0.390 below 0.40", tag_named=1.0),
        _row("", True, "selected", tag_named=1.0),
    ]
    report = gs.analyse(rows)
    assert report["counts"]["miss"] == 2 and report["counts"]["kept"] == 1
    tag = report["signals"]["tag_named"]
    assert tag["lift"]["0.05"] == {"misses": 1, "excluded": 0, "lines": 2}
    assert tag["lift"]["0.2"] == {"misses": 2, "excluded": 0, "lines": 3}
    # a shift of every score lifts the must-exclude memory too
    assert report["signals"]["shift"]["lift"]["0.05"] == {"misses": 1, "excluded": 1, "lines": 3}
    assert tag["nonzero"]["miss"] == 1.0 and tag["nonzero"]["excluded"] == 0.0


@pytest.mark.slow
def test_a_small_run_dumps_every_scored_learning_with_its_signals() -> None:
    rows = gs.dump("tune", ["pulse"], "hash")
    gs.signals(rows, ["pulse"], "hash")
    assert rows and all(set(r["signals"]) >= {"tag_named", "entity", "cooccur"} for r in rows)
    report = gs.analyse(rows)
    assert sum(report["counts"].values()) == len(rows)
    assert report["counts"]["hit"] + report["counts"]["miss"] > 0  # the labels are there
