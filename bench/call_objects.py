"""What the garbage collector meets in a ``context()`` call, and which stages make it.

    python bench/call_objects.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --workdir /tmp/me --out bench/results/call-objects-100k.json

The file is copied (SQLite's backup) into ``--workdir``; a store opened on the copy waits
for its indexes and runs ``bench/latency.py``'s warm-up and timed queries (the same seed) in
three passes over the same queries, each answering a different question:

1. **collections** (the collector on, as a user runs it): each pass the collector starts
   inside a call, by generation, with its calling-thread CPU and what it walked: the
   objects in the generations collected, by type, and the references they hold (what a
   pass follows). This pass's thread CPU and collector CPU are the call's own.
2. **net objects by stage** (the collector off in this process, for this pass only, so
   its counter is not reset): the change of ``gc.get_count()[0]`` — tracked objects made
   less tracked objects freed — charged exclusively to the innermost stage of
   ``bench/tail_stages.py``'s :data:`~tail_stages.STAGES` running, and the call's net count at
   its end. A young pass starts when that count passes ``gc.get_threshold()[0]`` (700): a
   stage's net count is its share of what sets the passes off.
3. **bytes** (``tracemalloc``): each call's peak of traced memory above its start and what
   was still allocated at its end (what the call keeps: caches filled), by file.

Deep calls (a budget of at least ``latency.DEEP_BUDGET`` tokens) and shallow ones are
reported apart. Nothing here is timed against another tree: it is where the collector's
work comes from, for whoever cuts it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import numpy as np
import tail_stages
from latency import DEEP_BUDGET, USER

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder

#: Empty lists made before each call of the objects pass, so its count starts this far
#: above 0 (CPython stops decrementing it at 0).
BALLAST = 50_000


class ObjectSpans(tail_stages.Spans):
    """:class:`tail_stages.Spans` charging the net tracked objects a stage made
    (``gc.get_count()[0]``'s change) instead of its CPU, exclusively. Only meaningful with
    the collector off: a pass resets the count."""

    def wrap(self, function: Callable[..., Any], stage: str) -> Callable[..., Any]:
        spans = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            if tail_stages.threading_ident() != spans.thread:
                return function(*args, **kwargs)
            frame = [float(gc.get_count()[0]), 0.0]
            spans._stack.append(frame)
            try:
                return function(*args, **kwargs)
            finally:
                spans._stack.pop()
                total = gc.get_count()[0] - frame[0]
                spans.spent[stage] += total - frame[1]
                if spans._stack:
                    spans._stack[-1][1] += total

        return counted


def _type_name(obj: object) -> str:
    kind = type(obj)
    return (
        f"{kind.__module__}.{kind.__qualname__}"
        if kind.__module__ != "builtins"
        else (kind.__qualname__)
    )


def collections_pass(engine: Engine, queries: list[str]) -> list[dict[str, Any]]:
    """Pass 1: every collection inside each call, with what it walked."""
    calls: list[dict[str, Any]] = []
    passes: list[dict[str, Any]] = []
    started = [0.0]

    def collected(phase: str, info: dict[str, Any]) -> None:
        generation = int(info["generation"])
        if phase == "start":
            young = [o for g in range(generation + 1) for o in gc.get_objects(generation=g)]
            passes.append({
                "generation": generation,
                "objects": len(young),
                "references": sum(len(gc.get_referents(o)) for o in young),
                "types": Counter(_type_name(o) for o in young),
            })  # fmt: skip
            del young
            started[0] = time.thread_time()  # the census above is not the pass's cost
        else:
            passes[-1]["cpu_ms"] = (time.thread_time() - started[0]) * 1000.0

    gc.callbacks.append(collected)
    try:
        for query in queries:
            passes.clear()
            begun = time.thread_time()
            result = engine.context(query, USER, now=common.NOW)
            total = (time.thread_time() - begun) * 1000.0
            gated = result.gated
            calls.append({
                "query": query, "budget": gated.budget.tokens if gated else 0,
                "thread_ms": total, "passes": [dict(p) for p in passes],
            })  # fmt: skip
    finally:
        gc.callbacks.remove(collected)
    return calls


def objects_pass(engine: Engine, queries: list[str]) -> list[dict[str, Any]]:
    """Pass 2: the net tracked objects each stage made, the collector off meanwhile."""
    spans = ObjectSpans()
    spans.thread = tail_stages.threading_ident()
    undo = tail_stages.install(engine, spans)
    calls: list[dict[str, Any]] = []

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for query in queries:
            spans.reset()
            # the count never goes below 0: objects made now and kept keep it far above
            ballast = [[] for _ in range(BALLAST)]
            begun = gc.get_count()[0]
            result = engine.context(query, USER, now=common.NOW)
            end = gc.get_count()[0] - begun
            del ballast
            stages = dict(spans.spent)
            stages["other"] = stages.get("other", 0.0) + end - sum(stages.values())
            gated = result.gated
            calls.append({
                "query": query, "budget": gated.budget.tokens if gated else 0,
                "net_objects": end, "stages": stages,
            })  # fmt: skip
            del result
            gc.collect()  # each call starts from the same count, as a user's would not
            gc.disable()
    finally:
        if was_enabled:
            gc.enable()
        for owner, attr, original in reversed(undo):
            if original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
    return calls


def bytes_pass(engine: Engine, queries: list[str]) -> list[dict[str, Any]]:
    """Pass 3: each call's traced peak above its start, and what it left allocated, by file."""
    calls: list[dict[str, Any]] = []
    tracemalloc.start(1)
    try:
        for query in queries:
            before = tracemalloc.take_snapshot()
            tracemalloc.reset_peak()
            start, _ = tracemalloc.get_traced_memory()
            result = engine.context(query, USER, now=common.NOW)
            end, peak = tracemalloc.get_traced_memory()
            after = tracemalloc.take_snapshot()
            kept = after.compare_to(before, "filename")
            gated = result.gated
            calls.append({
                "query": query, "budget": gated.budget.tokens if gated else 0,
                "peak_kb": (peak - start) / 1024.0, "kept_kb": (end - start) / 1024.0,
                "kept_by_file_kb": {
                    _short(s.traceback[0].filename): s.size_diff / 1024.0
                    for s in kept[:12] if s.size_diff > 0
                },
            })  # fmt: skip
            del before, after, kept, result
    finally:
        tracemalloc.stop()
    return calls


def _short(filename: str) -> str:
    marker = "/engrain/"
    return filename[filename.rindex(marker) + 1 :] if marker in filename else Path(filename).name


def _median(values: list[float]) -> float:
    return round(float(np.median(values)), 3) if values else 0.0


def _mean(values: list[float]) -> float:
    return round(float(np.mean(values)), 3) if values else 0.0


def _chooser(deep: bool) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def chosen(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in calls if (c["budget"] >= DEEP_BUDGET) == deep]

    return chosen


def summarize(
    collected: list[dict[str, Any]], objects: list[dict[str, Any]], traced: list[dict[str, Any]]
) -> dict[str, Any]:
    """Deep and shallow calls apart: the collector's passes and what they walked, the net
    objects by stage, the bytes."""
    out: dict[str, Any] = {}
    for group in ("deep", "shallow"):
        chosen = _chooser(group == "deep")

        calls = chosen(collected)
        if not calls:
            continue
        passes = [p for c in calls for p in c["passes"]]
        by_generation: dict[str, Any] = {}
        for generation in (0, 1, 2):
            mine = [p for p in passes if p["generation"] == generation]
            types: Counter[str] = Counter()
            for p in mine:
                types.update(p["types"])
            by_generation[f"gen{generation}"] = {
                "per_call": round(len(mine) / len(calls), 3),
                "cpu_ms_median": _median([p["cpu_ms"] for p in mine]),
                "objects_median": _median([p["objects"] for p in mine]),
                "references_median": _median([p["references"] for p in mine]),
                "types_per_pass": {
                    t: round(n / len(mine), 1) for t, n in types.most_common(15)
                } if mine else {},
            }  # fmt: skip
        gc_ms = [sum(p["cpu_ms"] for p in c["passes"]) for c in calls]
        thread = [c["thread_ms"] for c in calls]
        order = np.argsort(thread)[::-1]
        tail = order[: max(1, len(order) // 10)]
        rest = order[max(1, len(order) // 10) :]
        stage_net: dict[str, list[float]] = defaultdict(list)
        mine_objects = chosen(objects)
        for c in mine_objects:
            for name in {s for o in mine_objects for s in o["stages"]}:
                stage_net[name].append(c["stages"].get(name, 0.0))
        mine_bytes = chosen(traced)
        kept_files: dict[str, list[float]] = defaultdict(list)
        for c in mine_bytes:
            for name, kb in c["kept_by_file_kb"].items():
                kept_files[name].append(kb)
        out[group] = {
            "calls": len(calls),
            "thread_ms_median": _median(thread),
            "collector_ms_mean": _mean(gc_ms),
            "collector_ms_median": _median(gc_ms),
            "collector_share_of_thread": round(sum(gc_ms) / sum(thread), 4),
            "slowest_tenth": {
                "thread_ms_mean": _mean([thread[i] for i in tail]),
                "collector_ms_mean": _mean([gc_ms[i] for i in tail]),
            },
            "rest": {
                "thread_ms_mean": _mean([thread[i] for i in rest]),
                "collector_ms_mean": _mean([gc_ms[i] for i in rest]),
            },
            "passes": by_generation,
            "net_objects_median": _median([c["net_objects"] for c in mine_objects]),
            "net_objects_by_stage_mean": dict(
                sorted(((n, _mean(v)) for n, v in stage_net.items()), key=lambda nv: -abs(nv[1]))
            ),
            "peak_kb_median": _median([c["peak_kb"] for c in mine_bytes]),
            "kept_kb_median": _median([c["kept_kb"] for c in mine_bytes]),
            "kept_by_file_kb_mean": dict(
                sorted(((n, _mean(v)) for n, v in kept_files.items()), key=lambda nv: -nv[1])[:10]
            ),
        }
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Open the copy, wait for its indexes, run the three passes; the report."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = args.workdir / f"call-objects-{os.getpid()}-{args.db.name}"
    with sqlite3.connect(args.db) as source, sqlite3.connect(copy) as target:
        source.backup(target, pages=65_536)
    pool = common.make_queries(args.warmup + args.queries, seed=args.seed + 1)
    warmup, queries = pool[: args.warmup], pool[args.warmup : args.warmup + args.queries]
    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    engine = Engine(settings=Settings(url=f"sqlite:///{copy}", data_dir=args.workdir),
                    embedder=embedder)  # fmt: skip
    load = [os.getloadavg()[0]]
    try:
        with engine:
            indexed = common.warm_up(engine, USER, warmup)
            collected = collections_pass(engine, queries)
            objects = objects_pass(engine, queries)
            traced = bytes_pass(engine, queries[: args.traced])
    finally:
        for path in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
            path.unlink(missing_ok=True)
    load.append(os.getloadavg()[0])
    return {
        "db": str(args.db), "queries": len(queries), "traced_queries": len(traced),
        "indexed": indexed, "threshold": list(gc.get_threshold()),
        "load_1m": [round(v, 2) for v in load],
        "engrain": common.machine_info().get("git"),
        **summarize(collected, objects, traced),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a SQLite store (copied first)")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--traced", type=int, default=60, help="calls traced for bytes")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    report = measure(args)
    common.write_json(args.out, report)
    for group in ("deep", "shallow"):
        g = report.get(group)
        if not g:
            continue
        passes = g["passes"]
        print(f"{group} ({g['calls']} calls): thread {g['thread_ms_median']:.2f} ms median, "
              f"collector {g['collector_ms_mean']:.2f} ms mean "
              f"({100 * g['collector_share_of_thread']:.1f} %); slowest tenth "
              f"{g['slowest_tenth']['thread_ms_mean']:.1f} ms with "
              f"{g['slowest_tenth']['collector_ms_mean']:.2f} of collector")  # fmt: skip
        for name, p in passes.items():
            print(
                f"  {name}: {p['per_call']:.2f} a call, {p['cpu_ms_median']:.3f} ms, "
                f"{p['objects_median']:.0f} objects, {p['references_median']:.0f} refs"
            )
        print(
            f"  net tracked objects a call {g['net_objects_median']:.0f}; by stage: "
            + ", ".join(f"{n} {v:.0f}" for n, v in list(g["net_objects_by_stage_mean"].items())[:8])
        )
        print(f"  traced peak {g['peak_kb_median']:.0f} KB, kept {g['kept_kb_median']:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
