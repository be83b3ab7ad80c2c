"""Cold start of a large PostgreSQL user's held pool graph: built by the process, or read
from the file another process kept (``store/postgres/graph_file.py``; issue 18, session 21).

    python bench/pg_graph_file.py --url 'postgresql://postgres:@/big_h2?host=…/pgdata' \\
        --server-pid <postmaster> --graph-dir /tmp/…-graphs --rounds 3 --changed 1000 \\
        --out bench/results/pg-graph-file-….json

Each measurement is a fresh process (``--child``) that opens a store with the graph on,
asks the user's pool search once (served by SQL; it starts the graph's load), then asks
again every 20 ms until a search is served by the graph: the wall and the process's CPU
from opening the store to that first graph-served search, the server's CPU meanwhile
(every process of the postmaster, ``schedstat``), the RSS after, and whether the graph was
read from a file or built. In turn: ``sql`` (the graph off: the first search's own cost),
``build`` (no file: the graph built, and kept), ``file`` (``--rounds`` times, the file
the build kept), and with ``--changed N`` ``file-after-writes``: another process first
re-embeds N of the user's memories (each moved by a little noise, in one transaction),
then a process reads the file and catches it up. A last ``file`` round afterwards reads the
copy that catch-up kept. The queries are stored vectors moved a little (no model).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np
from pg_side import server_cpu_ms

HERE = Path(__file__).resolve().parent


def _query(url: str, user: str, seed: int) -> list[float]:
    """A stored vector of ``user``'s, moved a little (a query near real memories)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(
            "SELECT embedding::text FROM memories WHERE user_id = %s AND embedding IS NOT NULL "
            "ORDER BY seq OFFSET %s LIMIT 1",
            (user, 997 * seed % 50_000),
        ).fetchone()
    assert row is not None
    vector = np.asarray(json.loads(row[0]), dtype=np.float32)
    vector += np.random.default_rng(seed).normal(0, 0.02, vector.shape).astype(np.float32)
    return (vector / np.linalg.norm(vector)).tolist()


def child(url: str, user: str, graph: str, graph_dir: str | None, query: list[float]) -> None:
    """One cold start, measured in this process; prints one JSON line."""
    start, cpu = time.perf_counter(), time.process_time()
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(
        url, pool_index=graph if graph != "off" else "projection",
        projected_bytes=96 * 2**20 if graph != "off" else 0,
        graph_dir=graph_dir, fill_in_background=False,
    )  # fmt: skip
    opened = time.perf_counter() - start
    vector = np.asarray(query, dtype=np.float32)
    first = time.perf_counter()
    store.search(user, vector, 50)
    first_ms = (time.perf_counter() - first) * 1000.0
    held = store._projected
    served_at = None
    while held is not None and time.perf_counter() - start < 1800:
        store.search(user, vector, 50)
        if held.calls["served"]:
            served_at = time.perf_counter() - start
            break
        time.sleep(0.02)
    out = {
        "open_s": round(opened, 3),
        "first_search_ms": round(first_ms, 2),
        "first_graph_served_s": None if served_at is None else round(served_at, 3),
        "process_cpu_s": round(time.process_time() - cpu, 3),
        "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "graphs": dict(getattr(held, "graphs", {})),
    }
    store.close()
    print(json.dumps(out), flush=True)


def _run(args: argparse.Namespace, graph: str, graph_dir: str | None, query: list[float]) -> Any:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)])}
    before = server_cpu_ms(args.server_pid)
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--url", args.url, "--user", args.user,
         "--graph", graph, "--graph-dir", graph_dir or "off", "--query", json.dumps(query)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if args.server_pid is not None:
        row["server_cpu_s"] = round((server_cpu_ms(args.server_pid) - before) / 1000, 3)
    print(graph, graph_dir, row, flush=True)
    return row


def _rewrite(url: str, user: str, n: int, seed: int) -> None:
    """Another process re-embeds ``n`` of the user's memories, spread over them."""
    from engrain.store.base import Patch
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(url, fill_in_background=False, projected_bytes=0)
    try:
        with store._connection() as conn:
            rows = conn.execute(
                "SELECT id, embedding::text FROM memories WHERE user_id = %s "
                "AND embedding IS NOT NULL ORDER BY md5(id || %s) LIMIT %s",
                (user, str(seed), n),
            ).fetchall()
        rng = np.random.default_rng(seed)
        patches = []
        for memory_id, text in rows:
            vector = np.asarray(json.loads(text), dtype=np.float32)
            vector += rng.normal(0, 0.01, vector.shape).astype(np.float32)
            patches.append(Patch(user, memory_id, {"embedding": vector / np.linalg.norm(vector)}))
        store.write(patches=patches)
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--graph-dir", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--changed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--graph", default="graph", help=argparse.SUPPRESS)
    parser.add_argument("--query", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kept = None if args.graph_dir == "off" else args.graph_dir
        child(args.url, args.user, args.graph, kept, json.loads(args.query))
        return 0
    assert args.graph_dir, "--graph-dir: where the graphs are kept"
    directory = Path(args.graph_dir)
    for old in directory.glob("*.graph"):
        old.unlink()  # the build is measured first
    query = _query(args.url, args.user, args.seed)
    runs: dict[str, list[Any]] = {"sql": [], "build": [], "file": [], "file_after_writes": []}
    runs["sql"].append(_run(args, "off", None, query))
    runs["build"].append(_run(args, "graph", str(directory), query))
    for _ in range(args.rounds):
        runs["sql"].append(_run(args, "off", None, query))
        runs["file"].append(_run(args, "graph", str(directory), query))
    if args.changed:
        _rewrite(args.url, args.user, args.changed, args.seed)
        runs["file_after_writes"].append(_run(args, "graph", str(directory), query))
        runs["file"].append(_run(args, "graph", str(directory), query))
    sizes = {p.name: p.stat().st_size for p in directory.glob("*.graph")}
    report = {
        "benchmark": "pg_graph_file",
        "user": args.user,
        "changed": args.changed,
        "files": sizes,
        "runs": runs,
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
