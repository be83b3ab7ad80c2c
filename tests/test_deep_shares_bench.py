"""``bench/deep_shares.py``: a deep call's stages as shares of the median call and of the
slowest tenth, one value per query across runs, value by value. No timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import deep_shares  # noqa: E402


def _call(query: str, budget: int, a: float, b: float, rows: int = 10) -> dict[str, Any]:
    return {"query": query, "budget": budget, "thread_cpu_ms": a + b,
            "stages_ms": {"a": a, "b": b}, "counts": {"rows": rows}}  # fmt: skip


def test_one_value_per_query_and_shallow_calls_left_out() -> None:
    runs = [
        [_call("q1", 5000, 4.0, 6.0), _call("q2", 500, 1.0, 1.0), _call("q3", 3000, 2.0, 2.0)],
        [_call("q1", 5000, 6.0, 6.0, rows=20), _call("q3", 3000, 2.0, 4.0)],
    ]
    calls = deep_shares.per_query(runs)
    assert [c["query"] for c in calls] == ["q1", "q3"]
    assert calls[0]["thread_cpu_ms"] == 11.0 and calls[0]["stages_ms"] == {"a": 5.0, "b": 6.0}
    assert calls[0]["counts"] == {"rows": 15.0}
    assert calls[1]["thread_cpu_ms"] == 5.0 and calls[1]["stages_ms"] == {"a": 2.0, "b": 3.0}


def test_shares_of_the_median_call_and_of_the_slowest_tenth() -> None:
    calls = deep_shares.per_query([[_call(f"q{i}", 4000, float(i), 10.0) for i in range(10)]])
    report = deep_shares.shares(calls)
    assert report["calls"] == 10 and report["slowest_calls"] == 1  # at or above the p90
    assert report["thread_cpu_ms"] == {"median": 14.5, "p95": 18.55, "p99": 18.91,
                                       "slowest_mean": 19.0}  # fmt: skip
    assert report["median"] == {"a": [4.5, round(4.5 / 14.5, 4)], "b": [10.0, round(10 / 14.5, 4)]}
    assert report["slowest"] == {"a": [9.0, round(9 / 19, 4)], "b": [10.0, round(10 / 19, 4)]}
    assert report["counts"] == {"rows": 10.0}
    assert deep_shares.shares([]) == {"calls": 0}
