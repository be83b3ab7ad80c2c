"""The held learnings' product in stages (``store/postgres/quantized.py``, session 26) against
one product over every row, in one process, alternating.

    python bench/pg_learnings_staged.py URL --postmaster PID --seeds 8 99 \\
        --out bench/results/pg-learnings-staged-….json

``URL`` names a database holding a kept corpus (``bench/pg_scale.py --keep …``) with one
large user. Two stores of this tree hold the user's learnings: one in a basis of their own,
searched in stages (the default for ``quantized.STAGED_ROWS`` learnings or more), one
loaded with ``STAGED_ROWS`` above the user's count, so its rows keep their coordinates and
every search multiplies every row (the product the tree before ran, in column blocks). The
gate's learnings' search (the 100 nearest typed learnings) of ``common.make_queries``'
questions of each seed, embedded by the model, runs on both, alternating which goes first.
Reported per seed and side: the calling thread's CPU of the search (its round trip and rows
decoded included) and of ranking the held rows alone (``_Rows.candidates``), the server's
CPU over the search, the rows multiplied in full, and whether both sides return the same
memories and scores, bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np
from pg_side import server_cpu_ms

from engrain.recall.gate import LEARNING_KINDS, LEARNINGS_MAX
from engrain.store.base import MemoryFilter
from engrain.store.postgres import PostgresStore, quantized

TYPED = MemoryFilter(kinds=LEARNING_KINDS)


def held(url: str, user: str, staged: bool) -> Any:
    """A store of ``url`` with ``user``'s learnings loaded, in stages or not."""
    store = PostgresStore(url)
    kept = quantized.STAGED_ROWS
    if not staged:
        quantized.STAGED_ROWS = 2**62  # this load keeps the rows' own coordinates
    try:
        store.search(user, np.ones(384, dtype=np.float32), 1, TYPED)  # starts the load
        if not store.wait_for_learnings(user, 1800.0):
            raise SystemExit("the learnings did not load")
    finally:
        quantized.STAGED_ROWS = kept
    return store


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "mean": round(statistics.fmean(values), 3),
        "p90": round(common.percentile(values, 90), 3),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder(spinning=False)
    sides = {"staged": held(args.url, args.user, True), "full": held(args.url, args.user, False)}
    multiplied: list[int] = []
    last = 384 - quantized.STAGES[-1]
    original = quantized._gathered

    def counted(block: Any, rows: Any, query: Any) -> Any:
        if block.shape[1] == last:
            multiplied.append(len(rows))
        return original(block, rows, query)

    quantized._gathered = counted  # type: ignore[assignment]
    report: dict[str, Any] = {"seeds": {}}
    for seed in args.seeds:
        questions = common.make_queries(args.queries, seed=seed)
        vectors = np.asarray(embedder.embed(questions), dtype=np.float32)
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        ranking: dict[str, list[float]] = {name: [] for name in sides}
        server: dict[str, list[float]] = {name: [] for name in sides}
        rows_full: list[int] = []
        same = 0
        for i, vector in enumerate(vectors):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            found: dict[str, list[tuple[str, float]]] = {}
            for name in order:
                store = sides[name]
                rows = store._learnings._held[args.user]
                unit = vector / np.linalg.norm(vector)
                multiplied.clear()
                start = time.thread_time()
                rows.candidates(unit, LEARNINGS_MAX, TYPED)
                ranking[name].append((time.thread_time() - start) * 1000.0)
                if name == "staged":
                    rows_full.append(sum(multiplied))
                before = server_cpu_ms(args.postmaster)
                start = time.thread_time()
                result = store.search(args.user, vector, LEARNINGS_MAX, TYPED)
                cpu[name].append((time.thread_time() - start) * 1000.0)
                server[name].append(server_cpu_ms(args.postmaster) - before)
                found[name] = [(m.id, s) for m, s in result]
            same += found["staged"] == found["full"]
        report["seeds"][str(seed)] = {
            "questions": len(vectors),
            "identical": same,
            "rows_held": len(sides["staged"]._learnings._held[args.user].ids),
            "rows_multiplied_in_full": _summary([float(n) for n in rows_full]),
            **{
                name: {
                    "search_cpu_ms": _summary(cpu[name]),
                    "ranking_cpu_ms": _summary(ranking[name]),
                    "server_cpu_ms": _summary(server[name]) if args.postmaster else None,
                }
                for name in sides
            },
        }
    quantized._gathered = original  # type: ignore[assignment]
    for store in sides.values():
        store.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the database of a kept corpus")
    parser.add_argument("--user", default="big-user", help="its large user")
    parser.add_argument("--postmaster", type=int, help="the server's postmaster pid (its CPU)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[8, 99])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    report = {"benchmark": "pg_learnings_staged", "machine": common.machine_info(), **run(args)}
    common.write_json(args.out, report)
    for seed, row in report["seeds"].items():
        full = row["rows_multiplied_in_full"]
        print(f"seed {seed}: identical {row['identical']} of {row['questions']}, "
              f"rows multiplied in full {full} of {row['rows_held']}")  # fmt: skip
        for name in ("staged", "full"):
            side = row[name]
            print(f"  {name}: search CPU {side['search_cpu_ms']}, "
                  f"ranking {side['ranking_cpu_ms']}, server {side['server_cpu_ms']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
