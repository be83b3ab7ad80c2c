"""``context()`` with its vector-free reads overlapped, against other trees, one and four threads.

    python bench/overlap.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --workdir /tmp/me --run base=/tmp/s19-base/src --run serial=src:off --run overlap=src \
        --rounds 2 --out bench/results/overlap-100k.json

Each ``--run LABEL=SRC[:off]`` is a source tree measured in a fresh subprocess with ``SRC``
first on ``PYTHONPATH`` (``:off``: ``Settings(overlap_reads=False)``, every read in the
calling thread); rounds rotate the runs' order, so load from elsewhere hits them alike.
Every run starts from its own copy of ``--db`` (SQLite's backup, so a shared file is never
written), waits for its indexes and runs ``bench/latency.py``'s warm-up queries, then:

* **one thread**: the timed queries one after another, each call's wall, calling-thread CPU
  and process CPU (every thread's: the model's pool, the read pool), and a digest of its
  block (text, tokens, memory ids); every run's blocks are compared query by query with the
  first run's (the calls count uses in the same order, so equal trees give equal blocks);
* **four threads**: the next queries split over four threads calling one engine at once
  (a loaded server), the calls a second of wall and each call's thread CPU, the process's
  CPU a call.

Medians over rounds; on a shared machine read the CPU times and the ratios, not the walls.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
from latency import USER

THREADS = 4


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One run in this process (its tree on ``sys.path``): the report of both phases."""
    workdir = Path(spec["workdir"])
    copy = common.copy_store(spec["db"], workdir / f"overlap-{os.getpid()}.db")
    extra = {} if spec["overlap"] is None else {"overlap_reads": spec["overlap"]}
    try:
        with common.model_engine(copy, workdir / "data", **extra) as engine:
            engine.context(spec["warmup"][0], USER, now=common.NOW)
            engine.store.wait_for_index(USER)  # type: ignore[attr-defined]
            for query in spec["warmup"]:
                engine.context(query, USER, now=common.NOW)
            load = os.getloadavg()[0]
            one = _one_thread(engine, spec["queries"])
            many = _threads(engine, spec["threaded"])
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return {"load_1m": round(load, 2), **one, **many}


def _one_thread(engine: Any, queries: Sequence[str]) -> dict[str, Any]:
    """Each query once, in order, on this thread."""
    wall, thread, process, blocks = [], [], [], []
    for query in queries:
        t, p, start = time.thread_time(), time.process_time(), time.perf_counter()
        result = engine.context(query, USER, now=common.NOW)
        wall.append((time.perf_counter() - start) * 1000.0)
        thread.append((time.thread_time() - t) * 1000.0)
        process.append((time.process_time() - p) * 1000.0)
        shown = "\n".join(m.id for m in result.memories)
        text = f"{result.text}\0{result.tokens}\0{shown}"
        blocks.append(hashlib.sha256(text.encode()).hexdigest()[:16])
    return {
        "wall": _summary(wall),
        "thread_cpu": _summary(thread),
        "process_cpu": _summary(process),
        "blocks": blocks,
    }


def _threads(engine: Any, queries: Sequence[str]) -> dict[str, Any]:
    """``queries`` dealt to :data:`THREADS` threads calling ``engine`` at once."""
    thread_cpu: list[float] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(THREADS + 1)

    def work(part: Sequence[str]) -> None:
        gate.wait()
        for query in part:
            t = time.thread_time()
            try:
                engine.context(query, USER, now=common.NOW)
            except BaseException as exc:  # reported, not swallowed
                errors.append(exc)
            thread_cpu.append((time.thread_time() - t) * 1000.0)

    workers = [threading.Thread(target=work, args=(queries[i::THREADS],)) for i in range(THREADS)]
    for worker in workers:
        worker.start()
    process, start = time.process_time(), time.perf_counter()
    gate.wait()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - start
    process_ms = (time.process_time() - process) * 1000.0
    if errors:
        raise RuntimeError(f"{len(errors)} calls failed under {THREADS} threads: {errors[0]!r}")
    return {
        "threads_calls_per_s": round(len(queries) / wall, 2),
        "threads_thread_cpu": _summary(thread_cpu),
        "threads_process_cpu_per_call_ms": round(process_ms / len(queries), 2),
    }


def _summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99),
            "mean_ms": round(sum(values) / len(values), 2)}  # fmt: skip


def _run(spec: dict[str, Any], src: Path) -> dict[str, Any]:
    """:func:`serve` in a fresh subprocess with ``src`` first on the path."""
    bench = Path(__file__).resolve().parent
    return common.run_child(__file__, "serve", spec, [src, bench], same_hashes=True)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return round((ordered[middle - 1] + ordered[middle]) / 2, 2)


def report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each label's medians over its rounds, its ratios to the first label's, and its
    blocks against the first label's first run."""
    labels = list(runs)
    reference = runs[labels[0]][0]["blocks"]
    keys = [("wall", "p50_ms"), ("wall", "p95_ms"), ("wall", "p99_ms"),
            ("thread_cpu", "p50_ms"), ("thread_cpu", "p95_ms"), ("process_cpu", "p50_ms"),
            ("process_cpu", "p95_ms"), ("threads_thread_cpu", "p50_ms"),
            ("threads_thread_cpu", "p95_ms")]  # fmt: skip
    out: dict[str, Any] = {}
    for label in labels:
        row: dict[str, Any] = {}
        for group, stat in keys:
            row[f"{group}_{stat}"] = _median([r[group][stat] for r in runs[label]])
        for flat in ("threads_calls_per_s", "threads_process_cpu_per_call_ms", "load_1m"):
            row[flat] = _median([r[flat] for r in runs[label]])
        row["blocks_differing"] = max(
            sum(a != b for a, b in zip(r["blocks"], reference, strict=True)) for r in runs[label]
        )
        out[label] = row
    base = out[labels[0]]
    for label in labels[1:]:
        out[label]["ratio_to_" + labels[0]] = {
            key: round(value / base[key], 3)
            for key, value in out[label].items()
            if isinstance(value, float) and base.get(key)
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a latency.py SQLite file (copied per run)")
    parser.add_argument("--workdir", type=Path, help="where the copies are made")
    parser.add_argument("--run", action="append", metavar="LABEL=SRC[:off]", default=[])
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
    if args.db is None or args.workdir is None or not args.run:
        parser.error("give --db, --workdir and at least one --run")
    warmup, queries, threaded = common.latency_pool(args.warmup, args.queries, args.seed)
    args.workdir.mkdir(parents=True, exist_ok=True)
    modes: dict[str, tuple[Path, bool | None]] = {}
    for item in args.run:
        label, _, rest = item.partition("=")
        src, _, flag = rest.partition(":")
        modes[label] = (Path(src).resolve(), False if flag == "off" else None)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in modes}
    labels = list(modes)
    for round_ in range(args.rounds):
        for label in labels[round_ % len(labels) :] + labels[: round_ % len(labels)]:
            src, overlap = modes[label]
            spec = {"db": str(args.db), "workdir": str(args.workdir), "overlap": overlap,
                    "warmup": warmup, "queries": queries, "threaded": threaded}  # fmt: skip
            result = _run(spec, src)
            runs[label].append(result)
            print(f"round {round_ + 1} {label}: load {result['load_1m']}, wall p50 / p95 "
                  f"{result['wall']['p50_ms']} / {result['wall']['p95_ms']}, thread CPU "
                  f"{result['thread_cpu']['p50_ms']}, process CPU "
                  f"{result['process_cpu']['p50_ms']}, {THREADS} threads "
                  f"{result['threads_calls_per_s']} calls/s", file=sys.stderr,
                  flush=True)  # fmt: skip
    summary = report(runs)
    print(json.dumps(summary, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "runs": {
            label: [{k: v for k, v in r.items() if k != "blocks"} for r in rs]
            for label, rs in runs.items()}, "modes": {
            label: {"src": str(src), "overlap_reads": flag} for label, (src, flag) in
            modes.items()}}, indent=2) + "\n", encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
