"""Each stage's share of a deep call's median and slowest calls, from ``bench/tail_stages.py``
runs (issue 18: where a deep call's calling-thread CPU goes).

    python bench/deep_shares.py base=/tmp/me/ts-base-1.json,/tmp/me/ts-base-2.json \
        new=/tmp/me/ts-new-1.json,/tmp/me/ts-new-2.json --out bench/results/deep-shares.json

A deep call is one whose budget is at least ``bench/latency.py``'s ``DEEP_BUDGET`` (3,000
tokens: the benchmark's p95 is one). For each tree, over its runs' deep calls (one value per
query: the median of the runs' calls of that query, so the trees' queries are the same):

- ``thread_cpu_ms``: the deep calls' calling-thread CPU, median, p95 and p99;
- ``median``: each stage's median, and its share of the median call's calling-thread CPU;
- ``slowest``: each stage's mean over the calls at or above the 90th percentile of the
  calls' CPU (at 36 deep calls, the slowest 4: the p95's neighbourhood), and its share of
  their mean;
- ``counts``: the median of each counter (rows read by rowid, candidates ranked, …).

Stages are ``tail_stages``' exclusive ones (a stage called inside another is charged to
itself), so the shares add up to one. Nothing is timed here.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import common
from latency import DEEP_BUDGET


def per_query(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The deep calls of ``runs`` (each a ``tail_stages`` report's ``calls``), one per query:
    its CPU, stages and counters the medians of that query's calls across the runs."""
    by_query: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for calls in runs:
        for call in calls:
            if call.get("budget", 0) >= DEEP_BUDGET:
                by_query[call["query"]].append(call)
    out = []
    for query, calls in sorted(by_query.items()):
        stages = {name for call in calls for name in call["stages_ms"]}
        counts = {name for call in calls for name in call.get("counts", {})}
        out.append({
            "query": query,
            "thread_cpu_ms": statistics.median(c["thread_cpu_ms"] for c in calls),
            "stages_ms": {n: statistics.median(c["stages_ms"].get(n, 0.0) for c in calls)
                          for n in stages},
            "counts": {n: statistics.median(c.get("counts", {}).get(n, 0.0) for c in calls)
                       for n in counts},
        })  # fmt: skip
    return out


def shares(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``median`` and ``slowest`` split of :func:`per_query`'s ``calls`` (see the
    module docstring)."""
    if not calls:
        return {"calls": 0}
    names = sorted({n for c in calls for n in c["stages_ms"]})
    total = statistics.median(c["thread_cpu_ms"] for c in calls)
    cpus = sorted(c["thread_cpu_ms"] for c in calls)
    cut = cpus[min(len(cpus) - 1, int(0.9 * len(cpus)))]
    slow = [c for c in calls if c["thread_cpu_ms"] >= cut]
    slow_total = statistics.fmean(c["thread_cpu_ms"] for c in slow)
    median = {n: statistics.median(c["stages_ms"].get(n, 0.0) for c in calls) for n in names}
    slowest = {n: statistics.fmean(c["stages_ms"].get(n, 0.0) for c in slow) for n in names}
    counters = sorted({n for c in calls for n in c["counts"]})
    cpu = {
        "median": round(total, 3),
        "p95": round(common.percentile(cpus, 95), 3),
        "p99": round(common.percentile(cpus, 99), 3),
        "slowest_mean": round(slow_total, 3),
    }
    counted = {n: statistics.median(c["counts"].get(n, 0.0) for c in calls) for n in counters}
    return {
        "calls": len(calls),
        "slowest_calls": len(slow),
        "thread_cpu_ms": cpu,
        "median": {n: [round(v, 3), round(v / total, 4)] for n, v in median.items()},
        "slowest": {n: [round(v, 3), round(v / slow_total, 4)] for n, v in slowest.items()},
        "counts": counted,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", metavar="LABEL=RUN.json,…")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    for spec in args.trees:
        label, _, paths = spec.partition("=")
        runs = [json.loads(Path(p).read_text(encoding="utf-8"))["calls"] for p in paths.split(",")]
        report[label] = shares(per_query(runs))
    labels = list(report)
    first = report[labels[0]]
    if first.get("calls"):
        order = sorted(first["median"], key=lambda n: -first["median"][n][0])
        print(f"{'deep calls, ms (share)':>34}  " + "  ".join(
            f"{t + ' median':>16} {t + ' slowest':>16}" for t in labels))  # fmt: skip
        for name in ["thread_cpu_ms", "p95 / p99", *order]:
            cells = []
            for t in labels:
                r = report[t]
                if name == "thread_cpu_ms":
                    cpu = r["thread_cpu_ms"]
                    cells.append(f"{cpu['median']:16.2f} {cpu['slowest_mean']:16.2f}")
                    continue
                if name == "p95 / p99":
                    cpu = r["thread_cpu_ms"]
                    cells.append(f"{cpu['p95']:16.2f} {cpu['p99']:16.2f}")
                    continue
                m, s = r["median"].get(name, [0.0, 0.0]), r["slowest"].get(name, [0.0, 0.0])
                cells.append(f"{m[0]:9.2f} ({m[1]:4.0%}) {s[0]:9.2f} ({s[1]:4.0%})")
            print(f"{name:>34}  " + "  ".join(cells))
        for t in labels:
            print(f"{t}: {report[t]['calls']} deep calls, slowest {report[t]['slowest_calls']}; "
                  f"counts {report[t]['counts']}")  # fmt: skip
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
