"""``bench/gating_frontier.py`` on hand-made answers: a table of thresholds by intent scored
by summing each message's answer at its intent's shift, the shared table and the per-set
oracle within a set's limits; and ``bench/gating_previous.py``'s turn before."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_frontier as gf  # noqa: E402
import gating_previous as gp  # noqa: E402

SHIFTS = (-0.05, 0.0, 0.05)


def _row(intent: str, found: int, tokens: int, leaked: bool = False) -> dict[str, Any]:
    return {
        "intent": intent,
        "found": [f"m{i}" for i in range(found)],
        "leaked": leaked,
        "tokens": tokens,
    }


def _cell(by_shift: dict[float, list[dict[str, Any]]], labels: list[int]) -> dict[str, Any]:
    messages = [
        {"id": f"q{k}", "labels": [f"m{i}" for i in range(n)]} for k, n in enumerate(labels)
    ]
    return {
        "messages": messages,
        "grid": {"default": {str(d): rows for d, rows in by_shift.items()}},
    }


#: Two messages, a question and a request for code: a lower threshold finds the question's
#: second label for 1,000 more tokens, the request's for 100; a greeting's answer never moves.
CELL = _cell(
    {
        -0.05: [_row("question", 2, 3_000), _row("generation", 2, 1_100), _row("greeting", 0, 0)],
        0.0: [_row("question", 1, 2_000), _row("generation", 1, 1_000), _row("greeting", 0, 0)],
        0.05: [_row("question", 1, 1_500), _row("generation", 0, 500), _row("greeting", 0, 0)],
    },
    [2, 2, 0],
)


def test_a_table_by_intent_is_the_sum_of_each_messages_answer_at_its_intents_shift() -> None:
    index = gf.combos(len(gf.INTENTS), len(SHIFTS))
    assert index.shape == (len(SHIFTS) ** len(gf.INTENTS), len(gf.INTENTS))
    found, leak, tokens = gf._sums(CELL, "default", SHIFTS, index)
    q, g = gf.INTENTS.index("question"), gf.INTENTS.index("generation")
    for k in range(index.shape[0]):
        dq, dg = SHIFTS[index[k, q]], SHIFTS[index[k, g]]
        rows = CELL["grid"]["default"]
        assert found[k] == len(rows[str(dq)][0]["found"]) + len(rows[str(dg)][1]["found"])
        assert tokens[k] == rows[str(dq)][0]["tokens"] + rows[str(dg)][1]["tokens"]
        assert leak[k] == 0


def test_the_limits_choose_the_cheaper_gain() -> None:
    index = gf.combos(len(gf.INTENTS), len(SHIFTS))
    # default mean 1,000 tokens over 3 messages; 1,200 allows 600 more: the request's label
    best = gf.best_per_set({"s": CELL}, "default", SHIFTS, index, strict=False)["s"]
    assert best is not None and best["found"] == 3
    # ties go to the fewest tokens: the question's threshold raised costs it nothing here
    assert best["shifts"]["generation"] == -0.05 and best["shifts"]["question"] == 0.05
    # without a token limit both lower thresholds pay
    free = gf.best_per_set(
        {"s": CELL}, "default", SHIFTS, index, strict=False, max_tokens=float("inf")
    )["s"]
    assert free is not None and free["found"] == 4
    shared = gf.best_shared({"s": CELL}, "default", SHIFTS, index, strict=False)
    assert shared is not None and shared["found"] == 3
    single = gf.one_shift({"s": CELL}, "default", SHIFTS, strict=False)
    assert single is not None and single["found"] == 2  # one shift for both cannot pay


def test_a_set_beyond_its_limits_at_the_default_may_not_get_worse() -> None:
    over = _cell({d: [_row("question", 1, 2_000, leaked=True)] for d in SHIFTS}, [1])
    leaks, tokens = gf.limits(over, strict=False)
    assert leaks >= 1 and tokens >= 2_000
    leaks, tokens = gf.limits(over, strict=True)
    assert leaks < 1 and tokens < 2_000
    index = gf.combos(len(gf.INTENTS), len(SHIFTS))
    assert gf.best_per_set({"s": over}, "default", SHIFTS, index, strict=True)["s"] is None


def test_what_no_shift_reaches() -> None:
    reach = gf.reach({"s": CELL}, ["default"], SHIFTS)["s"]
    assert reach["labels"] == 4 and reach["ever"] == 4 and reach["never"] == []
    assert len(gf.SHIFTS) == 13 and 0.0 in gf.SHIFTS


def test_the_turn_before_is_the_message_before_in_its_project() -> None:
    messages = [
        {"id": "a1", "project": "a", "text": "what is the cutoff?"},
        {"id": "b1", "project": "b", "text": "unrelated"},
        {"id": "a2", "project": "a", "text": "and for exomes?"},
    ]
    assert gp.before_each(messages) == {"a2": "what is the cutoff?"}
