"""Which commits of a ``synchronous=NORMAL`` connection sync the disk: the first one after a
checkpoint restarted the write-ahead log (issue 18, docs/scale.md, session 23, h9).

    python bench/wal_header_sync.py --out bench/results/wal-header-sync-s23-h9.json

The store's lazy commits (a ``context()``'s counted uses) run at ``synchronous=NORMAL``,
which syncs nothing at a commit, except that the first commit writing to a log a checkpoint
has restarted writes the log's header and ``fdatasync``s it (SQLite's WAL header sync). The
checkpointer (``store/checkpoint.py``) restarts the log after every pass, so each pass puts
one disk sync on some later caller's commit. This runs the same steps as the store (a
writer with ``wal_autocheckpoint=0``, a second connection's ``RESTART``) under
``strace -f -e trace=fsync,fdatasync`` and counts the syncs between markers written to
stderr: commits appending to the log, the restart, the commits after it. Then the same with
the store itself (``SQLiteStore`` and its checkpointer, a ``context()``'s lazy commits),
without and with the log begun on the checkpointer's thread after its restart (session
24): with it, the calling thread's first commit after a restart syncs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

COMMITS = 3


def _mark(label: str) -> None:
    os.write(2, f"=== {label}\n".encode())  # one write(2, ...) line in the trace


def probe(workdir: Path) -> None:
    """The steps, in this process (traced by :func:`main`)."""
    path = workdir / "w.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("PRAGMA synchronous=NORMAL")
    writer.execute("CREATE TABLE t (b BLOB)")
    checkpointer = sqlite3.connect(path, isolation_level=None, timeout=0.0)
    for i in range(COMMITS):
        _mark(f"appending commit {i + 1}")
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
    _mark("restart")
    checkpointer.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
    for i in range(COMMITS):
        _mark(f"commit {i + 1} after the restart")
        writer.execute("INSERT INTO t VALUES (randomblob(3000))")
    _mark("closing")
    writer.close()
    checkpointer.close()
    for begin in (False, True):
        _store_steps(workdir / f"s{int(begin)}.db", begin)
    _mark("end")


def _store_steps(path: Path, begin: bool) -> None:
    """The store's own steps: a ``context()``'s record committed (lazy, as its counted
    uses), the checkpointer's pass and restart, and, with ``begin``, the log begun on its
    thread (``store/checkpoint.py``); then three such commits, the checkpointer idle (its
    next pass an hour away), so their syncs are the calling thread's own."""
    from datetime import UTC, datetime

    from engrain.store.base import State
    from engrain.store.checkpoint import Checkpointer
    from engrain.store.sqlite import SQLiteStore

    now = datetime.now(UTC)
    label = "store, log begun" if begin else "store, log not begun"
    _mark(f"{label}: opening")
    store = SQLiteStore(path)
    try:
        store._checkpoints.close()
        store._checkpoints = Checkpointer(
            path, interval=3600.0, on_restart=store._begin_log if begin else None
        )
        _mark(f"{label}: a commit, the pass, the restart")
        store.record_uses("u", [], now, [State("u", "contexts", "c0", {"ids": []})])
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and (
            store._checkpoints.restarts < 1 or (begin and store._checkpoints.begun < 1)
        ):
            time.sleep(0.01)
        for i in range(COMMITS):
            _mark(f"{label}: commit {i + 1} after the restart")
            state = [State("u", "contexts", f"c{i + 1}", {"ids": []})]
            store.record_uses("u", [], now, state)
        _mark(f"{label}: closing")
    finally:
        store.close()


def count(trace: str) -> dict[str, int]:
    """Syncs (``fsync``/``fdatasync`` calls) between each marker and the next."""
    syncs: dict[str, int] = {}
    label = None
    for line in trace.splitlines():
        if "=== " in line and "write(2" in line:
            label = line.split("=== ", 1)[1].split("\\n", 1)[0]
            syncs[label] = 0
        elif label is not None and ("fdatasync(" in line or "fsync(" in line):
            syncs[label] += 1
    syncs.pop("end", None)
    return syncs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        probe(args.probe)
        return 0
    strace = shutil.which("strace")
    if strace is None:
        parser.error("strace is needed")
    with tempfile.TemporaryDirectory() as workdir:
        done = subprocess.run(
            [strace, "-f", "-s", "200", "-e", "trace=fsync,fdatasync,write", "-e", "signal=none",
             sys.executable, __file__, "--probe", workdir],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    syncs = count(done.stderr)
    for label, n in syncs.items():
        print(f"{label:<60} {n} sync(s)")
    report = {"sqlite": sqlite3.sqlite_version, "syncs": syncs}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
