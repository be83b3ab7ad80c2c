"""``bench/gating_transfer.py`` on hand-made reports: recall per half with its labels and
standard error, pooled over sets, first look against now."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_transfer as gt  # noqa: E402


def _message(split: str, included: int, missed: int) -> dict[str, Any]:
    return {"split": split, "included": ["m"] * included, "missed": ["m"] * missed}


def _report(name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sets": {name: {"profiles": {"gated": {"messages": messages}}}}}


def test_recall_counts_labels_of_one_half_with_its_standard_error() -> None:
    messages = [_message("tune", 3, 1), _message("held", 1, 1), _message("tune", 0, 0)]
    tune = gt.recall(messages, "tune")
    assert (tune["found"], tune["labels"], tune["recall"]) == (3, 4, 0.75)
    assert tune["standard_error"] == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert gt.recall([_message("tune", 0, 0)], "held")["recall"] is None


def test_main_is_the_reports_own_block() -> None:
    report = {"profiles": {"gated": {"messages": [_message("held", 1, 0)]}}}
    assert gt.set_messages(report, "main") == [_message("held", 1, 0)]


def test_compare_pools_labels_not_rates_and_gives_the_change() -> None:
    first = {"a": _report("a", [_message("tune", 1, 1), _message("held", 9, 1)]),
             "b": _report("b", [_message("tune", 2, 2), _message("held", 1, 1)])}  # fmt: skip
    a_now = _report("a", [_message("tune", 2, 0), _message("held", 9, 1)])["sets"]
    b_now = _report("b", [_message("tune", 4, 0), _message("held", 0, 2)])["sets"]
    now = {"sets": {**a_now, **b_now}}
    result = gt.compare(first, now, ["a", "b"])
    assert result["a"]["tune"]["change"] == pytest.approx(0.5)
    assert result["b"]["held"]["change"] == pytest.approx(-0.5)
    # pooled held: 10 of 12 then, 9 of 12 now (not the mean of 0.9 and 0.5)
    held = result["pooled"]["held"]
    assert held["first_look"]["recall"] == pytest.approx(10 / 12)
    assert held["now"]["recall"] == pytest.approx(9 / 12)
    assert held["change"] == pytest.approx(-1 / 12)
    assert result["pooled"]["tune"]["now"]["labels"] == 6


def test_a_set_the_later_report_lacks_is_left_out_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    first = _report("pulse", [_message("held", 3, 1)])
    (tmp_path / "gating-pulse-first-look.json").write_text(json.dumps(first))
    monkeypatch.setattr(gt, "RESULTS", tmp_path)
    now = tmp_path / "now.json"
    now.write_text(json.dumps(_report("pulse", [_message("held", 4, 0)])))
    assert gt.main(["--now", str(now), "--sets", "pulse,harbor"]) == 0
    out = capsys.readouterr().out
    assert "harbor: not in" in out
    assert "pulse   held 0.750" in out and "→ 1.000" in out
