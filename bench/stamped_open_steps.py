"""What a stamped open of a large SQLite user reads, step by step (issue 18; docs/scale.md
"Session 27: the million's cold start (h6)"): each step's calling-thread CPU and wall, in
one read transaction, read-only, on a store written by ``bench/latency.py``.

    PYTHONPATH=src python bench/stamped_open_steps.py STORE.db --out r.json

Steps: the user's count, the rowids from a user index (``sqlite_load._rowids``: what a
stamp that keeps which rows have a vector reads), the scan of every row for its vector's
length (``sqlite_load._LIVE_SIZES``: what an open under a stamp without them reads), the
uses of the rows used, and each saved derived index there is read through SQLite (its
bytes), with the columns image loaded and the BM25 copy parsed (an index viewed in place);
with ``--files DIR`` each is also written to a file in ``DIR`` (``store/derived_files.py``)
and read back from there, timed. Nothing is written to the store: it is opened ``mode=ro``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from engrain.store import ann, columns, derived_blobs, derived_files, lexical_file, sqlite_load

T = TypeVar("T")
USER = "bench-user"
#: The bench stores' vectors' dimension (MiniLM).
DIM = 384


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--user", default=USER)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--files",
        type=Path,
        help="also keep each derived index in a file "
        "in this directory (store/derived_files.py) and time reading it back",
    )
    args = parser.parse_args()
    db = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True, isolation_level=None)
    steps: dict[str, dict[str, float]] = {}

    def step(name: str, run: Callable[[], T]) -> T:
        cpu, wall = time.thread_time(), time.perf_counter()
        out = run()
        steps[name] = {"cpu_s": round(time.thread_time() - cpu, 3),
                       "wall_s": round(time.perf_counter() - wall, 3)}  # fmt: skip
        print(f"  {name}: {steps[name]}", file=sys.stderr, flush=True)
        return out

    user = args.user
    load = os.getloadavg()[0]
    db.execute("BEGIN")
    count = step("count", lambda: db.execute(
        "SELECT count(*) FROM memories WHERE user_id = ?", (user,)).fetchall()[0][0])  # fmt: skip
    rowids = step("rowids_from_user_index", lambda: sqlite_load._rowids(db, user))

    def lengths() -> int:
        read = 0
        for part in sqlite_load._ranges(rowids.tolist()):
            read += len(db.execute(sqlite_load._LIVE_SIZES, (*part, user)).fetchall())
        return read

    step("lengths_scan_of_every_row", lengths)
    step("uses_of_rows_used", lambda: sqlite_load._uses(db, user, rowids))
    revision = db.execute("SELECT revision FROM revisions WHERE user_id = ?", (user,)).fetchall()
    names = tuple(r[0] for r in db.execute("SELECT name FROM migrations ORDER BY name"))
    kinds = [k for (k,) in db.execute("SELECT kind FROM derived_indexes WHERE user_id = ? "
                                      "AND kind NOT LIKE '%#%'", (user,))]  # fmt: skip
    sizes: dict[str, int] = {}
    for kind in kinds:
        data = step(f"read_{kind}", lambda kind=kind: derived_blobs.read(db, user, kind))
        sizes[kind] = 0 if data is None else len(data)
        if args.files is not None and data is not None:
            kept = derived_files.write(args.files, user, kind, data)
            assert kept is not None
            del data  # read back from the file instead (its length and CRC-32 checked)
            data = step(f"file_{kind}", lambda kind=kind, kept=kept: derived_files.read(
                args.files, user, kind, kept))  # fmt: skip
            assert data is not None
        if kind in ("usearch", "usearch-learnings") and data is not None:
            step(f"viewed_{kind}", lambda data=data: ann.VectorIndex.viewed(memoryview(data), DIM))
        if kind == "columns" and data is not None:
            stamp = columns.Stamp(int(revision[0][0]) if revision else 0, names)
            step("columns_load", lambda data=data, stamp=stamp: columns.load(data, stamp, user))
        if kind == "bm25":
            step("bm25_parsed", lambda data=data: lexical_file.parsed(data))
        del data
    db.execute("COMMIT")
    report: dict[str, Any] = {"store": str(args.store), "memories": count, "load_1m": load,
                              "bytes": sizes, "steps": steps}  # fmt: skip
    print(json.dumps(report, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
