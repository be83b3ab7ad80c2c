"""``bench/gating_misses.py``: each must-include miss named by the cause ``explain()``
gave, with the message's classification; a small run with the hash embedder. No assertion
on any score."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating  # noqa: E402
import gating_misses  # noqa: E402

from engrain.embed import make_embedder  # noqa: E402


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("score 0.216 below 0.25", ("below threshold", 0.25)),
        ("a correction, relevance 0.183 below 0.35", ("relevance under its threshold", 0.35)),
        ("about the present, relevance 0.253 below 0.35", ("relevance under its threshold", 0.35)),
        ("relevance 0.210 below 0.31: 1540/2000 tokens taken by more relevant memories",
         ("block filled by more relevant", 0.31)),
        ("procedural, relevance 0.096 below 0.20", ("procedural floor", 0.2)),
        ("procedural share full (290/300 tokens)", ("share full", None)),
        ("unrelated invariants' share full (81/100 tokens)", ("share full", None)),
        ("31 tokens do not fit (478/500)", ("budget", None)),
        ("conflicts with be-dec-01", ("other", None)),
        ("top_k=5 reached", ("other", None)),
        (None, ("not a candidate", None)),
    ],
)  # fmt: skip
def test_a_miss_is_named_by_the_cause_its_reason_gives(
    reason: str | None, expected: tuple[str, float | None]
) -> None:
    assert gating_misses.cause(reason) == expected


def test_each_miss_of_a_small_run_is_a_must_include_left_out_with_its_cause() -> None:
    data = gating.load_data()
    tune = [m for m in data.messages if m["split"] == "tune"][:4]
    subset = gating.Dataset(data.projects, tune, [])
    with tempfile.TemporaryDirectory() as tmp:
        projects = gating.Projects(subset, make_embedder("hash"), Path(tmp))
        found = gating_misses.collect(subset, "tune", projects)
        assert gating_misses.collect(subset, "held", projects) == []
    labels = {m["id"]: m for m in tune}
    causes = {name for _, name in gating_misses.CAUSES} | {"not a candidate", "other"}
    assert found, "the hash embedder misses some must-include memory of four messages"
    for miss in found:
        message = labels[miss["message"]]
        assert miss["memory"] in message["must_include"]
        assert miss["cause"] in causes
        assert miss["labelled"] == [message["intent"], message["complexity"]]
        if miss["cause"] == "below threshold":
            assert miss["gap"] == round(miss["limit"] - miss["score"], 3) >= 0
    assert gating_misses.table(found).splitlines()[0].split(":")[0] in causes
