"""Attack: several compressions of one user at once (processes on one SQLite file, or
threads sharing one engine), each after the same sessions.

Each trial ingests ``--sessions`` conversations, then starts ``--racers`` callers that wait
on one event and call ``compress(force=True)`` together (an explicit call racing another
process's, or the background job after an ingest). Checked per trial: every session has
at most one summary, every original memory is kept, ``PRAGMA integrity_check`` is ok, no
call failed. Before session 17 (h8) two processes summarised one session twice.

Prints a JSON summary; exits 0 only when no session got two summaries and nothing failed.

    PYTHONPATH=src .venv/bin/python bench/attacks/compress_race.py --trials 6 [--threads]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine

from engrain import Engine


def engine(db: Path) -> Engine:
    return hash_engine(db)


def racer(db: Path, ready: Any, go: Any, out: Any) -> None:
    with engine(db) as e:
        e.list("u", limit=1)  # the working set loaded before the start
        ready.put(True)
        go.wait()
        try:
            out.put(list(e.compress("u", force=True).sessions))
        except Exception as exc:
            out.put(f"{type(exc).__name__}: {exc}")


def trial(work: Path, sessions: int, racers: int, threads: bool) -> dict[str, Any]:
    db = work / "e.db"
    with engine(db) as e:
        for s in range(sessions):
            e.ingest_conversation(
                [{"speaker": "u", "text": f"In session {s} my dog Rex{s} moved to Paris."},
                 {"speaker": "b", "text": f"Noted: Rex{s} lives in Paris now."}],
                "u", session_id=f"s{s}")  # fmt: skip
        e.wait()
        originals = len(e.list("u", limit=None))
        if threads:
            results: list[Any] = []
            go = threading.Event()

            def call() -> None:
                go.wait()
                try:
                    results.append(list(e.compress("u", force=True).sessions))
                except Exception as exc:
                    results.append(f"{type(exc).__name__}: {exc}")

            workers = [threading.Thread(target=call) for _ in range(racers)]
            for w in workers:
                w.start()
            go.set()
            for w in workers:
                w.join()
    if not threads:
        ctx = mp.get_context("spawn")
        pgo, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
        procs = [ctx.Process(target=racer, args=(db, ready, pgo, out)) for _ in range(racers)]
        for p in procs:
            p.start()
        for _ in procs:  # every racer has opened the store and loaded the user
            ready.get(timeout=300)
        pgo.set()
        results = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join()
    with sqlite3.connect(db) as conn:
        per_session = conn.execute(
            "SELECT source_session_id, count(*) FROM memories WHERE compression_source = 1 "
            "GROUP BY source_session_id"
        ).fetchall()
        kept = conn.execute("SELECT count(*) FROM memories WHERE compression_source = 0").fetchone()
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    for f in work.glob("e.db*"):
        f.unlink()
    return {"results": results, "summaries": dict(per_session), "originals": originals,
            "kept": kept[0], "integrity": integrity}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--racers", type=int, default=2)
    parser.add_argument("--threads", action="store_true", help="threads sharing one engine")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="h8-compress-race-"))
    trials = [trial(work, args.sessions, args.racers, args.threads) for _ in range(args.trials)]
    shutil.rmtree(work, ignore_errors=True)
    doubled = sum(c - 1 for t in trials for c in t["summaries"].values() if c > 1)
    failed = [r for t in trials for r in t["results"] if isinstance(r, str)]
    lost = sum(t["originals"] - t["kept"] for t in trials)
    bad = sum(t["integrity"] != "ok" for t in trials)
    summary = {"attack": "compress_race", "mode": "threads" if args.threads else "processes",
               "trials": len(trials), "racers": args.racers, "duplicate_summaries": doubled,
               "failed_calls": failed[:10], "originals_lost": lost, "integrity_failures": bad,
               "per_trial": trials}  # fmt: skip
    summary["ok"] = not (doubled or failed or lost or bad)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
