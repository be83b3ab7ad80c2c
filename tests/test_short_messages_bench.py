"""The short-messages bench (``bench/short_messages.py``): its measures on a hand-checked
case and its two speed readings. No assertion on any score or time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import short_messages  # noqa: E402


def _row(label: str, complexity: str, tokens: int = 0, budgeted: int = 0) -> dict[str, Any]:
    return {"id": f"{label}-{complexity}-{tokens}-{budgeted}", "text": "x", "label": label,
            "kind": "k", "split": "tune", "complexity": complexity, "intent": "discussion",
            "signals": [], "tokens": tokens, "tokens_with_budget": budgeted,
            "memories": int(bool(tokens or budgeted))}  # fmt: skip


def test_a_trivial_message_counts_empty_only_without_and_with_a_budget() -> None:
    rows = [_row("trivial", "trivial"), _row("trivial", "trivial", budgeted=40),
            _row("not", "simple", tokens=90), _row("not", "trivial")]  # fmt: skip
    m = short_messages.measures(rows)
    assert (m["trivial_empty"], m["trivial_missed"]) == (0.5, 1)
    assert (m["not_kept"], m["not_made_trivial"]) == (0.5, 1)
    assert m["by_kind"] == {"not/k": "1/2", "trivial/k": "1/2"}


@pytest.mark.model
def test_the_models_speed_reading_runs_the_rules_and_the_models() -> None:
    speed = short_messages.models_cpu_us(["still red", "thanks!", "why is the job stuck?"])
    assert speed["models_us"] > 0 and speed["models_p99_us"] > 0 and speed["classify_p99_us"] > 0
    assert short_messages.classify_cpu_us(["still red", "thanks!"]) > 0
