"""``bench/explain_compare.py``, the check that a restructure decides as before: one tree's
answers are the same on every run (else two trees could not be compared bit for bit), they
hold what ``explain()`` decided in full, and the comparison counts an answer that differs."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import explain_compare  # noqa: E402
import gating  # noqa: E402


def test_answers_repeat_bit_for_bit_and_hold_every_decision() -> None:
    """Two runs of the same tree give identical answers, one per set, message and variant
    (and the message's ``context()``), with decisions, reasons, components and a block."""
    first = explain_compare.answers("hash", limit=1)
    assert explain_compare.answers("hash", limit=1) == first
    variants = [*(f"{v}/explain" for v in explain_compare.VARIANTS), "context"]
    assert sorted({key.split("/", 1)[0] for key in first}) == sorted(gating.SETS)
    assert sorted({key.split("/", 2)[2] for key in first}) == sorted(variants)
    explained = [a for key, a in first.items() if key.endswith("/explain")]
    assert any(a["text"] and a["selected"] for a in explained)
    assert any(d[2] != "selected" for a in explained for d in a["decisions"])
    assert any(a["components"] for a in explained)
    assert all(isinstance(v, str) for a in explained for v in a["weights"].values())  # repr


def test_compare_counts_each_differing_answer_by_variant() -> None:
    """An answer that differs in one field, or that one tree lacks, is counted once."""
    base = {"s/m1/default/explain": {"text": "a"}, "s/m1/context": {"text": "a"},
            "s/m2/default/explain": {"text": "b"}}  # fmt: skip
    new = {**base, "s/m2/default/explain": {"text": "c"}}
    del new["s/m1/context"]
    report = explain_compare.compare(
        [("base", Path()), ("new", Path())], {"base": base, "new": new}
    )
    got = report["base vs new"]
    assert (got["answers"], got["differ"]) == (3, 2)
    assert got["by_variant"] == {"default/explain": {"answers": 2, "differ": 1},
                                 "context": {"answers": 1, "differ": 1}}  # fmt: skip
    assert got["first_differing"] == ["s/m1/context", "s/m2/default/explain"]
    same = explain_compare.compare([("a", Path()), ("b", Path())], {"a": base, "b": dict(base)})
    assert same["a vs b"]["differ"] == 0
