"""``bench/select_replay.py``: both trees' selections compared on every captured call, with
and without explanations; a baseline that selects otherwise is counted, one that selects
the same is not. No timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from engrain import Kind, Memory
from engrain.recall.classify import Intent
from engrain.recall.select import Ranked

from .conftest import NOW

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import select_replay  # noqa: E402


def _captured() -> list[tuple[Any, dict[str, Any]]]:
    ranked = [
        Ranked(Memory(id=f"m{i}", user_id="u", content=f"fact {i}", memory_type=Kind.FACT.
                      default_memory_type, kind=Kind.FACT, created_at=NOW, updated_at=NOW),
               0.9 - i / 100, 0.8, 0.9 - i / 100)
        for i in range(12)
    ]  # fmt: skip
    kwargs: dict[str, Any] = {
        "line_tokens": lambda m: 40, "line_floor": lambda m: 30, "token_budget": 3_000,
        "intent": Intent.QUESTION,
    }  # fmt: skip
    return [(ranked, kwargs), (ranked[:5], kwargs | {"token_budget": 120})]


def test_the_same_selection_differs_nowhere_and_another_is_counted() -> None:
    same = select_replay.load_select(REPO / "src")
    report = select_replay.replay(_captured(), same, rounds=1)
    assert report["differing"] == {"explain_false": 0, "explain_true": 0}
    assert report["timed"]["all"]["calls"] == 2 and report["timed"]["deep"]["calls"] == 1

    def fewer(ranked: Any, **kwargs: Any) -> Any:  # a tree that drops the last selected
        selected, used, decisions = same.select_gated(ranked, **kwargs)
        return selected[:-1], used, decisions

    other: ModuleType | SimpleNamespace = SimpleNamespace(select_gated=fewer)
    report = select_replay.replay(_captured(), other, rounds=1)  # type: ignore[arg-type]
    assert report["differing"] == {"explain_false": 2, "explain_true": 2}
