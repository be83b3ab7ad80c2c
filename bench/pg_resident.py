"""Resident memory of a process serving one large PostgreSQL user, trees side by side
(issue 18).

    python bench/pg_resident.py --keep /tmp/h3-pg100k/pgdata \
        --tree base=/tmp/s14-base/src --tree new=src --rounds 2 \
        --out bench/results/pg-resident-100k.json

The corpus is the one ``bench/pg_scale.py --scenarios big --keep DIR`` loaded (its big user,
database ``big``); the server is started on that directory. Each round runs one fresh
process per tree, one after the other (the trees in the order given; ``--sql`` adds a
process of the first tree with the working set off: the SQL path's own RSS). Each process
loads the model, opens an ``Engine`` on the database with ``ENGRAIN_PG_WORKING_SET=on``,
runs the first ``context()`` (served by SQL; it starts the working set's load), waits
for the working set and its approximate indexes, runs ``--queries`` more calls, and
reports ``bench/resident.py``'s measures (RSS after the model, when the working set is
ready and after the calls; anonymous, file-backed and peak RSS; what glibc keeps freed;
RSS after a trim; the working set's parts; ``--traced``: tracemalloc's largest sites)
and: ``load_s`` / ``load_cpu_s`` (wall and process CPU from the first call until the
working set is ready: rows, columns, BM25 and the graphs), ``cpu_ms_per_call`` (every
thread of the process, query embedding included) and how its store calls were served
(``working_set_calls``).

Numbers: the median over the rounds per tree; each round kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import common
from pg_scale import BIG_USER, start_server
from resident import _allocators, _median, _parts, _status, _top_sites


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One measuring process (see the module docstring)."""
    from latency import rss_mb

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    rss_model = rss_mb()
    if spec.get("traced"):
        tracemalloc.start()
    queries = common.make_queries(spec["queries"] + 1, seed=spec["seed"])
    engine = Engine(settings=Settings(url=spec["url"]), embedder=embedder)
    with engine:
        store: Any = engine.store
        cpu, wall = time.process_time(), time.perf_counter()
        engine.context(queries[0], BIG_USER, now=common.NOW)
        ready = bool(store.wait_for_working_set(BIG_USER, timeout=spec["timeout"]))
        held = store._working.current(BIG_USER) if ready else None
        if held is not None:
            held.wait_for_index(spec["timeout"])
        load = {"load_s": time.perf_counter() - wall, "load_cpu_s": time.process_time() - cpu}
        rss_ready = rss_mb()
        cpu = time.process_time()
        for query in queries[1:]:
            engine.context(query, BIG_USER, now=common.NOW)
        cpu_ms = (time.process_time() - cpu) * 1000.0 / max(1, len(queries) - 1)
        rss = rss_mb()
        status = {**_status(), **_allocators()}
        from engrain.store import heap

        heap.release()  # what glibc keeps freed, handed back
        rss_trimmed = rss_mb()
        traced, peak = tracemalloc.get_traced_memory() if spec.get("traced") else (0, 0)
        top = _top_sites(tracemalloc.take_snapshot()) if spec.get("traced") else []
        tracemalloc.stop()
        held = store._working.current(BIG_USER) if store._working is not None else None
        parts: dict[str, Any] = {}
        if held is not None and held.snapshot.arrays is not None:
            snapshot = held.snapshot
            parts = _parts(snapshot)
            matrix = snapshot.arrays.matrix
            parts["matrix_mb"] = 0.0 if matrix is None else round(matrix.nbytes / 2**20, 1)
            part = getattr(getattr(snapshot.part, "index", None), "_index", None)
            if part is not None:
                parts["part_index_mb"] = round(part.memory_usage / 2**20, 1)
        calls = dict(store._working.calls) if store._working is not None else {}
    return {
        "working_set": spec["working_set"],
        "ready": ready,
        **{name: round(value, 2) for name, value in load.items()},
        "rss_model_mb": rss_model,
        "rss_ready_mb": rss_ready,
        "rss_mb": rss,
        "rss_store_mb": round(rss - rss_model, 1),
        "rss_trimmed_mb": rss_trimmed,
        **status,
        **(
            {
                "traced_mb": round(traced / 2**20, 1),
                "traced_peak_mb": round(peak / 2**20, 1),
                "traced_top": top,
            }
            if spec.get("traced")
            else {}
        ),
        **parts,
        "cpu_ms_per_call": round(cpu_ms, 2),
        "working_set_calls": calls,
    }


def _run(url: str, src: Path, working_set: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`serve` in a fresh interpreter importing engrain from ``src``."""
    env = dict(os.environ, ENGRAIN_PG_WORKING_SET=working_set)
    env["PYTHONPATH"] = os.pathsep.join([str(src.resolve()), str(Path(__file__).parent)])
    spec = {"url": url, "queries": args.queries, "seed": args.seed, "traced": args.traced,
            "timeout": args.timeout, "working_set": working_set}  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, "--serve", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measuring process failed ({done.returncode}):\n{done.stderr}")
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep",
        type=Path,
        help="the data directory pg_scale.py --keep loaded the big user into",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        help="NAME=SRC: a source tree's src directory (repeatable, in order)",
    )
    parser.add_argument(
        "--sql",
        action="store_true",
        help="also the first tree with the working set off (the SQL path)",
    )
    parser.add_argument(
        "--url",
        help="the big user's database on a server already running on --keep (another "
        "run's): this run starts none, so two runs can measure trees at once",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=50, help="context() calls per process")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds to wait for the working set"
    )
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument(
        "--traced",
        action="store_true",
        help="run tracemalloc (its bookkeeping then counts in the RSS)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        print(json.dumps(serve(json.loads(args.serve))))
        return 0
    if args.keep is None:
        parser.error("--keep must name the data directory of a loaded corpus")
    trees = [(name, Path(src)) for name, src in (t.split("=", 1) for t in args.tree)]
    if not trees:
        parser.error("give at least one --tree NAME=SRC")
    runs: list[tuple[str, Path, str]] = [(name, src, "on") for name, src in trees]
    if args.sql:
        runs.append((f"{trees[0][0]}-sql", trees[0][1], "off"))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in runs}
    server = None if args.url else start_server(args.keep.resolve(), args.shared_buffers, keep=True)
    try:
        url = args.url or str(server.get_uri(database="big"))
        for round_ in range(args.rounds):
            for name, src, working_set in runs:
                result = _run(url, src, working_set, args)
                results[name].append(result)
                print(f"round {round_ + 1} {name}: {json.dumps(result)}", file=sys.stderr)
    finally:
        if server is not None:
            server.cleanup()
    report = {
        "keep": str(args.keep),
        "trees": {name: str(src) for name, src in trees},
        "queries": args.queries,
        "traced": args.traced,
        **{name: _median(found) for name, found in results.items()},
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    for name in results:
        m = report[name]
        print(
            f"{name:>10}: RSS {m['rss_mb']:.0f} MB (model {m['rss_model_mb']:.0f}, ready "
            f"{m['rss_ready_mb']:.0f}, trimmed {m['rss_trimmed_mb']:.0f}, peak "
            f"{m['vmhwm_mb']:.0f}), load {m['load_s']:.0f} s ({m['load_cpu_s']:.0f} s CPU), "
            f"CPU {m['cpu_ms_per_call']:.1f} ms/call"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
