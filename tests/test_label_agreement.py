"""The agreement arithmetic of ``bench/label_agreement.py`` on tiny hand-computed cases,
and the second reading's file: it covers exactly the labelled messages, with known labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import label_agreement as la  # noqa: E402


def test_agreement_and_within_one() -> None:
    a = ["simple", "moderate", "complex", "deep"]
    b = ["simple", "complex", "simple", "deep"]
    assert la.agreement(a, b) == pytest.approx(0.5)
    # moderate/complex is one level apart, complex/simple two
    assert la.within_one(a, b) == pytest.approx(0.75)
    assert la.agreement([], []) is None
    with pytest.raises(ValueError):
        la.agreement(["a"], [])


def test_cohen_kappa_hand_computed() -> None:
    # observed 3/4; reader a: x 1/2, y 1/2; reader b: x 1/4, y 3/4;
    # chance = 1/2*1/4 + 1/2*3/4 = 1/2; kappa = (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert la.cohen_kappa(["x", "x", "y", "y"], ["x", "y", "y", "y"]) == pytest.approx(0.5)
    # the textbook case: 50 items, 20 yes/yes, 15 no/no, 5 yes/no, 10 no/yes:
    # observed 0.7, chance 0.5*0.6 + 0.5*0.4 = 0.5, kappa 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert la.cohen_kappa(a, b) == pytest.approx(0.4)
    assert la.cohen_kappa(["x", "y"], ["x", "y"]) == pytest.approx(1.0)
    # agreeing less than chance is negative: observed 0, chance 1/2
    assert la.cohen_kappa(["x", "y"], ["y", "x"]) == pytest.approx(-1.0)
    # both readers used one label for everything: chance is 1, kappa undefined
    assert la.cohen_kappa(["x", "x"], ["x", "x"]) is None


def test_weighted_kappa_hand_computed() -> None:
    levels = ["0", "1", "2"]
    # weights |i-j|/2; observed disagreement (0 + 1/2 + 0)/3 = 1/6;
    # a: 1/3 each level, b: "0" 1/3, "2" 2/3;
    # chance = 1/3*(2/3*1) + 1/3*(1/3*1/2 + 2/3*1/2) + 1/3*(1/3*1) = 2/9 + 1/6 + 1/9 = 1/2
    # weighted kappa = 1 - (1/6)/(1/2) = 2/3
    a, b = ["0", "1", "2"], ["0", "2", "2"]
    assert la.weighted_kappa(a, b, levels) == pytest.approx(2 / 3)
    # unweighted on the same: observed 2/3, chance 1/3*1/3 + 1/3*2/3 = 1/3, kappa 1/2
    assert la.cohen_kappa(a, b) == pytest.approx(0.5)
    # a near miss costs less than a far one
    near = la.weighted_kappa(["0", "2", "0", "2"], ["1", "2", "0", "2"], levels)
    far = la.weighted_kappa(["0", "2", "0", "2"], ["2", "2", "0", "2"], levels)
    assert near is not None and far is not None and near > far


def test_confusion_rows_are_the_first_reading() -> None:
    matrix = la.confusion(["a", "a", "b"], ["a", "b", "b"], ["a", "b"])
    assert matrix == [[1, 1], [0, 1]]


def _message(i: int, writer: tuple[str, str], second: tuple[str, str]) -> la.Message:
    return la.Message(f"m-{i}", "messages", "held", "text", 0, writer, second)


def test_classifier_block_on_agreed_messages_and_patterns() -> None:
    messages = [
        _message(0, ("debugging", "moderate"), ("debugging", "complex")),
        _message(1, ("question", "simple"), ("question", "simple")),
        _message(2, ("discussion", "moderate"), ("analysis", "complex")),
        _message(3, ("debugging", "moderate"), ("debugging", "complex")),
    ]
    predicted = {
        "rules": {"m-0": ("debugging", "complex"), "m-1": ("question", "moderate"),
                  "m-2": ("analysis", "moderate"), "m-3": ("question", "moderate")},
    }  # fmt: skip
    out = la.block(messages, predicted)
    intent = out["classifier"]["rules"]["intent"]
    complexity = out["classifier"]["rules"]["complexity"]
    assert intent["vs_writers"] == pytest.approx(0.5)
    assert intent["vs_second"] == pytest.approx(0.75)
    assert intent["vs_either"] == pytest.approx(0.75)
    assert (intent["agreed_n"], intent["on_agreed"]) == (3, pytest.approx(2 / 3, abs=1e-3))
    assert complexity["vs_writers"] == pytest.approx(0.5)
    assert complexity["vs_second"] == pytest.approx(0.25)
    assert (complexity["agreed_n"], complexity["on_agreed"]) == (1, pytest.approx(0.0))
    assert out["readings"]["complexity"]["exact"] == pytest.approx(0.25)
    assert out["complexity_confusion"]["matrix"][2][3] == 3  # moderate -> complex
    top = la.patterns(messages, 1)[0]
    assert (top["writer"], top["second"], top["n"]) == ("moderate", "complex", 3)
    assert la.patterns(messages, 0)[0]["ids"] == ["m-2"]


def test_second_reading_covers_every_labelled_message() -> None:
    messages = la.load()
    assert len(messages) == 642
    assert len({m.id for m in messages}) == len(messages)
    assert {m.second[1] for m in messages} <= set(la.LEVELS)
    assert {m.second[0] for m in messages} <= set(la.INTENTS)


def test_run_with_the_hash_embedder_has_the_report_shape(tmp_path: Path) -> None:
    out = tmp_path / "agreement.json"
    assert la.main(["--embedder", "hash", "--limit", "4", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["files"]) == set(la.FILES)
    assert set(result["files"]["messages"]) == {"all", "tune", "held"}
    assert set(result["files"]["classify-train-2"]) == {"all"}
    assert result["pooled"]["n"] == 4 * len(la.FILES)
    assert result["files"]["classify-train-2"]["all"]["model_in_sample"] is True
    assert result["files"]["messages-sensor"]["held"]["model_in_sample"] is False
