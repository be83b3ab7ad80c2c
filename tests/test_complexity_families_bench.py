"""``bench/complexity_families.py``: its confusion matrix, its families and the messages it
reads (never a held half), on hand-made cases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import complexity_families as cf  # noqa: E402


def test_confusion_counts_label_rows_against_reading_columns() -> None:
    pairs = [("simple", "simple"), ("simple", "moderate"), ("complex", "moderate"),
             ("complex", "moderate"), ("deep", "deep")]  # fmt: skip
    matrix = cf.confusion(pairs)
    levels = list(cf.LEVELS)
    assert matrix[levels.index("simple")][levels.index("moderate")] == 1
    assert matrix[levels.index("complex")][levels.index("moderate")] == 2
    assert matrix[levels.index("moderate")][levels.index("complex")] == 0
    assert sum(map(sum, matrix)) == len(pairs)


@pytest.mark.parametrize(
    ("text", "labelled", "read", "family"),
    [("ModuleNotFoundError: No module named 'psycopg2'", "debugging", "debugging",
      "pasted error / output"),
     ("docker build hangs at the npm install step forever", "debugging", "debugging",
      "debugging one-liner"),
     ("Should we keep paying for Datadog or move to Grafana Cloud?", "discussion",
      "discussion", "tool choice / trade-off"),
     ("why did we pick Go for the gateway", "analysis", "analysis", "why analysis"),
     ("Write a function that slugifies a name, lowercase, dashes, and a max length",
      "generation", "generation", "multi-part"),
     ("what's the android package name?", "question", "question", "other")],
)  # fmt: skip
def test_each_message_falls_in_the_first_family_that_fits(
    text: str, labelled: str, read: str, family: str
) -> None:
    assert cf.family(text, labelled, read) == family


def test_it_reads_every_non_held_message_of_both_groups_and_no_held_one() -> None:
    rows = cf.messages()
    assert {m["file"] for m in rows} == set(cf.FILES)
    assert all(m.get("split") != "held" for m in rows)
    assert set(cf.SEED_FOLLOWING).isdisjoint(cf.EARLIER)
