"""``context()`` of this tree on one database against a baseline tree on another, side by
side (``pg_side.side_by_side``), on a server that is already running: how the pool's graph
rebuilt wide (``engrain migrate --pool-graph``, ``store/postgres/graph.py``) compares with
the graph as migration 001 builds it, each tree on its own copy of one corpus.

    createdb -T big big_wide   # a copy; then `engrain --url …/big_wide migrate --pool-graph`
    python bench/pg_graph.py --url postgresql://…/big_wide --base-url postgresql://…/big \\
        --baseline /tmp/base --queries 200 --out bench/results/pg-graph-….json

The two databases must hold the same rows and counts (a copy made with ``CREATE DATABASE …
TEMPLATE``, and the same questions asked of both since), so the blocks each tree previews
after the run can be compared. The server's CPU a call is counted when ``--server-pid`` (the
postmaster's) is given. Unlike ``pg_scale.py --keep`` this neither starts nor restarts a
server, and creates or drops no database. With ``--hold-fill`` the run holds each
database's fill lock (``store/postgres/fill.FILL_LOCK``), so no background filler of the
token counts migration 009 left runs during the timed calls (its batches rewrite rows, both
graphs included, and the server's CPU a call counts every backend of the server).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import common
import psycopg
from pg_scale import other_queries
from pg_side import SPLIT_ENV, side_by_side

ROOT = Path(__file__).resolve().parent.parent


def split_env(which: str) -> dict[str, dict[str, str]]:
    """Each tree's :data:`~pg_side.SPLIT_ENV` for ``--split``: "1" for the trees it names."""
    return {tree: {SPLIT_ENV: "1" if which in (tree, "both") else "0"} for tree in ("new", "base")}


def graph_env(which: str, directory: str) -> dict[str, dict[str, str]]:
    """Each tree's pool index for ``--graph``: the held graph (kept in ``directory``,
    ``ENGRAIN_PG_GRAPH_DIR``) for the trees it names, the database's walk for the other."""
    return {
        tree: {"ENGRAIN_PG_POOL_INDEX": "graph", "ENGRAIN_PG_GRAPH_DIR": directory}
        if which in (tree, "both")
        else {"ENGRAIN_PG_POOL_INDEX": "off", "ENGRAIN_PG_PROJECTED_MB": "off"}
        for tree in ("new", "base")
    }


def built_with(url: str) -> int:
    """The ``ef_construction`` of the pool's graph at ``url`` (64 unless set)."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(
            "SELECT coalesce((SELECT o.option_value::int FROM pg_class c, "
            "pg_options_to_table(c.reloptions) o WHERE "
            "c.oid = to_regclass('memories_embedding_hnsw') "
            "AND o.option_name = 'ef_construction'), 64)"
        ).fetchone()
    return 64 if row is None else int(row[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="this tree's database")
    parser.add_argument("--base-url", required=True, help="the baseline tree's database")
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline tree")
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--server-pid", type=int, help="the postmaster's process id")
    parser.add_argument("--hold-fill", action="store_true", help="no filler runs meanwhile")
    parser.add_argument(
        "--split", choices=("new", "base", "both", "none"), default="none",
        help="which tree's model runs single-threaded, a call split over the cores "
        "(pg_side.SPLIT_ENV; the onnx_split setting)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=0,
        help="then other questions N at a time on each tree's one engine (calls/s, CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--graph", choices=("new", "base", "both", "none"),
        help="which tree holds the pool's graph in process (ENGRAIN_PG_POOL_INDEX=graph, "
        "kept in --graph-dir), the other walking the database's; unset: as the environment says",
    )  # fmt: skip
    parser.add_argument("--graph-dir", default="off", help="ENGRAIN_PG_GRAPH_DIR for --graph")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    queries = common.make_queries(args.queries, seed=args.seed)
    with contextlib.ExitStack() as held, tempfile.TemporaryDirectory(prefix="pg-graph-") as tmp:
        if args.hold_fill:
            from engrain.store.postgres.fill import FILL_LOCK

            for url in dict.fromkeys((args.url, args.base_url)):  # once for one database
                db = held.enter_context(psycopg.connect(url, autocommit=True))
                db.execute("SELECT pg_advisory_lock(%s)", (FILL_LOCK,))
        environ = split_env(args.split)
        if args.graph is not None:
            for tree, extra in graph_env(args.graph, args.graph_dir).items():
                environ[tree] = {**environ[tree], **extra}
        result = side_by_side(
            {"new": ROOT, "base": args.baseline}, args.url, [args.user], queries, args.seed,
            Path(tmp), urls={"base": args.base_url},
            spinning={"new": False, "base": False}, server_pid=args.server_pid,
            environ=environ, threads=args.threads,
            threaded_queries=other_queries(queries, args.seed),
        )  # fmt: skip
    report = {
        "benchmark": "pg_graph",
        "queries": args.queries,
        "seed": args.seed,
        "fill_held": args.hold_fill,
        "split": args.split,
        "graph": args.graph,
        "pool_graph_ef_construction": {
            "new": built_with(args.url),
            "base": built_with(args.base_url),
        },
        "machine": common.machine_info(),
        "side_by_side": result,
    }
    common.write_json(args.out, report)
    for tree, stats in result["trees"].items():
        print(tree, {k: stats.get(k) for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")})
        print(tree, "server CPU a call", stats.get("server_cpu_per_context_ms"))
        print(tree, "worker CPU a call", stats.get("cpu_per_context_ms"))
    for tree, stats in result.get("threads", {}).get("trees", {}).items():
        print(tree, f"{result['threads']['threads']} threads", stats)
    print("blocks", result.get("blocks"), "ratios", result.get("ratio_first_to_second"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
