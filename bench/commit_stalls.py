"""What a ``context()`` call's commit of its counted uses waits for, with the checkpointer as
it is, checkpointing less often, or not at all (issue 18).

    python bench/commit_stalls.py --db /tmp/me/latency-10000-s7-model.db --workdir /tmp/me \
        --modes 0.5,2.0,off --rounds 2 --out bench/results/commit-stalls-10k.json

A ``context()`` writes its counted uses and its record in one transaction
(``SQLiteStore.record_uses``): ~0.1 ms of the calling thread's CPU for the ``COMMIT``, but its
wall is whatever it waits for. The store's checkpointer (``store/checkpoint.py``) copies
the log into the database file on its own thread, syncs both and restarts the log; a commit
made while it works waits longer (docs/scale.md, session 23: not for the syncs; likelier
for the GIL, which the commit gives up while SQLite writes). Each mode runs in a fresh
process on its own copy of the file (SQLite's backup, so a shared cache is never written):
the warm-up queries, then ``bench/latency.py``'s 200 timed queries once each, the modes
alternating round by round so they see the same load. A mode is the checkpointer's interval
in seconds (``INTERVAL``), or ``off`` (no checkpoint while the calls run: the log grows;
what a store does is never this). Reported per mode: the ``COMMIT``'s wall and calling-thread
CPU, ``BEGIN``'s wall, each call's wall and thread CPU (deep and shallow apart, as
``latency.py``), the checkpoint passes, the log's size at the end, and each query's block
digest (a checkpoint changes no block; the report says how many differ from the first mode).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common
from latency import DEEP_BUDGET, USER, _call

import engrain.store.checkpoint as checkpoint_module
import engrain.store.sqlite as sqlite_module

#: A commit slower than this (s) is counted, and whether a checkpoint pass overlapped it.
SLOW_COMMIT = 0.005


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p95 / mean of ``values`` (ms), rounded."""
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 3)

    return {"p50": at(0.5), "p90": at(0.9), "p95": at(0.95),
            "mean": round(sum(ordered) / len(ordered), 3), "n": len(ordered)}  # fmt: skip


Span = tuple[float, float]


def stalls(commits: Sequence[Span], passes: Sequence[Span]) -> dict[str, int]:
    """Commits (start, end) slower than :data:`SLOW_COMMIT`; how many a checkpoint pass
    overlapped; how many commits were the first after a pass ended (the first write to a
    restarted log, which syncs its header), and how many of those were slow."""
    slow = [c for c in commits if c[1] - c[0] > SLOW_COMMIT]
    during = [c for c in slow if any(p0 < c[1] and c[0] < p1 for p0, p1 in passes)]
    first = [c for before, c in zip([(0.0, 0.0), *commits], commits, strict=False)
             if any(before[1] <= p1 <= c[0] for _, p1 in passes)]  # fmt: skip
    slow_first = sum(c[1] - c[0] > SLOW_COMMIT for c in first)
    return {"slow_commits": len(slow), "slow_commits_during_a_pass": len(during),
            "first_commits_after_a_pass": len(first),
            "slow_first_commits_after_a_pass": slow_first}  # fmt: skip


def instrument(spent: dict[str, list[float]]) -> None:
    """Time ``BEGIN`` (the store's lock included) and ``COMMIT`` of every transaction of
    this process's SQLite stores: ``SQLiteStore._transaction`` itself, its entry and its
    exit timed (the exit is the ``COMMIT`` and a wake-up of the checkpointer)."""
    original = sqlite_module.SQLiteStore._transaction

    @contextmanager
    def _transaction(self: Any, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        manager = original(self, durable=durable)
        start = time.perf_counter()
        db = manager.__enter__()
        spent["begin_wall"].append((time.perf_counter() - start) * 1000.0)
        try:
            yield db
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
        else:
            wall, cpu = time.perf_counter(), time.thread_time()
            manager.__exit__(None, None, None)
            end = time.perf_counter()
            spent["commit_wall"].append((end - wall) * 1000.0)
            spent["commit_spans"].append((wall, end))
            spent["commit_cpu"].append((time.thread_time() - cpu) * 1000.0)

    sqlite_module.SQLiteStore._transaction = _transaction  # type: ignore[method-assign]
    record_uses = sqlite_module.SQLiteStore.record_uses

    def timed_uses(self: Any, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        try:
            record_uses(self, *args, **kwargs)
        finally:
            spent["uses_wall"].append((time.perf_counter() - start) * 1000.0)

    sqlite_module.SQLiteStore.record_uses = timed_uses  # type: ignore[method-assign]
    begin_log = getattr(sqlite_module.SQLiteStore, "_begin_log", None)
    if begin_log is not None:  # a checkout whose checkpointer's thread begins the log

        def timed_begin(self: Any) -> bool:
            start = time.perf_counter()
            try:
                return bool(begin_log(self))
            finally:
                spent["log_begun_wall"].append((time.perf_counter() - start) * 1000.0)

        sqlite_module.SQLiteStore._begin_log = timed_begin  # type: ignore[attr-defined]


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One mode in this (fresh) process: the copy, the warm-up, the timed calls."""
    mode = spec["mode"]
    if "=" in mode:
        pass  # a checkout's checkpointer as it is (its src on PYTHONPATH)
    elif mode == "off":
        checkpoint_module.Checkpointer._checkpoint = lambda self, db: 0  # type: ignore[method-assign]
    else:
        checkpoint_module.Checkpointer.__init__.__defaults__ = (float(mode),)
    spent: dict[str, list[Any]] = {"begin_wall": [], "commit_wall": [], "commit_cpu": [],
                                   "commit_spans": [], "pass_spans": [], "uses_wall": [],
                                   "log_begun_wall": []}  # fmt: skip
    instrument(spent)
    checkpoint_pass = checkpoint_module.Checkpointer._checkpoint

    def timed_pass(self: Any, db: sqlite3.Connection) -> Any:
        start = time.perf_counter()
        answer = checkpoint_pass(self, db)  # whatever the checkout's pass answers
        spent["pass_spans"].append((start, time.perf_counter()))
        return answer

    checkpoint_module.Checkpointer._checkpoint = timed_pass  # type: ignore[method-assign]
    workdir = Path(spec["workdir"])
    copy = common.copy_store(spec["db"], workdir / f"commit-stalls-{os.getpid()}.db")
    engine = common.model_engine(copy, workdir)
    calls: list[dict[str, Any]] = []
    with engine:
        common.warm_up(engine, USER, spec["warmup"])
        for values in spent.values():
            values.clear()
        load = os.getloadavg()[0]
        cpu: dict[str, list[float]] = {"thread": [], "process": []}
        for query in spec["queries"]:
            thread, process = time.thread_time(), time.process_time()
            start = time.perf_counter()
            result = engine.context(query, USER, now=common.NOW)
            wall = (time.perf_counter() - start) * 1000.0
            cpu["thread"].append((time.thread_time() - thread) * 1000.0)
            cpu["process"].append((time.process_time() - process) * 1000.0)
            calls.append(_call(query, result, wall, cpu))
        checkpoints = engine.store._checkpoints
        passes, restarts = checkpoints.passes, checkpoints.restarts
        log = Path(f"{copy}-wal")
        log_bytes = log.stat().st_size if log.exists() else 0
    for path in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
        path.unlink(missing_ok=True)
    deep = [c for c in calls if c["budget"] >= DEEP_BUDGET]
    shallow = [c for c in calls if c["budget"] < DEEP_BUDGET]
    return {
        "mode": mode, "load_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "commit_wall_ms": summary(spent["commit_wall"]),
        "commit_cpu_ms": summary(spent["commit_cpu"]),
        "begin_wall_ms": summary(spent["begin_wall"]),
        # the whole record_uses, the store's lock included (held meanwhile by the
        # checkpointer's thread while it begins a log, in a checkout that does)
        "uses_wall_ms": summary(spent["uses_wall"]),
        "uses_over_5ms": sum(v > SLOW_COMMIT * 1000.0 for v in spent["uses_wall"]),
        "log_begun_wall_ms": summary(spent["log_begun_wall"]),
        "call_wall_ms": summary([c["wall_ms"] for c in calls]),
        "call_thread_ms": summary([c["thread_ms"] for c in calls]),
        "deep_wall_ms": summary([c["wall_ms"] for c in deep]),
        "deep_thread_ms": summary([c["thread_ms"] for c in deep]),
        "shallow_wall_ms": summary([c["wall_ms"] for c in shallow]),
        **stalls(spent["commit_spans"], spent["pass_spans"]),
        "pass_wall_ms": summary([(p1 - p0) * 1000.0 for p0, p1 in spent["pass_spans"]]),
        "checkpoint_passes": passes, "restarts": restarts, "log_bytes": log_bytes,
        "blocks": {c["query"]: c["block"] for c in calls},
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a latency.py SQLite file (copied, not opened)")
    parser.add_argument("--workdir", type=Path, help="where the copies are made")
    parser.add_argument(
        "--modes", default="0.5,2.0,off",
        help="checkpoint intervals (s), off, or name=SRC (that checkout's src as it is, "
             "e.g. base=/tmp/s23-base/src), comma-separated",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        print(json.dumps(serve(json.loads(args.serve.read_text(encoding="utf-8")))))
        return 0
    if args.db is None or args.workdir is None:
        parser.error("--db and --workdir are needed")
    args.workdir.mkdir(parents=True, exist_ok=True)
    warmup, queries, _ = common.latency_pool(args.warmup, args.queries, args.seed)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for round_ in range(args.rounds):
        for mode in modes:
            spec = {"mode": mode, "db": str(args.db), "workdir": str(args.workdir),
                    "warmup": warmup, "queries": queries}  # fmt: skip
            src = [mode.split("=", 1)[1]] if "=" in mode else []
            run = common.run_child(__file__, "serve", spec, src)
            runs[mode].append(run)
            c = run["commit_wall_ms"]
            print(f"round {round_ + 1} {mode.split('=')[0]:>4}: COMMIT wall p50 / p90 / mean "
                  f"{c['p50']:.2f} / {c['p90']:.2f} / {c['mean']:.2f} ms, CPU p50 "
                  f"{run['commit_cpu_ms']['p50']:.2f}; call wall p50 / p95 "
                  f"{run['call_wall_ms']['p50']:.1f} / {run['call_wall_ms']['p95']:.1f}; "
                  f"passes {run['checkpoint_passes']} "
                  f"(wall p50 {run['pass_wall_ms'].get('p50')} ms); "
                  f"commits over 5 ms {run['slow_commits']}, during a pass "
                  f"{run['slow_commits_during_a_pass']}, first after one "
                  f"{run['slow_first_commits_after_a_pass']} of "
                  f"{run['first_commits_after_a_pass']}; record_uses wall p50 / p90 / mean "
                  f"{run['uses_wall_ms']['p50']:.2f} / {run['uses_wall_ms']['p90']:.2f} / "
                  f"{run['uses_wall_ms']['mean']:.2f}, over 5 ms {run['uses_over_5ms']}; "
                  f"load {run['load_1m']}")  # fmt: skip
    first = runs[modes[0]][0]["blocks"]
    report = {
        "machine": common.machine_info(), "db": str(args.db), "rounds": args.rounds,
        "modes": {m: [{k: v for k, v in r.items() if k != "blocks"} for r in rs]
                  for m, rs in runs.items()},
        "blocks_differing_from_first_mode": {
            m: sum(r["blocks"].get(q) != b for r in rs for q, b in first.items())
            for m, rs in runs.items()
        },
    }  # fmt: skip
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
