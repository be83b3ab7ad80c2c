"""The CPU of ``Store.record_uses`` alone on a large SQLite file, trees side by side (issue 18).

    python bench/record_uses.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --tree base=/tmp/s15-base/src --tree new=src --workdir /tmp/me \
        --out bench/results/record-uses-100k.json

A ``context()`` ends with one ``record_uses``: its memories' counted uses and its record (a
state document), one transaction. Each tree gets its own copy of ``--db`` (SQLite's backup:
a shared file is never written), opened once first by that tree (so a newer schema's
migration runs then, timed apart); then, for ``--rounds`` rounds, each tree in turn runs in
a fresh interpreter ``--calls`` calls of ``--uses`` distinct ids drawn at random (the same
draws for every tree), without loading a working set: the store's SQL and commit only. The
calling thread's CPU (what the call computes) and the process's (the WAL checkpoints run
on the store's checkpointer thread) are taken per call; the report gives medians and p90
per tree and round, and the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common

#: The user of ``bench/latency.py``'s stores.
USER = "bench-user"


def serve(db: Path, calls: int, uses: int, seed: int) -> dict[str, Any]:
    """Time ``calls`` calls of ``record_uses`` on ``db`` with this tree's engrain."""
    import engrain
    from engrain.store import State
    from engrain.store.sqlite import SQLiteStore

    with sqlite3.connect(db) as raw:
        ids = [r[0] for r in raw.execute("SELECT id FROM memories WHERE user_id = ?", (USER,))]
    ids.sort()
    rng = random.Random(seed)
    store = SQLiteStore(db, ann_min_vectors=None)
    thread_us: list[float] = []
    process_us: list[float] = []
    try:
        for call in range(calls):
            used = rng.sample(ids, uses)
            record = State(USER, "contexts", f"bench-{seed}-{call}", {"ids": used[:20]})
            at = datetime.now(UTC)
            thread, process = time.thread_time(), time.process_time()
            store.record_uses(USER, used, at, [record])
            thread_us.append((time.thread_time() - thread) * 1e6)
            process_us.append((time.process_time() - process) * 1e6)
    finally:
        store.close()
    return {
        "src": str(Path(engrain.__file__).parent.parent),
        "thread_us": thread_us,
        "process_us": process_us,
    }


def first_open(db: Path) -> dict[str, Any]:
    """Open ``db`` once with this tree (its migrations run): seconds and CPU seconds."""
    import engrain
    from engrain.store.sqlite import SQLiteStore

    wall, cpu = time.perf_counter(), time.process_time()
    store = SQLiteStore(db, ann_min_vectors=None)
    applied = store.migrate()  # already applied by the constructor: an empty list
    opened = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    with sqlite3.connect(db) as raw:
        names = [r[0] for r in raw.execute("SELECT name FROM migrations ORDER BY name")]
    return {"src": str(Path(engrain.__file__).parent.parent), "open_s": round(opened[0], 2),
            "open_cpu_s": round(opened[1], 2), "migrations": names,
            "applied_again": applied}  # fmt: skip


def _run(src: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{src}: {done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1),
            "p90": round(common.percentile(values, 90), 1),
            "mean": round(statistics.fmean(values), 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="the SQLite file to copy")
    parser.add_argument("--tree", action="append", default=[], help="name=src, repeatable")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engrain-record-uses"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--uses", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--open", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        print(json.dumps(serve(args.serve, args.calls, args.uses, args.seed)))
        return
    if args.open is not None:
        print(json.dumps(first_open(args.open)))
        return
    trees = dict(t.split("=", 1) for t in args.tree)
    args.workdir.mkdir(parents=True, exist_ok=True)
    copies: dict[str, Path] = {}
    opened: dict[str, Any] = {}
    for name, src in trees.items():
        copies[name] = args.workdir / f"{name}.db"
        with sqlite3.connect(args.db) as source, sqlite3.connect(copies[name]) as target:
            source.backup(target, pages=65_536)
        opened[name] = _run(Path(src).resolve(), ["--open", str(copies[name])])
        print(f"{name}: first open {opened[name]}", file=sys.stderr, flush=True)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name, src in trees.items():  # alternating: every tree sees the same load
            run = _run(Path(src).resolve(), ["--serve", str(copies[name]), "--calls",
                                             str(args.calls), "--uses", str(args.uses),
                                             "--seed", str(r)])  # fmt: skip
            row = {"round": r, "load_1m": round(os.getloadavg()[0], 1),
                   "thread_us": _stats(run["thread_us"]),
                   "process_us": _stats(run["process_us"])}  # fmt: skip
            rounds[name].append(row)
            print(f"{name} round {r}: thread {row['thread_us']} process {row['process_us']} "
                  f"load {row['load_1m']}", file=sys.stderr, flush=True)  # fmt: skip
    report: dict[str, Any] = {"db": str(args.db), "calls": args.calls, "uses": args.uses,
                              "machine": common.machine_info(), "trees": {}}  # fmt: skip
    for name, src in trees.items():
        report["trees"][name] = {
            "src": src, "first_open": opened[name], "rounds": rounds[name],
            "thread_us_median": statistics.median(x["thread_us"]["median"] for x in rounds[name]),
            "process_us_median": statistics.median(x["process_us"]["median"]
                                                   for x in rounds[name]),
        }  # fmt: skip
    for name, tree in report["trees"].items():
        print(f"{name:>8}: thread CPU {tree['thread_us_median']:.0f} µs, process CPU "
              f"{tree['process_us_median']:.0f} µs a call (median of round medians)")  # fmt: skip
    common.write_json(args.out, report)
    for path in copies.values():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
