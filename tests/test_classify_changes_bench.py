"""``bench/classify_changes.py``: every text the project holds, by kind; a text that needs
memory read trivial is counted on its own; every text read differently is listed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import classify_changes as bench  # noqa: E402


def _row(kind: str, complexity: str, intent: str = "", group: str = "g") -> dict[str, Any]:
    return {"kind": kind, "id": f"{kind}-{complexity}", "group": group, "split": "tune",
            "text": "t", "turn": 0, "intent": intent, "complexity": complexity}  # fmt: skip


def test_a_text_that_needs_memory_read_trivial_is_counted_on_its_own() -> None:
    rows = [_row("labelled", "simple", "question"), _row("short", "not"),
            _row("short", "trivial"), _row("trivial", "trivial")]  # fmt: skip
    reads = [["greeting", "trivial", "greeting", "trivial"],  # a question made trivial
             ["discussion", "moderate", "discussion", "moderate"],
             ["discussion", "simple", "greeting", "trivial"],  # the model made it trivial
             ["greeting", "trivial", "greeting", "trivial"]]  # fmt: skip
    got = bench.summary(rows, reads)
    assert got["labelled/g/tune"] == {"texts": 1, "read_trivial": 1, "intent_as_labelled": 0,
                                      "complexity_as_labelled": 0,
                                      "needs_memory_read_trivial": 1}  # fmt: skip
    assert got["short/g/tune"] == {"texts": 2, "read_trivial": 1, "trivial_read_trivial": 1}
    assert got["trivial/g/tune"]["trivial_read_trivial"] == 1


def test_a_change_of_the_rules_alone_is_listed_too() -> None:
    rows = [_row("short", "trivial"), _row("short", "not")]
    base = [["discussion", "simple", "greeting", "trivial"], ["question", "simple"] * 2]
    new = [["greeting", "trivial", "greeting", "trivial"], ["question", "simple"] * 2]
    changed = bench.changes(rows, base, new)
    assert [c["id"] for c in changed] == ["short-trivial"]
    assert changed[0]["base"][2:] == changed[0]["new"][2:]  # the shipped reading was already so


def test_every_kind_of_text_is_read(tmp_path: Path) -> None:
    locomo = tmp_path / "locomo.json"
    turns = [{"text": "Thanks, ttyl!"}, {"text": "When did Ada move?"}]
    sample = {"qa": [{"question": "When did Ada move?"}],
              "conversation": {"session_1": turns, "session_1_date_time": "1 May"}}  # fmt: skip
    locomo.write_text(json.dumps([sample]))
    rows = bench.texts(locomo)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"labelled", "trivial", "short", "locomo"}
    asked = [r for r in rows if r["kind"] == "locomo"]
    assert sorted((r["group"], r["text"]) for r in asked) == [
        ("question", "When did Ada move?"), ("turn", "Thanks, ttyl!")
    ]  # fmt: skip
    assert all(r["complexity"] in ("trivial", "not") for r in rows if r["kind"] == "short")
