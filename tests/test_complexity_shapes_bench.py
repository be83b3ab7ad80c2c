"""``bench/complexity_shapes.py``: complexity errors grouped by the message's shape, counted
against the writer, the second reader and both where they agree; the held halves stay out
unless asked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import complexity_shapes as bench  # noqa: E402


def _row(id_: str, text: str, intent: str, complexity: str) -> dict[str, Any]:
    return {"id": id_, "text": text, "intent": intent, "complexity": complexity}


def test_a_message_has_every_shape_it_shows() -> None:
    row = _row("a", "npm ci fails: ERESOLVE unable to resolve dependency tree", "debugging",
               "simple")  # fmt: skip
    assert bench.shapes_of(row) == [
        "one-line failure report", "one line with an error's text", "length 50–89",
        "every message",
    ]  # fmt: skip
    parts = _row("b", "Cover the handler with tests: duplicate callback, unknown id, timeout",
                 "generation", "complex")  # fmt: skip
    assert "multi-part ask" in bench.shapes_of(parts)
    assert bench.shapes_of(_row("c", "same for staging", "continuation", "simple")) == [
        "follow-up", "length 0–49", "every message"
    ]  # fmt: skip
    assert bench.length_band(49) == "length 0–49" and bench.length_band(400) == "length ≥ 400"


def test_the_shape_table_counts_each_reader_and_both_where_they_agree() -> None:
    rows = [
        _row("x1", "the job hangs", "debugging", "complex"),  # both readers: complex
        _row("x2", "the job hangs again", "debugging", "moderate"),  # second reader: complex
        _row("x3", "the job is slow", "debugging", "moderate"),  # no second reading
    ]
    second = {"x1": "complex", "x2": "complex"}
    table = bench.shape_table(rows, ["complex", "complex", "simple"], second)
    cell = table["one-line failure report"]
    assert (cell["n"], cell["writer"], cell["lower"], cell["higher"]) == (3, 1, 1, 1)
    assert (cell["n_second"], cell["second"]) == (2, 2)
    assert (cell["n_both"], cell["both"]) == (1, 1)


def test_the_confusion_matrix_puts_each_message_at_its_label_and_reading() -> None:
    rows = [_row("a", "t", "question", "simple"), _row("b", "t", "question", "moderate")]
    out = bench.confusion(rows, ["simple", "simple"])
    assert out["matrix"]["moderate"]["simple"] == 1 and out["matrix"]["simple"]["simple"] == 1
    assert out["as_labelled"] == 0.5


def test_intent_misses_are_counted_per_reading() -> None:
    rows = [_row("a", "t", "question", "simple"), _row("b", "t", "debugging", "complex")]
    reads = [
        {"rules": ["debugging", "complex"], "shipped": ["question", "simple"]},
        {"rules": ["discussion", "moderate"], "shipped": ["debugging", "complex"]},
    ]
    assert bench.intent_misses(rows, reads) == {
        "rules": {"question → debugging": 1, "debugging → discussion": 1}, "shipped": {}
    }  # fmt: skip


def test_the_second_reading_is_keyed_by_message() -> None:
    second = bench.second_reading()
    assert len(second) >= 600 and set(second.values()) <= set(bench.LEVELS)
