"""What the line counts kept with the rows save a ``context()`` on questions a process has not
seen: the same calls with the stored counts used and with every line counted, side by side
in one process (issue 18, docs/scale.md "Session 16 … (h3)").

    python bench/stored_counts.py --db /tmp/h3-stores/latency-100000-s7-vectors-….db \
        --workdir /tmp/me --queries 200 --out bench/results/stored-counts-100k-s16-h3.json

The file is copied (SQLite's backup) into ``--workdir`` first (this tree upgrades the copy to
migration 007, which fills the counts), the store waits for its indexes and the warm-up
queries run. Then each timed query runs twice, once per mode, in alternating order:
``stored`` (this tree: a line's count from its memory's ``content_tokens``) and ``counted``
(``assemble.stored_line_tokens`` answering ``None``, so every line is counted as the trees
before it did). The queries are ones the process has not seen, and before each run the
remembered lines (``recall/lines.py``) are put back as they were before the query's first
run, so both modes meet the same lines as new (those of memories no earlier query
considered) and remember the others, as a long-running process does. Uses are not recorded
(the store's ``record_uses`` does nothing here), so both runs of a query see the same
memories, and their blocks are compared. Reported: the calling thread's CPU per call
(``thread_time``) in each mode, p50 / mean / p95 and the median of the per-query
difference (within each order, averaged over the two: a query's first run pays for what
its second reuses), and the cl100k counts made per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common
import numpy as np
from latency import USER

import engrain
from engrain import tokens
from engrain.recall import lines

MODES = ("stored", "counted")


@contextmanager
def mode(name: str) -> Iterator[None]:
    """While active, lines are costed as ``name`` says (see the module docstring)."""
    original = lines.stored_line_tokens
    if name == "counted":
        lines.stored_line_tokens = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        lines.stored_line_tokens = original  # type: ignore[assignment]


def _counting() -> tuple[list[int], Any]:
    """A counter of the encoder's counts, and the original ``count`` to put back."""
    encoder = tokens.encoder()
    original = encoder.count
    made = [0]

    def count(text: str) -> int:
        made[0] += 1
        return original(text)

    encoder.count = count  # type: ignore[method-assign]
    return made, original


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Open the copy, wait for its indexes, time each query in both modes; the report."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = common.copy_store(args.db, args.workdir / f"stored-counts-{args.db.name}")
    warmup, queries, _ = common.latency_pool(args.warmup, args.queries, args.seed)
    engine = common.model_engine(copy, args.workdir)
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    counts: dict[str, list[int]] = {m: [] for m in MODES}
    differing = 0
    with engine:
        indexed = common.warm_up(engine, USER, warmup)
        engine.store.record_uses = lambda *a, **k: None  # type: ignore[method-assign]
        made, original = _counting()
        load = os.getloadavg()[0]
        try:
            for i, query in enumerate(queries):
                blocks = {}
                remembered = dict(lines._LINES)
                for name in MODES if i % 2 == 0 else MODES[::-1]:
                    lines._LINES.clear()
                    lines._LINES.update(remembered)
                    made[0] = 0
                    with mode(name):
                        start = time.thread_time()
                        context = engine.context(query, USER, now=common.NOW)
                        cpu[name].append((time.thread_time() - start) * 1000.0)
                    counts[name].append(made[0])
                    blocks[name] = (context.text, context.tokens)
                differing += blocks["stored"] != blocks["counted"]
        finally:
            tokens.encoder().count = original  # type: ignore[method-assign]
    copy.unlink()
    saved = [c - s for s, c in zip(cpu["stored"], cpu["counted"], strict=True)]
    # a query's first run pays what its second reuses (memories built, texts read): the
    # difference's median within each order, averaged over the two orders
    by_order = [statistics.median(saved[start::2]) for start in (0, 1)]
    return {
        "db": str(args.db),
        "queries": len(queries),
        "indexed": indexed,
        "load_1m": [load, os.getloadavg()[0]],
        "thread_cpu_ms": {name: common.cpu_summary(v) for name, v in cpu.items()},
        "saved_ms_median": round(statistics.mean(by_order), 3),
        "saved_ms_median_by_order": [round(v, 3) for v in by_order],
        "saved_ms_mean": round(statistics.mean(saved), 3),
        "per_query_ms": {name: [round(v, 3) for v in values] for name, values in cpu.items()},
        "cl100k_counts_per_call": {
            name: {"mean": round(float(np.mean(v)), 1), "max": int(max(v))}
            for name, v in counts.items()
        },
        "blocks_differing": differing,
        "engrain": str(Path(engrain.__file__).resolve().parent),
        "machine": common.machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a latency.py SQLite file")
    parser.add_argument("--workdir", type=Path, required=True, help="where the copy is made")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = measure(args)
    for name, row in report["thread_cpu_ms"].items():
        counted = report["cl100k_counts_per_call"][name]
        print(f"{name:>8}: p50 {row['p50']:7.2f}  mean {row['mean']:7.2f}  p95 {row['p95']:7.2f} "
              f"ms, {counted['mean']:.1f} counts a call (max {counted['max']})")  # fmt: skip
    print(
        f"saved per call: median {report['saved_ms_median']:.3f} ms, "
        f"mean {report['saved_ms_mean']:.3f} ms; blocks differing: {report['blocks_differing']}"
    )
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
