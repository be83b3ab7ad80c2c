"""``bench/tail_stages.py``: a stage is charged its own time, not its callees'; runs are
compared per query, the slowest tenth taken by the first tree's medians, and blocks that
differ are counted. A fake clock, no timing."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import tail_stages  # noqa: E402


class Clock:
    """``time.thread_time`` that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_is_charged_its_own_time_only(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(tail_stages.time, "thread_time", clock)
    spans = tail_stages.Spans()
    spans.thread = tail_stages.threading_ident()

    def inner() -> None:
        clock.now += 0.003

    wrapped_inner = spans.wrap(inner, "inner")

    def outer() -> None:
        clock.now += 0.001
        wrapped_inner()
        clock.now += 0.002
        wrapped_inner()

    spans.wrap(outer, "outer")()
    assert spans.spent["inner"] == pytest.approx(0.006)
    assert spans.spent["outer"] == pytest.approx(0.003)


def _run(path: Path, calls: list[tuple[str, float, str]]) -> Path:
    rows: list[dict[str, Any]] = [
        {"query": q, "thread_cpu_ms": cpu, "gc_ms": 0.0, "stages_ms": {"scoring": cpu / 2},
         "block": block}
        for q, cpu, block in calls
    ]  # fmt: skip
    path.write_text(json.dumps({"calls": rows}), encoding="utf-8")
    return path


def test_runs_are_paired_per_query_and_blocks_compared(tmp_path: Path) -> None:
    queries = [f"q{i}" for i in range(20)]
    base = [(q, 10.0 + i, f"b{i}") for i, q in enumerate(queries)]  # q19, q18 slowest
    # the new tree is fastest where the base is slowest, and one block differs
    new = [(q, 40.0 - i, f"b{i}" if q != "q3" else "other") for i, q in enumerate(queries)]
    report = tail_stages.paired({
        "base": [_run(tmp_path / "b1.json", base), _run(tmp_path / "b2.json", base)],
        "new": [_run(tmp_path / "n1.json", new)],
    })  # fmt: skip
    # the slowest tenth is the base's two slowest queries, q19 and q18, in both trees
    assert report["base"]["slowest_tenth"]["thread_cpu_ms"] == pytest.approx(28.5)
    assert report["new"]["slowest_tenth"]["thread_cpu_ms"] == pytest.approx(21.5)
    assert report["new"]["slowest_tenth"]["scoring"] == pytest.approx(10.75)
    assert report["blocks_differing"] == {"base": 0, "new": 1}
    assert report["blocks_compared"] == {"base": 20, "new": 20}


def test_calls_with_a_full_collection_can_be_left_out_and_counts_are_paired(
    tmp_path: Path,
) -> None:
    """``gc_max_ms`` leaves out of the medians the calls whose collections took more (the
    full collection: the same call of every run of a tree); the calls' counts are paired
    like the stages."""
    rows: list[dict[str, Any]] = [
        {"query": q, "thread_cpu_ms": cpu, "gc_ms": gc, "stages_ms": {"selection": cpu / 2},
         "counts": {"ids made": ids}}
        for q, cpu, gc, ids in [("q0", 10.0, 0.5, 100), ("q0", 50.0, 38.0, 100),
                                ("q0", 12.0, 0.0, 300)]
    ]  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"calls": rows}), encoding="utf-8")
    every = tail_stages.paired({"base": [path]})["base"]["slowest_tenth"]
    kept = tail_stages.paired({"base": [path]}, gc_max_ms=10.0)["base"]["slowest_tenth"]
    assert every["selection"] == pytest.approx(6.0)
    assert kept["selection"] == pytest.approx(5.5)
    assert every["count: ids made"] == pytest.approx(100.0)
    assert kept["count: ids made"] == pytest.approx(200.0)


def test_calls_are_also_grouped_by_the_depth_of_their_pool(tmp_path: Path) -> None:
    """Deep calls (a budget of at least ``latency.DEEP_BUDGET``, by the first tree's first
    run) and the others are averaged apart, on the same queries in every run compared."""

    def run(path: Path, cpus: list[float]) -> Path:
        budgets = [500, 2000, 3000, 7500]
        rows = [{"query": f"q{i}", "thread_cpu_ms": cpu, "gc_ms": 0.0, "budget": budgets[i],
                 "stages_ms": {"gather": cpu / 4}} for i, cpu in enumerate(cpus)]  # fmt: skip
        path.write_text(json.dumps({"calls": rows}), encoding="utf-8")
        return path

    report = tail_stages.paired({
        "10k": [run(tmp_path / "a.json", [10.0, 12.0, 20.0, 24.0])],
        "100k": [run(tmp_path / "b.json", [14.0, 16.0, 28.0, 36.0])],
    })  # fmt: skip
    assert tail_stages.DEEP_BUDGET == 2040  # 2,000 tokens is an ordinary pool, 3,000 deep
    assert report["10k"]["deep"]["thread_cpu_ms"] == pytest.approx(22.0)
    assert report["10k"]["shallow"]["thread_cpu_ms"] == pytest.approx(11.0)
    assert report["100k"]["deep"]["gather"] == pytest.approx(8.0)
    assert report["100k"]["shallow"]["gather"] == pytest.approx(3.75)


def test_a_query_left_out_of_one_tree_is_averaged_in_the_others_only(tmp_path: Path) -> None:
    """With ``gc_max_ms``, a query whose only call in a tree held a full collection is in
    none of that tree's groups (it was a ``KeyError``), and still in the other tree's."""

    def run(path: Path, gcs: list[float]) -> Path:
        rows = [{"query": f"q{i}", "thread_cpu_ms": 10.0 + i, "gc_ms": gc,
                 "stages_ms": {"gather": 1.0 + i}} for i, gc in enumerate(gcs)]  # fmt: skip
        path.write_text(json.dumps({"calls": rows}), encoding="utf-8")
        return path

    report = tail_stages.paired(
        {"base": [run(tmp_path / "a.json", [0.0] * 3)],
         "new": [run(tmp_path / "b.json", [0.0, 0.0, 35.0])]},
        gc_max_ms=10.0,
    )  # fmt: skip
    assert report["base"]["slowest_tenth"]["gather"] == pytest.approx(3.0)  # q2
    assert "slowest_tenth" not in report["new"]  # q2 left out: nothing to average
    assert report["new"]["rest"]["gather"] == pytest.approx(1.5)


def _looked_up(module: types.ModuleType) -> set[str]:
    """The names the code of ``module``'s own functions and methods looks up (nested code
    included)."""
    names: set[str] = set()
    own = [v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__]
    functions = [*own, *(m for c in own if inspect.isclass(c) for m in vars(c).values())]
    codes = [f.__code__ for f in functions if inspect.isfunction(f)]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


@pytest.mark.parametrize("bench", ["tail_stages", "backend_stages"])
def test_every_stage_wrapped_is_where_the_gate_looks_it_up(bench: str) -> None:
    """A function wrapped in a module's globals is charged only if it is called from there:
    the module's own function (called as ``module.name``) or a name that module's code looks
    up (the gate's stages live in ``recall.understand``, ``pool``, ``pool_rules``, ``rank``,
    ``selection`` and ``block``). ``install`` skips a name that is missing, so a stage moved
    elsewhere would silently be charged to its caller."""
    for owner, attr, stage in importlib.import_module(bench).STAGES:
        found = getattr(owner, attr, None)
        assert callable(found), (owner, attr, stage)
        if isinstance(owner, types.ModuleType) and found.__module__ != owner.__name__:
            assert attr in _looked_up(owner), (owner.__name__, attr, stage)
