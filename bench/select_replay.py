"""A deep ``context()`` call's selection, replayed: this tree's ``select_gated`` against an
older tree's, on the same inputs, alternating.

    python bench/select_replay.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --workdir /tmp/me --baseline-src /tmp/base/src --out bench/results/select-replay.json

The file is copied first (a shared cache is never written). A store opened on the copy runs
``bench/latency.py``'s warm-up and timed queries once, capturing each call's
``select_gated`` arguments (its ranked candidates, as the call found them, with the gate's
line costs). Each tree's ``select_gated`` (the baseline's ``recall/select.py`` loaded from
``--baseline-src``, importing the rest from this tree) is then called on every captured
call, trees alternating round by round; the calling thread's CPU per call, medians of the
rounds. Both trees' selections and decisions are compared on every call, with and without
``explain``: a change that claims the same blocks must show 0 differing. The candidates'
fields read on first use are warm in the replay (a real call reads some of them first in
selection), so this measures selection's own work, not a whole call's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import common
import numpy as np
from latency import DEEP_BUDGET, USER

import engrain.recall.gate as gate_module
import engrain.recall.select as select_module


def load_select(src: Path) -> ModuleType:
    """``recall/select.py`` of the tree at ``src``, as a module of its own."""
    name = "engrain.recall.select_baseline"
    spec = importlib.util.spec_from_file_location(name, src / "engrain" / "recall" / "select.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Each timed call's ``select_gated`` arguments captured, then replayed (:func:`replay`)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = common.copy_store(args.db, args.workdir / f"select-replay-{os.getpid()}.db")
    warmup, seen, _ = common.latency_pool(args.warmup, args.queries, args.seed)
    captured: list[tuple[Any, dict[str, Any]]] = []
    original = gate_module.select_gated

    def spy(ranked: Any, **kwargs: Any) -> Any:
        captured.append((ranked, kwargs))
        return original(ranked, **kwargs)

    engine = common.model_engine(copy, args.workdir)
    with engine:
        common.warm_up(engine, USER, warmup)
        gate_module.select_gated = spy  # type: ignore[assignment]
        try:
            for query in seen:
                engine.context(query, USER, now=common.NOW)
        finally:
            gate_module.select_gated = original
        load = os.getloadavg()[0]
        # the captured candidates read the store's columns: replay before it closes
        report = replay(captured, load_select(args.baseline_src), args.rounds)
    copy.unlink()
    return report | {"load_1m_capture": load}


def _outcome(made: Any) -> tuple[Any, ...]:
    selected, used, decisions = made
    return (
        [(s.memory.id, s.tokens, s.score) for s in selected],
        used,
        [(d.item.memory.id, d.item.tokens, d.selected, d.reason) for d in decisions],
    )


def replay(
    captured: list[tuple[Any, dict[str, Any]]], baseline: ModuleType, rounds: int
) -> dict[str, Any]:
    """Both trees' selections compared, then timed on the deep calls and on all of them."""
    differing = {}
    for explain in (False, True):
        differing[f"explain_{str(explain).lower()}"] = sum(
            _outcome(select_module.select_gated(ranked, **(kwargs | {"explain": explain})))
            != _outcome(baseline.select_gated(ranked, **(kwargs | {"explain": explain})))
            for ranked, kwargs in captured
        )
    deep = [c for c in captured if c[1]["token_budget"] >= DEEP_BUDGET]
    timed: dict[str, Any] = {}
    for label, group in (("deep", deep), ("all", captured)):
        spent: dict[str, list[float]] = {"baseline": [], "new": []}
        for _ in range(rounds):
            for tree, module in (("baseline", baseline), ("new", select_module)):
                begun = time.thread_time()
                for ranked, kwargs in group:
                    module.select_gated(ranked, **kwargs)
                spent[tree].append((time.thread_time() - begun) * 1000.0 / len(group))
        base, new = float(np.median(spent["baseline"])), float(np.median(spent["new"]))
        timed[label] = {
            "calls": len(group),
            "baseline_ms": round(base, 4),
            "new_ms": round(new, 4),
            "ratio": round(new / base, 4),
            "rounds_ms": {k: [round(v, 4) for v in vs] for k, vs in spent.items()},
        }
    return {"differing": differing, "timed": timed, "load_1m_end": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a latency.py SQLite file")
    parser.add_argument("--workdir", type=Path, required=True, help="where the copy is made")
    parser.add_argument("--baseline-src", type=Path, required=True, help="an older tree's src")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = {
        "db": str(args.db), "baseline_src": str(args.baseline_src), **measure(args),
        "machine": common.machine_info(),
    }  # fmt: skip
    for label, row in report["timed"].items():
        print(f"{label} ({row['calls']} calls): baseline {row['baseline_ms']:.3f} ms, "
              f"new {row['new_ms']:.3f} ms, ratio {row['ratio']:.3f}")  # fmt: skip
    print("differing (explain off / on):", report["differing"])
    common.write_json(args.out, report)
    return 1 if any(report["differing"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
