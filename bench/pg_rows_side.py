"""How PostgreSQL's rows become memories: this tree's ``codec.from_row`` against a baseline
tree's, side by side in one process, alternating per question, over one large user.

    python bench/pg_rows_side.py --url 'postgresql://postgres:@/big?host=/tmp/…/pgdata' \\
        --baseline /tmp/base --graph-dir /tmp/…/graphs --queries 200 \\
        --out bench/results/pg-rows-side-….json

The baseline's ``store/postgres/codec.py`` is loaded from its file under another name; its
``from_row`` replaces this tree's wherever the store reads rows (the searches, listings,
held learnings and graph, working set, writes) while a baseline call runs. Two engines over
one MiniLM model (each with its own query cache: a question asked of both is embedded by
both), the user's held indexes ready before anything is timed; the same questions to both,
which goes first alternating. Per call: the calling thread's CPU, the process's CPU (every
thread), the wall, and the rows decoded with their CPU (every thread). After the timed
calls each question is previewed by both (nothing written) and the blocks compared: the
timed calls count uses, so each one's block can differ from the next call's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import numpy as np

from engrain import Engine, Settings

#: The modules that decode rows with ``from_row`` (each imported it by name).
DECODING = (
    "engrain.store.postgres.searches", "engrain.store.postgres.listings",
    "engrain.store.postgres.learnings", "engrain.store.postgres.projected",
    "engrain.store.postgres.working", "engrain.store.postgres.writes",
)  # fmt: skip


def baseline_from_row(tree: Path) -> Callable[..., Any]:
    """``from_row`` of ``tree``'s codec, loaded under another module name."""
    path = tree / "src" / "engrain" / "store" / "postgres" / "codec.py"
    spec = importlib.util.spec_from_file_location("baseline_pg_codec", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.from_row  # type: ignore[no-any-return]


class Decoders:
    """Puts one ``from_row`` or the other in every decoding module, counting its rows and
    their CPU (any thread)."""

    def __init__(self, decoders: dict[str, Callable[..., Any]]) -> None:
        self.modules = [importlib.import_module(name) for name in DECODING]
        self.decoders = decoders
        self.rows = 0
        self.spent = 0.0
        self._lock = threading.Lock()

    def use(self, name: str) -> None:
        decode = self.decoders[name]

        def counted(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return decode(*args, **kwargs)
            finally:
                spent = time.thread_time() - began
                with self._lock:
                    self.rows += 1
                    self.spent += spent

        for module in self.modules:
            module.from_row = counted  # type: ignore[attr-defined]

    def reset(self) -> None:
        with self._lock:
            self.rows, self.spent = 0, 0.0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.store.postgres import codec

    if args.graph_dir:
        os.environ["ENGRAIN_PG_GRAPH_DIR"] = str(args.graph_dir)
    decoders = Decoders({"new": codec.from_row, "base": baseline_from_row(args.baseline)})
    model = MiniLMEmbedder(spinning=False)
    model.embed(["warm the model up"])
    queries = common.make_queries(args.warmup + args.queries, seed=args.seed)
    data = Path(tempfile.mkdtemp(prefix="pg-rows-side-"))
    engines = {
        name: Engine(settings=Settings(url=args.url, data_dir=data / name), embedder=model)
        for name in ("new", "base")
    }
    calls: dict[str, list[dict[str, float]]] = {"new": [], "base": []}
    blocks = {"queries": 0, "identical": 0, "differ": []}
    load = [os.getloadavg()[0]]
    try:
        for name, engine in engines.items():
            decoders.use(name)
            engine.context(queries[0], args.user, now=common.NOW)
            for wait in ("wait_for_learnings", "wait_for_projection"):
                getattr(engine.store, wait)(args.user)
            for query in queries[1 : args.warmup]:
                engine.context(query, args.user, now=common.NOW)
        for i, query in enumerate(queries[args.warmup :]):
            for name in ("new", "base") if i % 2 == 0 else ("base", "new"):
                decoders.use(name)
                decoders.reset()
                process, cpu, wall = time.process_time(), time.thread_time(), time.perf_counter()
                engines[name].context(query, args.user, now=common.NOW)
                calls[name].append({
                    "wall_ms": (time.perf_counter() - wall) * 1000.0,
                    "thread_cpu_ms": (time.thread_time() - cpu) * 1000.0,
                    "process_cpu_ms": (time.process_time() - process) * 1000.0,
                    "rows_decoded": decoders.rows,
                    "decode_cpu_ms": decoders.spent * 1000.0,
                })  # fmt: skip
        for query in queries[args.warmup :]:
            seen = {}
            for name, engine in engines.items():
                decoders.use(name)
                text = engine.preview(query, args.user, now=common.NOW).text
                seen[name] = hashlib.sha256(text.encode()).hexdigest()
            blocks["queries"] += 1
            if seen["new"] == seen["base"]:
                blocks["identical"] += 1
            else:
                blocks["differ"].append(query)
        load.append(os.getloadavg()[0])
    finally:
        for engine in engines.values():
            engine.close()
    summary = {
        name: {
            key: {
                "median": round(float(np.median([c[key] for c in made])), 3),
                "mean": round(float(np.mean([c[key] for c in made])), 3),
                "p95": round(float(np.percentile([c[key] for c in made], 95)), 3),
            }
            for key in made[0]
        }
        for name, made in calls.items()
    }
    return {
        "benchmark": "pg_rows_side", "queries": args.queries, "warmup": args.warmup,
        "seed": args.seed, "baseline": str(args.baseline), "load_1m": load,
        "machine": common.machine_info(), "trees": summary, "blocks": blocks, "calls": calls,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline tree")
    parser.add_argument("--graph-dir", type=Path, help="ENGRAIN_PG_GRAPH_DIR")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=8, help="of common.make_queries")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = measure(args)
    common.write_json(args.out, report)
    print(f"load {report['load_1m']}; blocks {report['blocks']['identical']} of "
          f"{report['blocks']['queries']} identical")  # fmt: skip
    for name, stats in report["trees"].items():
        print(name, {k: (v["median"], v["mean"], v["p95"]) for k, v in stats.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
