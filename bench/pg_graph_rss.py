"""Resident memory of one process serving a large PostgreSQL user with the held pool graph,
trees side by side (issue 18, session 22).

    python bench/pg_graph_rss.py --url 'postgresql://postgres:@/big?host=…/pgdata' \\
        --tree base=/tmp/s22-base --tree new=. --graph-dir /tmp/…-graphs --calls 200 \\
        --rounds 2 --out bench/results/pg-graph-rss-….json

Each round runs one fresh process per tree, the trees in turn (``--child``): an ``Engine``
opened (the model loaded by its first call, as in a server, or before it with
``--model-first``) on the database with ``ENGRAIN_PG_POOL_INDEX`` as ``--pool``
says (``graph``: kept in ``--graph-dir``, which should already hold the user's file, so
the graph is read from it rather than built), the first ``context()``, then the user's
learnings and pool graph waited for, then ``--calls`` more ``context()`` calls. Reported
per process: RSS before the engine opens, after the first call, once settled and every 25 calls
after; at the end RSS, ``RssAnon``, ``RssFile``, the peak (``VmHWM``), what glibc keeps
freed (``mallinfo2``), RSS after a ``malloc_trim``; the held graph's own count
(``memory_usage``: a graph read in place counts only its lookup tables) and whether it is a
view of its file; how the pool and learnings searches were served. The queries are
``common.make_queries`` of ``--seed``; every call writes its counted uses, as in use.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent


def _child(url: str, user: str, calls: int, seed: int, model_first: bool) -> dict[str, Any]:
    """One serving process's measures (module docstring)."""
    import numpy as np
    from pg_side import worker_embedder
    from resident import _allocators, _status

    import engrain
    from engrain import Engine, Settings
    from engrain.recall.gate import LEARNING_KINDS
    from engrain.store.base import MemoryFilter

    out: dict[str, Any] = {"engrain": str(Path(engrain.__file__).parent)}
    embedder = worker_embedder()
    if model_first:
        embedder.embed(["warm up"])
    out["rss_before_open_mb"] = common.status_mb("VmRSS")
    data_dir = tempfile.mkdtemp(prefix="pg-graph-rss-")
    engine = Engine(settings=Settings(url=url, data_dir=data_dir), embedder=embedder)
    queries = common.make_queries(calls + 1, seed=seed)
    engine.context(queries[0], user, now=common.NOW)
    out["rss_first_mb"] = common.status_mb("VmRSS")
    store: Any = engine.store
    ones = np.ones(384, dtype=np.float32)
    store.search(user, ones, 1, MemoryFilter(kinds=LEARNING_KINDS))
    store.wait_for_learnings(user, 1800.0)
    store.search(user, ones, 1, MemoryFilter())
    store.wait_for_projection(user, 1800.0)
    out["rss_settled_mb"] = common.status_mb("VmRSS")
    trace = []
    cpu = time.process_time()
    for i, query in enumerate(queries[1:]):
        engine.context(query, user, now=common.NOW)
        if i % 25 == 24:
            trace.append(common.status_mb("VmRSS"))
    out["cpu_ms_per_call"] = round((time.process_time() - cpu) * 1000.0 / max(1, calls), 2)
    out["rss_every_25_mb"] = trace
    out["rss_mb"] = common.status_mb("VmRSS")
    out.update(_status())
    out.update({k: v for k, v in _allocators().items() if k != "sqlite_mb"})
    projected = getattr(store, "_projected", None)
    out["pool_calls"] = dict(getattr(projected, "calls", None) or {})
    out["graphs"] = dict(getattr(projected, "graphs", None) or {})
    graph = None if projected is None else projected.held(user)
    index = getattr(graph, "index", None)
    if index is not None:
        out["graph_memory_usage_mb"] = round(index._index.memory_usage / 2**20, 1)
        out["graph_is_view"] = bool(getattr(index, "is_view", False))
    learnings = getattr(store, "_learnings", None)
    out["learnings_calls"] = dict(getattr(learnings, "calls", None) or {})
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    out["rss_trimmed_mb"] = common.status_mb("VmRSS")
    engine.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeatable)")
    parser.add_argument("--pool", default="graph", help="ENGRAIN_PG_POOL_INDEX of every process")
    parser.add_argument("--graph-dir", default="off", help="ENGRAIN_PG_GRAPH_DIR")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument(
        "--model-first", action="store_true",
        help="load the model before the engine opens (else its first call loads it, as a "
        "server's first request does: the store's arena cap then comes first)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.url, args.user, args.calls, args.seed, args.model_first)))
        return 0
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(HERE.parent)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, path in trees.items():
            env = {**os.environ, "ENGRAIN_PG_POOL_INDEX": args.pool,
                   "ENGRAIN_PG_GRAPH_DIR": args.graph_dir,
                   "PYTHONPATH": os.pathsep.join([str(Path(path) / "src"), str(HERE)])}  # fmt: skip
            done = subprocess.run(
                [sys.executable, __file__, "--child", "--url", args.url, "--user", args.user,
                 "--calls", str(args.calls), "--seed", str(args.seed),
                 *(["--model-first"] if args.model_first else [])],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, {k: v for k, v in runs[name][-1].items() if k.endswith("_mb")})
    report = {
        "benchmark": "pg_graph_rss",
        "pool": args.pool,
        "calls": args.calls,
        "model_first": args.model_first,
        "rounds": args.rounds,
        "machine": common.machine_info(),
        "runs": runs,
    }
    if args.out is not None:
        common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
