"""Where a PostgreSQL worker's CPU goes in ``context()`` for one large user: every thread
of the process profiled (``cProfile`` on each thread's own CPU clock, ``time.thread_time``),
the functions that stand for the stages summed per call.

One process, one engine (the real model, its threads not spinning, as over PostgreSQL), the
tree first on ``PYTHONPATH``: ``warmup`` calls untimed, a pause for the held graphs' and
learnings' loads (``--settle``), then ``--calls`` calls profiled. The profiler's own cost
inflates every Python call (a call's profiled CPU is ~1.8× its process CPU), so the table
is for shares and for comparing two trees measured the same way, not for absolute times;
the process CPU a call without the profiler is measured first, on as many other questions.

    ENGRAIN_PG_GRAPH_DIR=/tmp/h3-graphs PYTHONPATH=src python bench/pg_worker_profile.py \\
        --url 'postgresql://postgres:@/big?host=/tmp/h3-pg1m-run' --calls 40 \\
        --out bench/results/pg-worker-profile-1m-s28-h3.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import engrain
from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder

#: (file suffix, function, stage): a function's cumulative CPU a call stands for its stage.
STAGES = [
    (
        "postgres/searches.py",
        "lexical_search",
        "BM25: the whole search (statement, scoring, best rows)",
    ),
    ("postgres/bm25.py", "scores", "BM25: scoring (decode, weights, sums)"),
    ("postgres/bm25.py", "best", "BM25: the best n"),
    ("postgres/postings.py", "unpack", "BM25: blocks decoded"),
    ("postgres/bm25.py", "weights", "BM25: term scores"),
    ("postgres/projected.py", "search", "held graphs: both searches"),
    ("postgres/held_graph.py", "candidates", "held graphs: the walks"),
    ("postgres/projected.py", "_read", "held graphs: the candidates' rows read"),
    ("psycopg/cursor.py", "fetchall", "psycopg: rows fetched (every statement)"),
    ("postgres/codec.py", "from_row", "rows made into memories"),
    ("postgres/codec.py", "load", "vectors decoded"),
    ("embed/minilm.py", "embed", "the query's embedding"),
    ("recall/pool.py", "pool_of", "recall: the pool"),
    ("recall/rank.py", "rank", "recall: ranking"),
    ("recall/selection.py", "select", "recall: selection"),
    ("postgres/__init__.py", "record_uses", "counted uses and the record"),
    ("engrain/engine.py", "context", "context() in the calling thread"),
]


def profile(
    url: str, user: str, calls: int, warmup: int, settle: float, seed: int
) -> dict[str, Any]:
    """Profile ``calls`` calls after ``warmup``; the stages' CPU a call and the process's."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    active = threading.Event()

    def hook(frame: Any, event: str, arg: Any) -> None:
        # every thread started after this runs the hook until profiling begins, then
        # profiles itself on its own CPU clock from its next call on
        if not active.is_set():
            return
        mine = cProfile.Profile(timer=time.thread_time)
        with lock:
            profiles.append(mine)
        sys.setprofile(None)
        mine.enable()

    threading.setprofile(hook)
    embedder = MiniLMEmbedder(spinning=False)
    embedder.embed(["the model's first run"])
    # three sets: the warm-up, the unprofiled calls, the profiled ones (none asked twice: the
    # engine keeps the queries' embeddings)
    questions = common.make_queries(warmup + 2 * calls, seed=seed)
    plain_set, profiled_set = questions[warmup : warmup + calls], questions[warmup + calls :]
    with tempfile.TemporaryDirectory(prefix="engrain-profile-") as data_dir:
        engine = Engine(settings=Settings(url=url, data_dir=Path(data_dir)), embedder=embedder)
        try:
            for text in questions[:warmup]:
                engine.context(text, user, now=common.NOW)
            time.sleep(settle)
            plain = []
            for text in plain_set:  # other calls unprofiled: the process's CPU
                start = time.process_time()
                engine.context(text, user, now=common.NOW)
                plain.append((time.process_time() - start) * 1e3)
            main = cProfile.Profile(timer=time.thread_time)
            active.set()
            profiled = []
            for text in profiled_set:
                start = time.process_time()
                main.enable()
                engine.context(text, user, now=common.NOW)
                main.disable()
                profiled.append((time.process_time() - start) * 1e3)
            threading.setprofile(None)
            with lock:
                for other in profiles:
                    other.disable()
        finally:
            engine.close()
    stats = pstats.Stats(main)
    for other in profiles:
        stats.add(other)
    stages: dict[str, float] = {}
    table: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    for (path, _line, name), (_cc, _nc, _tt, cumulative, _callers) in table.items():
        for suffix, function, stage in STAGES:
            if path.endswith(suffix) and name == function:
                stages[stage] = stages.get(stage, 0.0) + cumulative * 1e3 / calls
    return {
        "engrain": str(Path(engrain.__file__).parent),
        "calls": calls,
        "process_cpu_ms_median": statistics.median(plain),
        "process_cpu_ms_median_profiled": statistics.median(profiled),
        "threads_profiled": 1 + len(profiles),
        "stages_cpu_ms_a_call_profiled": {s: round(stages.get(s, 0.0), 2) for _, _, s in STAGES},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--settle", type=float, default=20.0, help="s for the held loads")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = profile(args.url, args.user, args.calls, args.warmup, args.settle, args.seed)
    report["load_average_1m"] = os.getloadavg()[0]
    report["machine"] = common.machine_info()
    print(f"{report['engrain']}: process CPU a call {report['process_cpu_ms_median']:.1f} ms "
          f"({report['process_cpu_ms_median_profiled']:.1f} profiled), "
          f"load {report['load_average_1m']:.1f}")  # fmt: skip
    for stage, ms in report["stages_cpu_ms_a_call_profiled"].items():
        print(f"  {ms:7.2f} ms  {stage}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
