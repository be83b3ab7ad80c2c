"""The cold start of a large PostgreSQL user, phase by phase, trees side by side (issue 18).

    python bench/pg_cold_start.py --url 'postgresql://postgres:@/big?host=/tmp/h1-pg1m' \\
        --tree new=. --tree base=/tmp/s26-base --rounds 5 --graph-dir /tmp/h1-graphs \\
        --out bench/results/pg-cold-start-1m-s26-h1.json

Per round, one fresh process per tree (the order alternating; ``<tree>/src`` first on
``PYTHONPATH``) loads the model and runs it once (untimed), then:

- ``open``: ``Engine(…)`` on ``--url`` (the store's pool, its migrations' check);
- ``first``: the first ``context()`` (``bench/pg_scale.py``'s first question, its user) —
  wall, the calling thread's CPU and the process's (every thread: the loads it starts
  run beside it), the engine's stage laps and the store calls' wall;
- ``cold_s``: the two together (``bench/pg_side.py``'s cold start);
- the loads the first call started, each as it ran in its thread: the pool's held graph
  (``Projected._load``: the file read, ``held_graph.restored``'s check, a build), the
  learnings held in process (``Learnings._load``: refused on the count at 1,000,000) and
  the learnings' held graph, with when each began and ended (seconds after the open
  began) and its thread's CPU;
- ``settled_s``: when the store serves from every held graph (the settle of
  ``pg_side.py``: a learnings' search after the learnings are refused starts their
  graph's load);
- ``second`` and ``steady``: the next ``context()`` and ``--calls`` more (wall and the
  calling thread's CPU, medians), each call's block digest (compared across trees).

The question and user are ``bench/pg_scale.py``'s (``common.make_queries(200, seed=8)``,
its ``big-user``). Medians per tree; under load the wall times are the machine's, the CPU
columns are not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import common

BENCH = Path(__file__).resolve().parent
USER = "big-user"


def _child(url: str, calls: int, seed: int) -> dict[str, Any]:
    """One cold start in this process (module docstring)."""
    from pg_side import STORE_CALLS, worker_embedder

    from engrain import Engine, Settings
    from engrain.recall.gate import LEARNING_KINDS
    from engrain.store.base import MemoryFilter
    from engrain.store.postgres import held_graph, learnings, projected
    from engrain.store.postgres.graph_file import GraphFiles

    queries = common.make_queries(200, seed=seed + 1)
    embedder = worker_embedder()
    embedder.embed(["warm the model"])
    events: list[dict[str, Any]] = []
    lock = threading.Lock()
    t0 = time.perf_counter()

    def traced(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kw: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kw)
            finally:
                with lock:
                    events.append({
                        "what": label,
                        "thread": threading.current_thread().name,
                        "began_s": round(start - t0, 3),
                        "ended_s": round(time.perf_counter() - t0, 3),
                        "thread_cpu_s": round(time.thread_time() - cpu, 3),
                    })  # fmt: skip

        setattr(owner, name, wrapper)

    traced(projected.Projected, "_load", "graph load")
    traced(projected.Projected, "_read_graph", "graph read")
    traced(GraphFiles, "read", "graph file read")
    traced(GraphFiles, "write", "graph file write")
    traced(held_graph, "restored", "graph checked (restored)")
    traced(held_graph, "read", "graph built (read)")
    traced(held_graph, "caught_up", "graph caught up")
    traced(learnings.Learnings, "_load", "learnings load")
    data_dir = Path(tempfile.mkdtemp(prefix="h1-cold-"))
    process_cpu = time.process_time()
    cpu = time.thread_time()
    engine: Any = Engine(settings=Settings(url=url, data_dir=data_dir), embedder=embedder)
    opened = time.perf_counter()
    open_cpu = time.thread_time() - cpu
    spent: dict[str, float] = {}

    def timed(name: str, call: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kw)
            finally:
                if threading.current_thread() is threading.main_thread() or name != "search":
                    with lock:
                        spent[name] = spent.get(name, 0.0) + (time.perf_counter() - start) * 1e3

        return wrapper

    for name in STORE_CALLS:
        if hasattr(engine.store, name):
            setattr(engine.store, name, timed(name, getattr(engine.store, name)))
    cpu = time.thread_time()
    result = engine.context(queries[0], USER, now=common.NOW)
    first_end = time.perf_counter()
    first_cpu = time.thread_time() - cpu
    first_process_cpu = time.process_time() - process_cpu
    first_calls = dict(spent)
    laps = dict(getattr(getattr(result, "gated", None), "timings_ms", None) or {})
    blocks = [hashlib.sha256(result.text.encode()).hexdigest()[:16]]
    # the second call, right after (the loads may still run)
    cpu = time.thread_time()
    start = time.perf_counter()
    result = engine.context(queries[1], USER, now=common.NOW)
    second = {"ms": (time.perf_counter() - start) * 1e3, "cpu_ms": (time.thread_time() - cpu) * 1e3}
    blocks.append(hashlib.sha256(result.text.encode()).hexdigest()[:16])
    # settle: every held graph this tree would hold, loaded (pg_side.py's settle)
    store = engine.store
    typed = MemoryFilter(kinds=LEARNING_KINDS)
    one = [1.0] * 384
    for wait in ("wait_for_projection", "wait_for_learnings"):
        if hasattr(store, wait):
            getattr(store, wait)(USER, 1800.0)
    if hasattr(store, "wait_for_learnings_graph"):
        store.search(USER, one, 1, typed)
        store.wait_for_learnings_graph(USER, 1800.0)
    settled = time.perf_counter() - t0
    steady: list[float] = []
    steady_cpu: list[float] = []
    for i in range(calls):
        cpu = time.thread_time()
        start = time.perf_counter()
        result = engine.context(queries[2 + i], USER, now=common.NOW)
        steady.append((time.perf_counter() - start) * 1e3)
        steady_cpu.append((time.thread_time() - cpu) * 1e3)
        blocks.append(hashlib.sha256(result.text.encode()).hexdigest()[:16])
    held = {
        name: dict(getattr(getattr(store, attr, None), "calls", None) or {})
        for name, attr in (("pool", "_projected"), ("learnings_graph", "_learnings_graph"))
    }
    engine.close()
    return {
        "open_s": round(opened - t0, 3),
        "open_cpu_s": round(open_cpu, 3),
        "first_s": round(first_end - opened, 3),
        "first_cpu_s": round(first_cpu, 3),
        "cold_s": round(first_end - t0, 3),
        "process_cpu_to_first_s": round(first_process_cpu, 3),
        "first_store_ms": {k: round(v, 1) for k, v in first_calls.items()},
        "first_laps_ms": {k: round(float(v), 1) for k, v in laps.items()},
        "second_ms": round(second["ms"], 1),
        "second_cpu_ms": round(second["cpu_ms"], 1),
        "settled_s": round(settled, 3),
        "steady_ms": round(statistics.median(steady), 1) if steady else None,
        "steady_cpu_ms": round(statistics.median(steady_cpu), 1) if steady_cpu else None,
        "held_calls": held,
        "events": sorted(events, key=lambda e: e["began_s"]),
        "blocks": blocks,
        "rss_mb": common.status_mb("VmRSS"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeat)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="calls after the settle")
    parser.add_argument("--seed", type=int, default=7, help="bench/pg_scale.py's --seed")
    parser.add_argument("--graph-dir", help="ENGRAIN_PG_GRAPH_DIR for every tree")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every tree")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(_child(args.url, args.calls, args.seed)) + "\n")
        return 0
    trees = dict(t.split("=", 1) for t in args.tree) or {"new": str(BENCH.parent)}
    extra = dict(e.split("=", 1) for e in args.env)
    if args.graph_dir:
        extra["ENGRAIN_PG_GRAPH_DIR"] = args.graph_dir
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    loads: list[float] = []
    names = list(trees)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            env = {**os.environ, **extra, "ENGRAIN_BENCH_SPINNING": "0"}
            env["PYTHONPATH"] = os.pathsep.join([str(Path(trees[name]) / "src"), str(BENCH)])
            loads.append(os.getloadavg()[0])
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", "--url", args.url,
                 "--calls", str(args.calls), "--seed", str(args.seed)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                return 1
            run = json.loads(done.stdout.strip().splitlines()[-1])
            run["load"] = round(loads[-1], 1)
            runs[name].append(run)
            print(f"round {r} {name}: cold {run['cold_s']} s (open {run['open_s']}, first "
                  f"{run['first_s']}, its CPU {run['first_cpu_s']}, process CPU "
                  f"{run['process_cpu_to_first_s']}), settled {run['settled_s']} s, steady "
                  f"{run['steady_ms']} ms, load {run['load']}", flush=True)  # fmt: skip
    summary: dict[str, Any] = {}
    for name, rows in runs.items():
        summary[name] = {
            key: round(statistics.median(row[key] for row in rows), 3)
            for key in ("cold_s", "open_s", "first_s", "first_cpu_s", "process_cpu_to_first_s",
                        "second_ms", "second_cpu_ms", "settled_s", "steady_ms", "steady_cpu_ms")
            if all(row.get(key) is not None for row in rows)
        }  # fmt: skip
    if len(names) == 2:
        a, b = (runs[n] for n in names)
        same = sum(x == y for ra, rb in zip(a, b, strict=True)
                   for x, y in zip(ra["blocks"], rb["blocks"], strict=True))  # fmt: skip
        total = sum(len(ra["blocks"]) for ra in a)
        summary["blocks_identical"] = f"{same} of {total}"
    report = {"url": args.url, "trees": trees, "env": extra, "rounds": args.rounds,
              "load": {"min": min(loads), "max": max(loads)}, "summary": summary, "runs": runs,
              "machine": common.machine_info()}  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.out:
        common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
