"""``bench/classify_lopo.py``: a rule change counts on a left-out set only when the other
sets gained from it; the held halves stay out unless asked; each miss is put with the signal
that decided it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import classify_lopo as bench  # noqa: E402


def _row(group: str, intent: str, split: str = "tune") -> dict[str, Any]:
    return {"group": group, "split": split, "intent": intent, "complexity": "simple"}


def _read(intent: str) -> dict[str, Any]:
    return {"rules": [intent, "simple"], "shipped": [intent, "simple"], "signals": []}


def test_the_lopo_gain_counts_a_left_out_set_only_when_the_others_gained() -> None:
    # main: the change fixes two messages; pulse: it fixes one and breaks one; sensor: it
    # breaks one; the held half's fix is not counted on the tune halves
    rows = [_row("main", "debugging"), _row("main", "debugging"),
            _row("pulse", "debugging"), _row("pulse", "question"),
            _row("sensor", "question"), _row("main", "debugging", split="held")]  # fmt: skip
    base = [_read(i) for i in ("question", "question", "question", "question", "question",
                               "question")]  # fmt: skip
    new = [_read(i) for i in ("debugging", "debugging", "debugging", "debugging", "debugging",
                              "debugging")]  # fmt: skip
    verdict = bench.judge(rows, base, new, "tune")["shipped intent"]
    sets = verdict["sets"]
    assert (sets["main"]["left_out"], sets["main"]["others"]) == (2, -1)
    assert (sets["pulse"]["left_out"], sets["pulse"]["others"]) == (0, 1)
    assert (sets["sensor"]["left_out"], sets["sensor"]["others"]) == (-1, 2)
    assert verdict["total"] == 1
    # main's own gain does not count (the others lost); sensor's loss does (they gained)
    assert verdict["lopo_gain"] == -1
    assert (verdict["left_out_wins"], verdict["left_out_losses"]) == (0, 1)
    held = bench.judge(rows, base, new, "held")["shipped intent"]
    assert held["sets"]["main"]["left_out"] == 1 and held["total"] == 1


def test_a_miss_goes_to_the_signal_that_decided_it() -> None:
    fired = ["code", "symptom", "intent:debugging", "jargon", "snippet"]
    assert bench.family(fired, "intent") == "domain words"  # the symptom decided debugging
    assert bench.family(fired, "complexity") == "code"  # "jargon" is noted, decides nothing
    model = ["symptom", "intent:debugging", "model intent: debugging → continuation", "short"]
    assert bench.family(model, "intent") == "intent model"
    assert bench.family(model, "complexity") == "length"
    assert bench.family(["intent:discussion"], "complexity") == "none (the intent's default)"
    assert bench.family(["trivial_phrase"], "intent") == "trivial"
