"""One open of a large user's SQLite store, phase by phase: process CPU (every thread), wall
time and peak resident memory of each (issue 18; docs/scale.md "Session 18 … (h11)").

    PYTHONPATH=<tree>/src python bench/open_phases.py STORE.db [--recall] [--out r.json]

Phases: the model's load, the store's open, the first ``context()``, the index job
(``wait_for_index``), ``--queries`` calls, ``bench/latency.py``'s recall against exact search
(``--recall``: a second store with the index off) and ``close()``. RSS is sampled every 50 ms
on a thread and charged to the phase running; ``vmhwm_mb`` is the process's peak. Each
block's digest (text and memories' ids) is kept, to compare two trees' answers on files with
the same history. The queries are ``bench/latency.py``'s (its default seed). Writes into the
store (saved indexes, counted uses): open a copy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import common
from latency import USER, recall_at, rss_mb, rss_peak_mb

import engrain
from engrain import Engine, Settings
from engrain.embed.minilm import MiniLMEmbedder

T = TypeVar("T")


def _warm_model() -> MiniLMEmbedder:
    """The model, loaded and run once (its first run is not the store's)."""
    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    return embedder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="the SQLite file (a copy: it is written)")
    parser.add_argument("--recall", action="store_true", help="measure R@50 as latency.py")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--out", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    pool = common.make_queries(10 + 200, seed=8)  # latency.py's pool (its seed 7 + 1)
    queries = pool[10 : 10 + args.queries]
    phase = ["start"]
    peaks: dict[str, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            now, name = rss_mb(), phase[0]
            peaks[name] = max(peaks.get(name, 0.0), now)
            time.sleep(0.05)

    out: dict[str, Any] = {"engrain": engrain.__file__, "store": str(args.store), "phases": {}}

    def run(name: str, job: Callable[[], T]) -> T:
        phase[0] = name
        cpu, wall = time.process_time(), time.perf_counter()
        result = job()
        out["phases"][name] = {"cpu_s": round(time.process_time() - cpu, 2),
                               "wall_s": round(time.perf_counter() - wall, 1)}  # fmt: skip
        return result

    threading.Thread(target=sample, daemon=True).start()
    embedder = run("model", _warm_model)
    settings = Settings(url=f"sqlite:///{args.store}", data_dir=args.store.parent)
    engine = run("open", lambda: Engine(settings=settings, embedder=embedder))
    run("first_call", lambda: engine.context(pool[0], USER, now=common.NOW))
    run("wait_index", lambda: engine.store.wait_for_index(USER))  # type: ignore[attr-defined]
    blocks = run("queries", lambda: [engine.context(q, USER, now=common.NOW) for q in queries])
    out["blocks"] = [
        hashlib.sha1((b.text + "|" + ",".join(m.id for m in b.memories)).encode()).hexdigest()
        for b in blocks
    ]
    if args.recall:
        out["recall_at_50"] = run("recall", lambda: recall_at(engine, queries, 50))
    run("close", engine.close)
    time.sleep(0.2)
    stop.set()
    for name, numbers in out["phases"].items():
        numbers["peak_rss_mb"] = round(peaks.get(name, 0.0))
    out["vmhwm_mb"] = rss_peak_mb()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
