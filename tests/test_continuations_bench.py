"""The continuations benchmark (``bench/continuations.py``) as a fast smoke test: the pairs
keep the rules the measure depends on, the measures are right on a hand-checked case, and
one pair answered with the hash embedder has the answer's shape. No assertion on any
score."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import continuations  # noqa: E402
import gating  # noqa: E402

from engrain.embed import HashEmbedder  # noqa: E402


def test_the_pairs_are_labelled_split_and_name_their_projects_memories() -> None:
    data = continuations.load()  # raises on a label naming no memory of its project
    pairs = data.messages
    assert len(pairs) >= 40
    assert [p["split"] for p in pairs] == ["tune" if i % 2 == 0 else "held"
                                           for i in range(len(pairs))]  # fmt: skip
    assert {p["project"] for p in pairs} >= {"ledgerly", "forecasting", "pulse", "sensor"}
    for p in pairs:
        assert p["previous"].strip() and p["text"].strip() and p["must_include"]
        assert p["turn"] >= 1
    switches = [p for p in pairs if p["intent"] != "continuation" and p["must_exclude"]]
    assert len(switches) >= 6  # messages whose turn before is about something else


def answered(split: str, included: int, missed: int, leaked: bool, tokens: int,
             used: bool) -> dict[str, Any]:  # fmt: skip
    return {"id": "c", "split": split, "intent": "continuation",
            "predicted_intent": "continuation", "previous_used": used,
            "injected": [], "tokens": tokens, "cpu_ms": 1.0,
            "included": ["a"] * included, "missed": ["b"] * missed,
            "leaked": ["x"] if leaked else []}  # fmt: skip


def test_measures_on_a_hand_checked_case() -> None:
    rows = [answered("tune", 1, 1, False, 100, True), answered("tune", 2, 0, True, 300, False)]
    m = continuations.measures(rows)
    assert m == {"pairs": 2, "must_include_recall": 0.75, "must_exclude_rate": 0.5,
                 "mean_tokens": 200.0, "intent_accuracy": 1.0, "previous_used": 1,
                 "median_cpu_ms": 1.0}  # fmt: skip
    assert continuations.mode_name(None) == "alone"
    assert continuations.mode_name(1.0) == "previous"
    assert continuations.mode_name(0.5) == "previous@0.5"


def test_one_pair_answered_alone_and_with_its_previous_turn(tmp_path: Path) -> None:
    data = continuations.load()
    pair = data.messages[0]
    projects = gating.Projects(
        gating.Dataset({pair["project"]: data.projects[pair["project"]]}, [pair], []),
        HashEmbedder(), tmp_path,
    )  # fmt: skip
    for weight in (None, 1.0):
        with projects.fresh(pair["project"]) as engine:
            a = continuations.answer(engine, pair, weight)
        assert a["id"] == pair["id"] and a["previous_used"] is (weight is not None)
        assert set(a["included"]) | set(a["missed"]) == set(pair["must_include"])


def test_the_triples_hold_the_assistants_answer_and_alternate_splits() -> None:
    data = continuations.load(continuations.TRIPLES)  # raises on a label naming no memory
    triples = data.messages
    assert len(triples) >= 20
    assert [p["split"] for p in triples] == ["tune" if i % 2 == 0 else "held"
                                             for i in range(len(triples))]  # fmt: skip
    for p in triples:
        assert p["previous"].strip() and p["assistant"].strip() and p["text"].strip()
        assert p["must_include"] and p["turn"] >= 1
        assert p["assistant"] != p["previous"]


def test_each_turn_before_is_the_text_passed_as_previous() -> None:
    pair = {"previous": "Which queue?", "assistant": "The billing queue."}
    assert continuations.turn_before(pair, "user") == "Which queue?"
    assert continuations.turn_before(pair, "assistant") == "The billing queue."
    assert continuations.turn_before(pair, "both") == "Which queue?\nThe billing queue."
    with pytest.raises(ValueError, match="system"):
        continuations.turn_before(pair, "system")


def test_one_triple_answered_with_each_turn_before(tmp_path: Path) -> None:
    data = continuations.load(continuations.TRIPLES)
    pair = data.messages[0]
    projects = gating.Projects(
        gating.Dataset({pair["project"]: data.projects[pair["project"]]}, [pair], []),
        HashEmbedder(), tmp_path,
    )  # fmt: skip
    for turn in continuations.TURNS:
        with projects.fresh(pair["project"]) as engine:
            a = continuations.answer(engine, pair, 1.0, turn)
        assert a["id"] == pair["id"] and a["previous_used"]
        assert set(a["included"]) | set(a["missed"]) == set(pair["must_include"])
