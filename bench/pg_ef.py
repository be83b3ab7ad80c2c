"""Recall and server CPU of ``context()``'s two graph walks on PostgreSQL, by ``ef_search``.

    python bench/pg_ef.py URL --queries 60 --seed 8 --out bench/results/pg-ef-….json

``URL`` names a database holding a kept corpus (``bench/pg_scale.py --keep …``) with one
large user. An engine (the real model) answers ``--queries`` questions of
``common.make_queries`` for that user, and the searches its gate asks of the store
(``search_many``: the pool's nearest and the learnings' nearest, with their ``k`` and
filters) are recorded. Each is then run again on one connection with the HNSW form at
every ``--efs`` value and with the exact form, and reported: recall@k against the exact
form, and the backend's CPU per walk (``/proc/<pid>/schedstat``: nanoseconds on a CPU,
steadier than wall time on a shared machine), median and mean. The engine counts uses as
``context()`` does, so run it on a copy of a corpus other measurements do not need pristine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import common
import numpy as np
import psycopg

from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder
from engrain.store.postgres.codec import configure
from engrain.store.postgres.sql import search_sql

NAMES = ("pool", "learnings")


def gate_searches(url: str, user: str, queries: list[str]) -> list[tuple[np.ndarray, list[Any]]]:
    """The (query vector, [(k, filter), …]) of each ``context()``'s ``search_many``."""
    seen: list[tuple[np.ndarray, list[Any]]] = []
    with tempfile.TemporaryDirectory(prefix="pg-ef-") as tmp:
        engine = Engine(
            settings=Settings(url=url, data_dir=Path(tmp)), embedder=MiniLMEmbedder(spinning=False)
        )
        store: Any = engine.store
        original = store.search_many

        def recorded(user_id: str, vector: Any, searches: Any) -> Any:
            seen.append((np.asarray(vector, dtype=np.float32), list(searches)))
            return original(user_id, vector, searches)

        store.search_many = recorded
        for query in queries:
            engine.context(query, user, now=common.NOW)
        engine.close()
    return seen


def backend_cpu_ns(pid: int) -> int:
    """Nanoseconds the backend ``pid`` has run on a CPU so far."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def measure(url: str, user: str, seen: list[Any], efs: list[int]) -> dict[str, Any]:
    """Recall@k against exact search and backend CPU per walk, by ef and search."""
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as db:
        configure(db)
        pid = db.info.backend_pid

        def ids(vector: np.ndarray, k: int, flt: Any, *, indexed: bool) -> list[str]:
            text, params = search_sql(user, vector, k, flt, indexed=indexed)
            return [r[0] for r in db.execute(text, params, binary=True).fetchall()]

        exact = [[ids(v, k, f, indexed=False) for k, f in searches] for v, searches in seen]
        for ef in efs:
            db.execute(f"SET hnsw.ef_search = {int(ef)}")
            row: dict[str, Any] = {}
            for which, name in enumerate(NAMES):
                recall, cpu = [], []
                for (vector, searches), truth in zip(seen, exact, strict=True):
                    k, flt = searches[which]
                    before = backend_cpu_ns(pid)
                    found = ids(vector, k, flt, indexed=True)
                    cpu.append((backend_cpu_ns(pid) - before) / 1e6)
                    recall.append(len(set(found) & set(truth[which])) / len(truth[which]))
                row[name] = {
                    "k": searches[which][0],
                    "recall": round(float(np.mean(recall)), 4),
                    "recall_min": round(float(np.min(recall)), 3),
                    "server_cpu_ms": {
                        "median": round(float(np.median(cpu)), 2),
                        "mean": round(float(np.mean(cpu)), 2),
                    },
                }
                print(f"ef {ef:>4} {name:>9} k={row[name]['k']}: R@k {row[name]['recall']}, "
                      f"backend CPU median {row[name]['server_cpu_ms']['median']} ms",
                      file=sys.stderr)  # fmt: skip
            out[str(ef)] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the database of a kept corpus")
    parser.add_argument("--user", default="big-user", help="its large user")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--efs", default="100,150,200,300,400")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    queries = common.make_queries(args.queries, seed=args.seed)
    seen = gate_searches(args.url, args.user, queries)
    by_ef = measure(args.url, args.user, seen, [int(e) for e in args.efs.split(",")])
    report = {
        "queries": args.queries,
        "seed": args.seed,
        "by_ef_search": by_ef,
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
