"""Where one ``context()`` call's CPU goes, stage by stage, on a SQLite file already built.

    python bench/call_stages.py --db /tmp/engrain-bench/stores/latency-100000-s7-model.db \
        --workdir /tmp/me --out bench/results/call-stages-100k.json [--profile calls.prof]

The file is copied (SQLite's backup) into ``--workdir`` first, so a shared cache is never
written; a store opened on it waits for its indexes, then the warm-up queries run, then
the timed ones of ``bench/latency.py`` (the same seed). The calling thread's CPU is taken
around the call and around each store call made inside it (``search_many``,
``lexical_search``, or in a tree that builds only what a call shows their ``…_found``
twins, which leave the building to ``rest``; ``query``, ``record_uses``) and the query's
embedding. What the
call does in none of those is ``rest``: candidates built, scoring, selection and
rendering. The report gives each stage's median, mean and p95 over the calls. The
timed calls can also be profiled (cProfile, ``--profile``) in a second pass, so the timing
above does not include the profiler's overhead. That pass replays the timed queries by
default, whose lines are then remembered and memories kept built (neither counting nor
building shows); ``--profile-unseen`` profiles as many queries the process has not seen
instead (the pool's next segment), what a new question costs.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common
from latency import USER

import engrain
from engrain import Engine

#: The calls timed inside ``context()``: (owner, attribute), owner "store" or "embedder".
STAGES = (
    ("embedder", "embed_query"),
    ("store", "search_many"),
    ("store", "search_found"),  # a tree whose gate builds only what it shows (issue 18)
    ("store", "lexical_search"),
    ("store", "lexical_found"),
    ("store", "query"),
    ("store", "record_uses"),
)


@contextmanager
def thread_cpu(engine: Engine, spent: dict[str, float]) -> Iterator[None]:
    """While active, each stage's calling-thread CPU milliseconds are added to ``spent``
    (instance attributes shadow the methods; removed afterwards)."""
    owners = {"store": engine.store, "embedder": engine.embedder}
    wrapped = []
    for where, attr in STAGES:
        owner = owners[where]
        original = getattr(owner, attr, None)
        if original is None:
            continue

        def timed(*args: Any, _f: Callable[..., Any] = original, _n: str = attr,
                  **kwargs: Any) -> Any:  # fmt: skip
            start = time.thread_time()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_n] = spent.get(_n, 0.0) + (time.thread_time() - start) * 1000.0

        setattr(owner, attr, timed)
        wrapped.append((owner, attr))
    try:
        yield
    finally:
        for owner, attr in wrapped:
            delattr(owner, attr)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Open the copy, wait for its indexes, time the calls; the report."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    copy = common.copy_store(args.db, args.workdir / f"call-stages-{args.db.name}")
    warmup, queries, unseen = common.latency_pool(args.warmup, args.queries, args.seed)
    profiled = unseen if args.profile_unseen else queries
    engine = common.model_engine(copy, args.workdir)
    with engine:
        indexed = common.warm_up(engine, USER, warmup)
        stages: dict[str, list[float]] = defaultdict(list)
        spent: dict[str, float] = {}
        load = os.getloadavg()[0]
        with thread_cpu(engine, spent):
            for query in queries:
                spent.clear()
                start = time.thread_time()
                engine.context(query, USER, now=common.NOW)
                total = (time.thread_time() - start) * 1000.0
                for _, name in STAGES:
                    stages[name].append(spent.get(name, 0.0))
                stages["rest"].append(total - sum(spent.values()))
                stages["context"].append(total)
        if args.profile is not None:
            profiler = cProfile.Profile()
            profiler.enable()
            for query in profiled:
                engine.context(query, USER, now=common.NOW)
            profiler.disable()
            profiler.dump_stats(args.profile)
    copy.unlink()
    return {
        "db": str(args.db),
        "queries": len(queries),
        "indexed": indexed,
        "profiled": "unseen queries" if args.profile_unseen else "the timed queries again",
        "load_1m": [load, os.getloadavg()[0]],
        "stages_thread_cpu_ms": {name: common.cpu_summary(v) for name, v in stages.items()},
        "engrain": str(Path(engrain.__file__).resolve().parent),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a latency.py SQLite file")
    parser.add_argument("--workdir", type=Path, required=True, help="where the copy is made")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", type=Path, help="also write a cProfile of the calls here")
    parser.add_argument(
        "--profile-unseen", action="store_true", help="profile queries the process has not seen"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = measure(args)
    for name, row in report["stages_thread_cpu_ms"].items():
        print(
            f"{name:>16}: p50 {row['p50']:7.2f}  mean {row['mean']:7.2f}  p95 {row['p95']:7.2f} ms"
        )
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
