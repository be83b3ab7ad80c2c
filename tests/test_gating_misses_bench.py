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
        ("unrelated to the message, relevance 0.150 below 0.20",
         ("unrelated to the message", 0.2)),
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


def _memory(mid: str, kind: str, content: str, **extra: object) -> dict[str, object]:
    when = "2025-12-01T10:00:00Z"
    return {"id": mid, "kind": kind, "content": content, "created_at": when,
            "updated_at": when, "access_count": 3, "domains": [], **extra}  # fmt: skip


#: A fixture project: the fact the message asks about, a fact about nothing in it and a
#: muted one (never a candidate), the last two labelled needed so that both are missed.
PROJECT = [
    _memory("p-fact-01", "fact", "The billing worker retries failed invoice webhooks five times."),
    _memory("p-fact-02", "fact", "Coffee machine descaling happens every Friday morning."),
    _memory("p-fact-03", "fact", "Invoice webhooks were once retried by cron.", muted=True),
]
MESSAGE = {
    "id": "m-01", "project": "p", "split": "tune", "intent": "question", "complexity": "simple",
    "text": "How many times does the billing worker retry failed invoice webhooks?",
    "must_include": ["p-fact-01", "p-fact-02", "p-fact-03"], "must_exclude": [],
}  # fmt: skip


def test_each_miss_is_a_must_include_left_out_with_its_cause_and_classification() -> None:
    data = gating.Dataset({"p": PROJECT}, [MESSAGE], [])
    with tempfile.TemporaryDirectory() as tmp:
        projects = gating.Projects(data, make_embedder("hash"), Path(tmp))
        found = {m["memory"]: m for m in gating_misses.collect(data, "tune", projects)}
        assert gating_misses.collect(data, "held", projects) == []
    assert set(found) == {"p-fact-02", "p-fact-03"}  # the asked-about fact is injected
    unrelated, muted = found["p-fact-02"], found["p-fact-03"]
    assert muted["cause"] == "not a candidate" and muted["score"] is None
    assert unrelated["cause"] == "below threshold"
    assert unrelated["gap"] == round(unrelated["limit"] - unrelated["score"], 3) > 0
    assert unrelated["labelled"] == ["question", "simple"]
    assert unrelated["intent"] and unrelated["budget"] > 0
    assert "calibrated_relevance" in unrelated["terms"]
    lines = gating_misses.table(list(found.values())).splitlines()
    assert {line for line in lines if not line.startswith(" ")} == {
        "below threshold: 1",
        "not a candidate: 1",
    }
