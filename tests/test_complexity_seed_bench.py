"""``bench/complexity_seed.py``: each complexity disagreement is put with what the seed's
table says of it, and no held half is read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import complexity_seed as bench  # noqa: E402


@pytest.mark.parametrize(
    ("intent", "label", "read", "verdict"),
    [("debugging", "moderate", "complex", "rules follow the seed"),
     ("debugging", "complex", "moderate", "label follows the seed"),
     ("analysis", "deep", "complex", "neither"),  # both are the seed's analysis
     ("analysis", "simple", "moderate", "neither"),  # neither is
     ("question", "simple", "moderate", "label follows the seed"),
     ("generation", "complex", "moderate", "silent"),  # the scope decides, not the table
     ("discussion", "deep", "moderate", "silent"),
     ("continuation", "moderate", "simple", "silent")],
)  # fmt: skip
def test_the_seeds_table_decides_debugging_analysis_and_questions_only(
    intent: str, label: str, read: str, verdict: str
) -> None:
    assert bench.seed_verdict(intent, label, read) == verdict


def _row(group: str, split: str, intent: str, label: str) -> dict[str, Any]:
    return {"id": f"{group}-{split}", "group": group, "split": split, "intent": intent,
            "complexity": label, "text": "x"}  # fmt: skip


def test_held_halves_and_trivial_labels_are_never_read() -> None:
    rows = [_row("main", "tune", "debugging", "moderate"),
            _row("main", "held", "debugging", "moderate"),
            _row("classify-train", "", "debugging", "simple"),
            _row("pulse", "tune", "greeting", "trivial")]  # fmt: skip
    reads = [{"shipped": ["debugging", "complex"]}] * 3 + [{"shipped": ["greeting", "simple"]}]
    out = bench.disagreements(rows, reads)
    assert out["tune"]["n"] == 1 and out["train"]["n"] == 1
    assert out["tune"]["by_verdict"] == {"rules follow the seed": 1}
    assert [m["id"] for m in out["train"]["messages"]] == ["classify-train-"]
