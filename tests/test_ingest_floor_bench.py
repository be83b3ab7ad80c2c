"""``bench/ingest_floor.py``: the CPU a target allows, and the model alone run on exactly the
calls a recorded ingest made."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ingest_floor  # noqa: E402


def test_a_target_allows_its_cores_times_the_seconds_it_gives_the_turns() -> None:
    assert ingest_floor.TARGETS == {"sqlite": 400, "postgres": 300}
    assert ingest_floor.budgets(4800, 2) == {"sqlite": 24.0, "postgres": 32.0}
    assert ingest_floor.budgets(4805, 2) == {"sqlite": 24.02, "postgres": 32.03}
    assert ingest_floor.budgets(1200, 4) == {"sqlite": 12.0, "postgres": 16.0}


def test_the_model_runs_the_recorded_calls_and_nothing_else(tmp_path: Path) -> None:
    calls = [["I went to the lake and painted it."], ["a second call", "with two texts"]]
    path = tmp_path / "calls.json"
    path.write_text(json.dumps(calls), encoding="utf-8")
    run = ingest_floor.model_once(path)
    assert (run["calls"], run["chunks"]) == (2, 3)
    assert run["cpu_seconds"] > 0
