"""What a ``context()``'s counted uses cost in SQL on SQLite: the statement and the commit,
the former ``id IN (…)`` list against one prepared ``UPDATE`` per id (issue 18, session 18).

    python bench/uses_sql.py --db /tmp/me/copy-of-latency-100000.db \
        --out bench/results/uses-sql-100k-s18-h2.json

Writes to ``--db`` (a copy: never a shared cache file). Each round draws a call's number of
ids (~18, an ordinary call, or ~85, a 7,500-token one), then runs each way once in a shuffled
order, each in its own ``BEGIN IMMEDIATE`` … ``COMMIT`` on distinct random memories of the
user, with the store's pragmas (WAL, ``synchronous=NORMAL``, checkpoints every ten rounds as
a checkpointer thread would). Reports thread CPU medians of the statement and of the commit.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from engrain.store import sqlite_uses

AT = "2026-11-27T10:00:00+00:00"


def ways(db: sqlite3.Connection, user: str) -> dict[str, Callable[[list[str]], None]]:
    """Each way of counting one use of each id."""

    def in_list(part: list[str]) -> None:  # until session 18
        db.execute(
            "UPDATE uses SET access_count = access_count + ?, last_accessed_at = ? "
            f"WHERE user_id = ? AND id IN ({', '.join('?' for _ in part)})",
            (1, AT, user, *part),
        )

    def per_id(part: list[str]) -> None:  # sqlite_uses.count
        sqlite_uses.count(db, user, Counter(part), AT)

    return {"in-list": in_list, "per-id": per_id}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a copy of a latency.py file")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    db = sqlite3.connect(args.db, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    user = db.execute("SELECT user_id FROM uses LIMIT 1").fetchone()[0]
    ids = [r[0] for r in db.execute("SELECT id FROM uses WHERE user_id = ?", (user,))]
    rng = random.Random(args.seed)
    counting = ways(db, user)
    spent: dict[str, dict[str, list[float]]] = {}
    clock = time.thread_time_ns
    for done in range(args.rounds):
        k = rng.choice([17, 17, 20, 80, 84, 90])
        size = "~85 ids" if k > 50 else "~18 ids"
        names = list(counting)
        rng.shuffle(names)
        for name in names:
            part = rng.sample(ids, k)
            db.execute("BEGIN IMMEDIATE")
            begun = clock()
            counting[name](part)
            counted = clock()
            db.execute("COMMIT")
            committed = clock()
            got = spent.setdefault(f"{name}, {size}", {"statement": [], "commit": []})
            got["statement"].append((counted - begun) / 1e6)
            got["commit"].append((committed - counted) / 1e6)
        if done % 10 == 9:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    report = {
        key: {part: round(statistics.median(v), 3) for part, v in got.items()} | {
            "n": len(got["statement"])}
        for key, got in sorted(spent.items())
    }  # fmt: skip
    for key, row in report.items():
        print(f"{key:20s} statement {row['statement']:.3f} ms  commit {row['commit']:.3f} ms"
              f"  (n={row['n']})")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"db": str(args.db), "rounds": args.rounds,
                                        "thread_cpu_ms_p50": report}, indent=2) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
