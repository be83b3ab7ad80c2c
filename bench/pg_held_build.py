"""Build a large PostgreSQL user's held graphs (the pool's, and its learnings') into the
directory a store keeps them in, as a serving process's first load would
(``store/postgres/projected.py``, ``held_graph.read``, ``graph_file.GraphFiles.write``), and
say what each cost: wall seconds, this process's CPU, the graph's rows and bytes.

    python bench/pg_held_build.py --url postgresql://postgres:@/big?host=/tmp/engrain-bench/pg1m \\
        --user big-user --graph-dir /tmp/h7-graphs1m \\
        --out bench/results/pg-held-build-1m-s25-h7.json

A process serving the user afterwards (``ENGRAIN_PG_GRAPH_DIR`` the same directory) reads
the files and checks them against the database (``held_graph.restored``) instead of building
(at 1,000,000 memories a build is minutes of one core). Nothing is written to the database.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from engrain.store.postgres import held_graph
from engrain.store.postgres.graph_file import GraphFiles
from engrain.store.postgres.projected import GRAPH_BYTES

SCOPES = {"pool": held_graph.POOL, "learnings": held_graph.LEARNINGS}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build(url: str, user: str, directory: Path, scope: held_graph.Scope) -> dict[str, Any]:
    """One scope's graph of ``user`` built from the database and written to ``directory``."""
    with psycopg.connect(url, autocommit=True) as conn:
        files = GraphFiles.of(conn, directory)
        assert files is not None, "the database's identity is unreadable"
        wall, cpu = time.perf_counter(), _cpu()
        graph = held_graph.read(conn, user, GRAPH_BYTES, lambda: False, scope)
        built = {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu() - cpu}
    if graph is None:
        return {**built, "held": False}
    key = scope.file_key(user)
    written = files.write(key, graph.revision, graph.index)
    path = files.path(key)
    return {
        **built,
        "held": True,
        "rows": len(graph.index),
        "revision": graph.revision,
        "nbytes": graph.nbytes,
        "file_bytes": path.stat().st_size if written is not None else None,
        "file": path.name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--graph-dir", type=Path, required=True)
    parser.add_argument("--scopes", default="learnings,pool", help="which graphs, in order")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result: dict[str, Any] = {"user": args.user, "load": os.getloadavg()[0], "graphs": {}}
    for name in args.scopes.split(","):
        print(f"building the {name} graph of {args.user}", file=sys.stderr)
        result["graphs"][name] = build(args.url, args.user, args.graph_dir, SCOPES[name])
        print(f"  {result['graphs'][name]}", file=sys.stderr)
    result["load_after"] = os.getloadavg()[0]
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
