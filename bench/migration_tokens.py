"""What SQLite migration 007 (``content_tokens``, issue 18) costs on a file written before it.

    python bench/migration_tokens.py --db /tmp/h3-stores/latency-100000-s7-vectors-….db \
        --workdir /tmp/me --out bench/results/migration-007-100k-s16-h3.json

The file (at 006) is copied (SQLite's backup) into ``--workdir``. The fill alone runs first
inside a transaction that is rolled back (``sqlite_tokens.migrate``: the column added and
every row counted and rewritten), then the store is opened, which applies 007 and commits
it. Each is reported in wall seconds and the calling thread's CPU seconds, with the rows
left without a count afterwards (0).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import common

from engrain.store import sqlite_tokens
from engrain.store.sqlite import SQLiteStore


def measure(db: Path, workdir: Path) -> dict[str, Any]:
    """Both timings on a copy of ``db`` (deleted afterwards)."""
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / f"migration-{db.name}"
    with sqlite3.connect(db) as source, sqlite3.connect(copy) as target:
        source.backup(target, pages=65_536)
    raw = sqlite3.connect(copy, isolation_level=None)
    rows = raw.execute("SELECT count(*) FROM memories").fetchall()[0][0]
    load = os.getloadavg()[0]
    raw.execute("BEGIN IMMEDIATE")
    wall, cpu = time.perf_counter(), time.thread_time()
    sqlite_tokens.migrate(raw)
    fill = {"wall_s": round(time.perf_counter() - wall, 2),
            "thread_cpu_s": round(time.thread_time() - cpu, 2)}  # fmt: skip
    raw.execute("ROLLBACK")
    raw.close()
    wall, cpu = time.perf_counter(), time.thread_time()
    store = SQLiteStore(copy, ann_min_vectors=None)
    opened = {"wall_s": round(time.perf_counter() - wall, 2),
              "thread_cpu_s": round(time.thread_time() - cpu, 2)}  # fmt: skip
    missing = store._read("SELECT count(*) FROM memories WHERE content_tokens IS NULL")[0][0]
    store.close()
    for path in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
        path.unlink(missing_ok=True)
    return {"db": str(db), "rows": rows, "fill_rolled_back": fill,
            "open_with_migration": opened, "rows_without_count": missing,
            "load_1m": [load, os.getloadavg()[0]], "machine": common.machine_info()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a SQLite file at migration 006")
    parser.add_argument("--workdir", type=Path, required=True, help="where the copy is made")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = measure(args.db, args.workdir)
    print(f"{report['rows']:,} rows: fill {report['fill_rolled_back']}, "
          f"open with the migration {report['open_with_migration']}, "
          f"rows without a count {report['rows_without_count']}")  # fmt: skip
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
