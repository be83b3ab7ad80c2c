"""Resident memory of a process serving one large user, two trees side by side (issue 18).

    python bench/resident.py --db /tmp/engrain-bench/stores/latency-100000-….db \
        --baseline-src /tmp/h2-base/src --rounds 3 --out bench/results/resident-100k.json

Each round runs two fresh processes one after the other on copies of the same file (the
baseline tree first, then this one; ``--baseline-src`` is put first on ``PYTHONPATH``):
each loads the model, opens an ``Engine`` on the copy, runs the first ``context()``, waits
for the approximate index, runs ``--queries`` more calls, and reports

- ``rss_model_mb``: ``VmRSS`` after loading the model (before the store is opened);
- ``rss_mb``: ``VmRSS`` after the calls; ``rss_store_mb`` the difference;
- ``traced_mb`` / ``traced_peak_mb``: what ``tracemalloc`` (started after the model)
  counts now and at most: Python and NumPy allocations, not usearch's own (C++) memory;
- ``matrix_mb``: the bytes of the working set's float32 matrix, if it keeps one;
- ``cpu_ms_per_call`` / ``wall_ms_per_call``: CPU (every thread's, query embedding
  included) and wall time per ``context()`` call after the index is ready;
- ``recall_at_50``: the share of exact search's top 50 that the store's search returns
  (the same queries, no filter and the unmuted current one), measured after the RSS.

Numbers: the median over the rounds per tree; each round kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import common

USER = "bench-user"


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One measuring process (see the module docstring)."""
    from latency import recall_at, rss_mb

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    rss_model = rss_mb()
    tracemalloc.start()
    queries = common.make_queries(spec["queries"] + 1, seed=spec["seed"])
    start = time.perf_counter()
    cpu = time.process_time()
    engine = Engine(settings=Settings(url=f"sqlite:///{spec['db']}",
                                      data_dir=Path(spec["db"]).parent),
                    embedder=embedder)  # fmt: skip
    with engine:
        engine.context(queries[0], USER, now=common.NOW)
        cold = {"wall_ms": (time.perf_counter() - start) * 1000.0,
                "cpu_s": time.process_time() - cpu}  # fmt: skip
        indexed = bool(engine.store.wait_for_index(USER))  # type: ignore[attr-defined]
        cpu, wall = time.process_time(), time.perf_counter()
        for query in queries[1:]:
            engine.context(query, USER, now=common.NOW)
        calls = max(1, len(queries) - 1)
        per_call = {"cpu_ms_per_call": (time.process_time() - cpu) * 1000.0 / calls,
                    "wall_ms_per_call": (time.perf_counter() - wall) * 1000.0 / calls}  # fmt: skip
        rss = rss_mb()
        traced, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        arrays = engine.store._cache(USER).snapshot.arrays  # type: ignore[attr-defined]
        matrix = getattr(arrays, "matrix", None)
        recall = recall_at(engine, queries[1:], 50) if spec["recall"] and indexed else None
    return {
        "rss_model_mb": rss_model,
        "rss_mb": rss,
        "rss_store_mb": round(rss - rss_model, 1),
        "traced_mb": round(traced / 2**20, 1),
        "traced_peak_mb": round(peak / 2**20, 1),
        "matrix_mb": 0.0 if matrix is None else round(matrix.nbytes / 2**20, 1),
        "indexed": indexed,
        **{name: round(value, 2) for name, value in per_call.items()},
        "cold_start_ms": round(cold["wall_ms"], 1),
        "cold_start_cpu_s": round(cold["cpu_s"], 2),
        "recall_at_50": recall,
    }


def _run(db: Path, workdir: Path, src: Path | None, queries: int, seed: int) -> dict[str, Any]:
    """:func:`serve` in a fresh interpreter on a copy of ``db`` (importing engrain from
    ``src`` if given)."""
    copy = workdir / ("base.db" if src else "new.db")
    if not copy.exists():  # each tree keeps its own copy (and the indexes it saves there)
        shutil.copyfile(db, copy)
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(":")
    spec = {"db": str(copy), "queries": queries, "seed": seed, "recall": True}
    done = subprocess.run(
        [sys.executable, __file__, "--serve", json.dumps(spec)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"measuring process failed ({done.returncode}):\n{done.stderr}")
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and values:
            out[key] = round(statistics.median(values), 4)
    out["rounds"] = runs
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a SQLite file holding the user (copied)")
    parser.add_argument("--baseline-src", type=Path, help="the other tree's src directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=100, help="context() calls per process")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        print(json.dumps(serve(json.loads(args.serve))))
        return 0
    if args.db is None or not args.db.is_file():
        parser.error("--db must name a SQLite file")
    trees: dict[str, list[dict[str, Any]]] = {"baseline": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="engrain-resident-") as tmp:
        for round_ in range(args.rounds):
            for name, src in (("baseline", args.baseline_src), ("new", None)):
                if name == "baseline" and src is None:
                    continue
                result = _run(args.db, Path(tmp), src, args.queries, args.seed)
                trees[name].append(result)
                print(f"round {round_ + 1} {name}: {json.dumps(result)}", file=sys.stderr)
    report = {
        "db": str(args.db),
        "baseline_src": None if args.baseline_src is None else str(args.baseline_src),
        "queries": args.queries,
        **{name: _median(runs) for name, runs in trees.items() if runs},
        "machine": common.machine_info(),
    }
    common.write_json(args.out, report)
    for name in trees:
        if trees[name]:
            m = report[name]
            print(f"{name:>9}: RSS {m['rss_mb']:.0f} MB (model {m['rss_model_mb']:.0f}, store "
                  f"{m['rss_store_mb']:.0f}), traced {m['traced_mb']:.0f} MB (peak "
                  f"{m['traced_peak_mb']:.0f}), matrix {m['matrix_mb']:.0f} MB, CPU "
                  f"{m['cpu_ms_per_call']:.1f} ms/call, R@50 "
                  f"{m.get('recall_at_50')}, cold start {m['cold_start_ms']:.0f} ms "
                  f"({m['cold_start_cpu_s']:.2f} s CPU)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
