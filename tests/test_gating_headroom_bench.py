"""``bench/gating_headroom.py`` on hand-made decisions: the misses with their rank and free
tokens, the bands under the threshold, the unused-budget fill, the second hop's reach and
the weak verbs' document frequency."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_headroom as gh  # noqa: E402


def _d(mid: str, relevance: float, *, selected: bool = False, reason: str = "selected",
       tokens: int = 40, content: str = "", domains: tuple[str, ...] = (),
       kind: str = "fact", type_: str = "semantic") -> dict[str, Any]:  # fmt: skip
    return {"id": mid, "kind": kind, "type": type_, "domains": list(domains),
            "content": content or mid, "score": 0.3, "tokens": tokens, "selected": selected,
            "reason": reason, "relevance": relevance}  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    below = "score 0.300 below 0.35"
    return [
        {"set": "s", "id": "m1", "text": "why does the invoice job hang", "intent": "debugging",
         "budget": 500, "tokens_used": 300, "must_include": ["best", "hop"],
         "must_exclude": ["stale"],
         "decisions": [
             _d("best", 0.9, selected=True, content="invoice job hangs on the ledger lock",
                domains=("billing",)),
             _d("stale", 0.45, reason=below, content="old invoice cron"),
             _d("hop", 0.3, reason=below, content="ledger lock timeout is 30 s",
                domains=("billing",)),
             _d("far", 0.1, reason=below, content="coffee rota", tokens=400),
         ]},
    ]  # fmt: skip


def test_a_miss_carries_its_rank_relevance_and_the_free_tokens() -> None:
    (miss,) = gh.misses(_rows())
    assert (miss["memory"], miss["rank"], miss["free"], miss["relevance"]) == ("hop", 3, 200, 0.3)


def test_the_bands_count_lines_under_the_threshold_with_their_labels() -> None:
    assert gh.bands(_rows()) == [
        {"from": 0.1, "to": 0.2, "lines": 1, "include": 0, "exclude": 0, "tokens": 400},
        {"from": 0.3, "to": 0.4, "lines": 1, "include": 1, "exclude": 0, "tokens": 40},
        {"from": 0.4, "to": 0.5, "lines": 1, "include": 0, "exclude": 1, "tokens": 40},
    ]


def test_the_unused_fill_spends_free_tokens_most_relevant_first() -> None:
    # floor 0.3: the stale note (0.45) comes first and leaks, then the labelled one
    full = gh.unused_fill(_rows(), 0.3, 1.0)
    assert (full["found"], full["lines"], full["new_leaks"]) == (1, 2, 1)
    assert full["tokens_a_message"] == 82.0
    # within 0.65 of 500 tokens only the first fits (300 + 41 ≤ 325 is false): nothing
    assert gh.unused_fill(_rows(), 0.3, 0.65)["lines"] == 0
    assert gh.unused_fill(_rows(), 0.5, 1.0)["lines"] == 0


def test_a_second_hop_reaches_by_a_rare_shared_term_or_a_domain() -> None:
    # "ledger" and "lock" are in two learnings and not in the message: a rare term at df 2
    by_term = gh.second_hop(_rows(), top=1, rare_df=2)
    assert by_term["include_reached"] == 1 and by_term.get("other_reached", 0) == 0
    assert by_term["precision"] == 1.0 and by_term["base_rate"] == round(1 / 3, 4)
    assert gh.second_hop(_rows(), top=1, rare_df=1).get("include_reached", 0) == 0
    by_domain = gh.second_hop(_rows(), top=1, rare_df=None)
    assert by_domain["include_reached"] == 1 and by_domain["exclude_not"] == 1


def test_weak_verbs_report_their_share_of_the_learnings() -> None:
    rows = _rows()
    rows[0]["text"] = "I need the invoice job"
    rows[0]["decisions"][2]["content"] = "we need the ledger lock"
    (need,) = gh.weak_verbs(rows, ("need",))
    assert need["share"] == {"s": 0.25} and need["include_not"] == 1
