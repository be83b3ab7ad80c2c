"""The learnings' search of ``context()`` on PostgreSQL: the graph walk against the learnings
held in process (``store/postgres/learnings.py``), side by side.

    python bench/pg_learnings.py URL --postmaster PID --queries 60 --seed 8 \
        --out bench/results/pg-learnings-….json

``URL`` names a database holding a kept corpus (``bench/pg_scale.py --keep …``) with one
large user. The learnings' searches the gate asks for (``search_many``'s second search: the
100 nearest typed learnings under the call's filter) are recorded from an engine answering
``--queries`` questions of ``common.make_queries`` (``pg_ef.gate_searches``), then run again
through two stores of this tree, alternating per search: one walking the learnings' graph
(``learnings_bytes=0``, the SQL path) and one searching them in process. Reported per side:
recall@k against the exact form (``pg_ef``'s), the calling thread's CPU of the search
(decoding its rows included) and the server's CPU over it (every process of the postmaster
``--postmaster``, ``pg_side.server_cpu_ms``), medians and means; and whether the held search
returns exactly the exact form's ids, in order, and (a tree holding them as int16 steps,
``store/postgres/quantized.py``) how many rows each held search reads whole: the k and those
the steps cannot tell from the k-th. The first search of the held side starts the
load, which is waited for, untimed (its seconds are reported).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np
import psycopg
from pg_ef import gate_searches
from pg_side import server_cpu_ms

from engrain.store.postgres import PostgresStore
from engrain.store.postgres.codec import configure
from engrain.store.postgres.sql import search_sql


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 3), "mean": round(float(np.mean(values)), 3)}


def measure(url: str, user: str, seen: list[Any], postmaster: int | None) -> dict[str, Any]:
    """Recall and CPU per learnings' search, graph walk against held (module docstring)."""
    learnings = [(vector, *searches[1]) for vector, searches in seen]
    with psycopg.connect(url, autocommit=True) as db:
        configure(db)
        exact = [
            [r[0] for r in db.execute(*search_sql(user, v, k, f, indexed=False), binary=True)]
            for v, k, f in learnings
        ]
    sides = {
        "graph": PostgresStore(url, pool_size=2, learnings_bytes=0),
        "held": PostgresStore(url, pool_size=2),
    }
    try:
        vector, k, flt = learnings[0]
        sides["held"].search(user, vector, k, flt)  # served by SQL; starts the load
        start = time.perf_counter()
        assert sides["held"].wait_for_learnings(user, 1800.0), "the learnings were not loaded"
        load_s = time.perf_counter() - start
        for store in sides.values():  # warm: plans, connections, the held side's first delta
            for vector, k, flt in learnings[:3]:
                store.search(user, vector, k, flt)
        rows: dict[str, dict[str, list[float]]] = {
            name: {"recall": [], "thread_cpu_ms": [], "server_cpu_ms": []} for name in sides
        }
        identical = 0
        # the rows each held search reads whole: the k and those its steps cannot tell from
        # the k-th (store/postgres/quantized.py; absent in a tree that holds float32 vectors)
        candidates: list[int] = []
        held_rows = getattr(sides["held"]._learnings, "_held", {}).get(user)
        for i, ((vector, k, flt), truth) in enumerate(zip(learnings, exact, strict=True)):
            if held_rows is not None and hasattr(held_rows, "candidates"):
                unit = np.asarray(vector, dtype=np.float32)
                unit = unit / np.float32(np.linalg.norm(unit))
                candidates.append(len(held_rows.candidates(unit, k, flt)))
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                server, thread = server_cpu_ms(postmaster), time.thread_time()
                found = [m.id for m, _ in sides[name].search(user, vector, k, flt)]
                rows[name]["thread_cpu_ms"].append((time.thread_time() - thread) * 1e3)
                rows[name]["server_cpu_ms"].append(server_cpu_ms(postmaster) - server)
                rows[name]["recall"].append(len(set(found) & set(truth)) / max(1, len(truth)))
                if name == "held":
                    identical += found == truth
        held: Any = sides["held"]
        calls = dict(held._learnings.calls)
        nbytes = held._learnings.nbytes
    finally:
        for store in sides.values():
            store.close()
    report: dict[str, Any] = {
        "searches": len(learnings),
        "k": learnings[0][1],
        "held_load_s": round(load_s, 2),
        "held_bytes": nbytes,
        "held_calls": calls,
        "held_identical_to_exact": identical,
    }
    if candidates:
        report["held_candidates"] = {
            **_summary([float(c) for c in candidates]),
            "max": max(candidates),
        }
        print(f"held: rows read a search {report['held_candidates']}", file=sys.stderr)
    for name, values in rows.items():
        report[name] = {
            "recall": round(float(np.mean(values["recall"])), 4),
            "recall_min": round(float(np.min(values["recall"])), 3),
            "thread_cpu_ms": _summary(values["thread_cpu_ms"]),
            "server_cpu_ms": _summary(values["server_cpu_ms"]),
        }
        print(f"{name:>5}: R@{report['k']} {report[name]['recall']}, thread CPU "
              f"{report[name]['thread_cpu_ms']}, server CPU {report[name]['server_cpu_ms']}",
              file=sys.stderr)  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the database of a kept corpus")
    parser.add_argument("--user", default="big-user", help="its large user")
    parser.add_argument("--postmaster", type=int, help="the server's postmaster pid (its CPU)")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    queries = common.make_queries(args.queries, seed=args.seed)
    seen = gate_searches(args.url, args.user, queries)
    report = {
        "queries": args.queries,
        "seed": args.seed,
        **measure(args.url, args.user, seen, args.postmaster),
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
