"""The statement a held pool graph's candidates go to (``projected.nearest_sql``), of two
source trees side by side: the database's CPU for it by the pool's depth.

    python bench/pg_held_statement.py --pgdata /tmp/…/pgdata --tree new=. \\
        --tree base=/tmp/s28-base --queries 40 --rounds 4 --out bench/results/….json

One private server on a kept corpus (``pg_scale.py --keep``'s data directory, its
``big`` database; the held graphs' files in ``ENGRAIN_PG_GRAPH_DIR``). Each tree gets a
worker process importing that tree's engrain (``pg_side.worker_env``): it opens a
``PostgresStore``, waits for the user's held pool graph, and for each question and depth
``k`` asks its graph for candidates, builds its tree's statement and runs it on a
connection of its own, answering with that backend's CPU (``/proc/<pid>/schedstat``) and
the ids returned. The parent embeds the questions once (``common.make_queries``, the real
model) and sends each (question, ``k``) to every worker in turn, which goes first
alternating, ``--rounds`` times: the same candidates (the graphs are the same file), the
same database, the same moments. Reported per tree and depth: the median and mean backend
CPU (ms), the ratio of the first tree's to the second's, and how many answers are the same
rows in the same order.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _backend_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e6


def _serve(url: str, user: str) -> None:
    """A worker: answer ``{"query": [...], "k": k}`` lines with the statement's backend
    CPU and the ids it returned, until stdin closes."""
    import numpy as np
    import psycopg

    import engrain
    from engrain.recall.candidates import recall_filter
    from engrain.store.base import MemoryFilter
    from engrain.store.postgres import PostgresStore, configure, projected
    from engrain.store.postgres.sql import array_literal

    store = PostgresStore(url)
    store.search(user, np.ones(384, dtype=np.float32), 1, MemoryFilter())
    if not store.wait_for_projection(user, 1800.0):
        raise SystemExit("no held pool graph for the user")
    graph = store._projected.held(user)
    flt = recall_filter(min_importance=None)
    out = sys.stdout
    out.write(json.dumps({"engrain": str(Path(engrain.__file__).parent)}) + "\n")
    out.flush()
    with psycopg.connect(url) as db:
        configure(db)
        pid = db.info.backend_pid
        for line in sys.stdin:
            request = json.loads(line)
            query = np.asarray(request["query"], dtype=np.float32)
            k = int(request["k"])
            seqs = array_literal(graph.candidates(query, k).tolist())
            text, params = projected.nearest_sql(user, query, k, flt, seqs, graph.revision)
            before = _backend_ms(pid)
            rows = db.cursor(binary=True).execute(text, params).fetchall()
            spent = _backend_ms(pid) - before
            out.write(json.dumps({"backend_ms": spent, "ids": [r[0] for r in rows]}) + "\n")
            out.flush()
    store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pgdata", type=Path, required=True, help="a kept corpus's data directory")
    parser.add_argument("--tree", action="append", required=True, help="name=path, two or more")
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--depths", default="187,100,50", help="the pool depths k asked for")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import common
    import numpy as np
    from pg_scale import prewarm, start_server
    from pg_side import worker_env

    from engrain.embed.minilm import MiniLMEmbedder

    trees = dict(t.split("=", 1) for t in args.tree)
    depths = [int(k) for k in args.depths.split(",")]
    questions = common.make_queries(args.queries, seed=args.seed)
    vectors = np.asarray(MiniLMEmbedder(spinning=False).embed(questions), dtype=np.float32)
    server = start_server(args.pgdata.resolve(), "2GB", keep=True)
    workers: dict[str, subprocess.Popen[str]] = {}
    try:
        url = str(server.get_uri(database="big"))
        warmed = prewarm(url)
        for name, tree in trees.items():
            env = worker_env(Path(tree).resolve(), spinning=False)
            workers[name] = subprocess.Popen(
                [sys.executable, __file__, "--serve", url, args.user], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
            )  # fmt: skip
        where = {name: json.loads(w.stdout.readline())["engrain"] for name, w in workers.items()}  # type: ignore[union-attr]
        spent: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        same: dict[int, list[bool]] = defaultdict(list)
        names = list(workers)
        for r in range(args.rounds):
            for i, vector in enumerate(vectors):
                for k in depths:
                    answers = {}
                    for name in names if (r + i) % 2 == 0 else names[::-1]:
                        w = workers[name]
                        w.stdin.write(json.dumps({"query": vector.tolist(), "k": k}) + "\n")  # type: ignore[union-attr]
                        w.stdin.flush()  # type: ignore[union-attr]
                        answers[name] = json.loads(w.stdout.readline())  # type: ignore[union-attr]
                        spent[name][k].append(answers[name]["backend_ms"])
                    first, *others = (a["ids"] for a in answers.values())
                    same[k].append(all(o == first for o in others))
    finally:
        for w in workers.values():
            if w.stdin is not None:
                w.stdin.close()
            w.wait(timeout=60)
        server.cleanup()
    report: dict[str, Any] = {
        "benchmark": "pg_held_statement", "queries": args.queries, "rounds": args.rounds,
        "load_1min": round(os.getloadavg()[0], 2), "machine": common.machine_info(),
        "prewarm": warmed, "trees": where, "backend_cpu_ms": {}, "same_rows": {},
    }  # fmt: skip
    for k in depths:
        row = {
            name: {"median": round(statistics.median(spent[name][k]), 3),
                   "mean": round(statistics.mean(spent[name][k]), 3)}
            for name in names
        }  # fmt: skip
        a, b = names[0], names[1]
        row[f"{a}_to_{b}"] = round(row[a]["median"] / row[b]["median"], 3)
        report["backend_cpu_ms"][f"k={k}"] = row
        report["same_rows"][f"k={k}"] = f"{sum(same[k])} of {len(same[k])}"
    common.write_json(args.out, report)
    for k, row in report["backend_cpu_ms"].items():
        print(k, row, "same rows", report["same_rows"][k])
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], sys.argv[3])
    else:
        sys.path.insert(0, str(HERE))
        sys.exit(main())
