"""The floor under issue 18's ingest target: the model's own CPU for LoCoMo dev against the
CPU the targets allow on this machine's cores, measured side by side (session 21).

    python bench/ingest_floor.py --repeat 3 --out bench/results/ingest-floor.json

Two kinds of fresh process alternate, ``--repeat`` rounds:

* ``ingest``: every LoCoMo dev session through ``ingest_conversation`` on a fresh SQLite
  store (``ingest_throughput.locomo_once``: the real model in split mode, warmed first),
  recording the texts of each of the embedder's calls;
* ``model``: the same embedder, built and warmed the same way, on exactly those calls in the
  same order, and nothing else.

The ``model`` process's CPU is the floor: no change outside the model brings an ingest below
it, and the ``ingest`` runs beside it show what the rest costs at the same load. A target of
R turns/s on C cores allows at most C × turns / R seconds of CPU (every core busy all the
time, nothing waited for): on 2 cores 24.0 s for 400 turns/s (SQLite's target) and 32.0 s
for 300 (PostgreSQL's, whose server shares the same cores). CPU seconds rise with the
machine's load (shared caches, clocks), so the load of every run is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
import ingest_throughput as it

#: issue 18's ingest targets, turns/s.
TARGETS = {"sqlite": 400, "postgres": 300}


def model_once(calls: Path) -> dict[str, Any]:
    """The embedder alone on the recorded ``calls``, in this (fresh) process."""
    texts: list[list[str]] = json.loads(calls.read_text(encoding="utf-8"))
    embedder = it.make_embedder()
    embedder.embed([n.text for n in common.make_notes(16, seed=5)])  # as locomo_once warms
    start, cpu = time.perf_counter(), time.process_time()
    for call in texts:
        embedder.embed(call)
    return {
        "calls": len(texts),
        "chunks": sum(len(call) for call in texts),
        "seconds": round(time.perf_counter() - start, 3),
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def budgets(turns: int, cores: int) -> dict[str, float]:
    """The most CPU seconds each target allows for ``turns`` on ``cores`` cores."""
    return {backend: round(cores * turns / rate, 2) for backend, rate in TARGETS.items()}


def floor(data: Path, repeat: int) -> dict[str, Any]:
    """``repeat`` rounds of an ``ingest`` process then a ``model`` process; the medians,
    and the model's CPU against each target's budget."""
    runs: dict[str, list[dict[str, Any]]] = {"ingest": [], "model": []}
    with tempfile.TemporaryDirectory(prefix="engrain-floor-") as tmp:
        calls = Path(tmp) / "calls.json"
        for _ in range(repeat):
            for kind, args in (
                ("ingest", ["--ingest-once", str(data), "--calls", str(calls)]),
                ("model", ["--model-once", str(calls)]),
            ):
                command = [sys.executable, __file__, *args]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                run = json.loads(done.stdout.strip().splitlines()[-1])
                runs[kind].append(run)
                print(f"  {kind}: cpu {run['cpu_seconds']} s, wall {run['seconds']} s, "
                      f"load {run['load_average_1m']}", file=sys.stderr)  # fmt: skip
    turns = runs["ingest"][0]["turns"]
    cores = os.cpu_count() or 1
    model = statistics.median(r["cpu_seconds"] for r in runs["model"])
    ingest = statistics.median(r["cpu_seconds"] for r in runs["ingest"])
    allowed = budgets(turns, cores)
    return {
        "dataset": str(data),
        "turns": turns,
        "chunks": runs["model"][0]["chunks"],
        "calls": runs["model"][0]["calls"],
        "cores": cores,
        "repeat": repeat,
        "median_cpu_seconds": {"ingest": ingest, "model": model},
        "least_cpu_seconds": {k: min(r["cpu_seconds"] for r in v) for k, v in runs.items()},
        "model_share_of_ingest": round(model / ingest, 3),
        "budget_cpu_seconds": allowed,
        # the model alone against each budget: above 1, the target is out of reach with this
        # model on these cores whatever the rest of the ingest costs
        "model_over_budget": {k: round(model / v, 3) for k, v in allowed.items()},
        "turns_per_s_bound_by_model": round(cores * turns / model, 1),
        "turns_per_s_bound_by_ingest": round(cores * turns / ingest, 1),
        "runs": runs,
        "machine": common.machine_info(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, default=it.LOCOMO)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--ingest-once", type=Path, help=argparse.SUPPRESS)  # child runs
    parser.add_argument("--calls", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-once", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ingest_once is not None:
        print(json.dumps(it.locomo_once(args.ingest_once, "sqlite", calls_out=args.calls)))
        return 0
    if args.model_once is not None:
        print(json.dumps(model_once(args.model_once)))
        return 0
    if args.repeat < 1:
        parser.error("--repeat must be positive")
    print(f"floor: {args.locomo.name}, {args.repeat} rounds", file=sys.stderr)
    report = floor(args.locomo, args.repeat)
    common.write_json(args.out, report)
    med, allowed = report["median_cpu_seconds"], report["budget_cpu_seconds"]
    print(
        f"LoCoMo dev, {report['turns']} turns, {report['chunks']} chunks in "
        f"{report['calls']} calls, {report['cores']} cores, median of {report['repeat']}"
    )
    print(
        f"  model alone {med['model']:.2f} s CPU, whole ingest {med['ingest']:.2f} s "
        f"(model {100 * report['model_share_of_ingest']:.0f}%)"
    )
    for backend, seconds in allowed.items():
        print(f"  {TARGETS[backend]} turns/s allows {seconds:.1f} s: the model alone is "
              f"{report['model_over_budget'][backend]:.2f}× that")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
