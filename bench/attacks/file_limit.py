"""Attack: the disk fills at random points, by a file-size limit (``RLIMIT_FSIZE``).

Unlike ``full_disk.py`` (a tmpfs filled by a filler file, as root), this needs no mount:
each writer runs in a child process whose ``RLIMIT_FSIZE`` is set a random 0–384 KB above
the store's largest file once its engine is open, with ``SIGXFSZ`` ignored, so a write past
the limit fails with ``EFBIG`` wherever it lands: SQLite's pages, the write-ahead log and
its checkpoints into the file, the derived indexes saved into it
(``ENGRAIN_ANN_MIN_VECTORS=0``), the background compression and tier compiles (every other
round ``auto_compress`` is on), the embedding cache, and every third round ``close()``
(the indexes' images and stamps saved) before the limit is lifted.

Each round's child makes random public calls (remember, ingest_conversation, import of
three records with chosen ids, forget, pin, update, compress, context, recall, export)
until 12 of them failed or 60 were made, then lifts the limit (space returns) and must
remember, import and answer ``context()`` in the same engine, then ``close()``. Then the
CLI under a limit: ``engrain export FILE`` (over an earlier whole export), ``engrain
import`` into the store, ``engrain migrate --from`` into a new file, each again without the
limit.

The rules: every failed call raised an ``EngrainError`` (never ``sqlite3`` / ``OSError``,
never a hang: a child has 300 s), and the user's memories (ids, contents, pins,
supersessions) are as they were before it; no thread died with an uncaught exception and
the child exited 0 (background jobs log); once the limit is lifted the same engine writes
and answers; after each round a new engine finds every memory whose call returned (and
none whose forget returned), ``integrity_check`` ok, at most one summary per session and
none half compressed; a failed CLI command exits 3 with one ``error:`` line, leaves
``FILE`` the earlier export and no temporary file, the store's rows as they were, and its
re-run without the limit finishes the job.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/file_limit.py [--rounds 8] [--seed 25] \\
        [--json bench/results/attack-file-limit-s25-h4.json]
"""

from __future__ import annotations

import json
import random
import resource
import signal
import sqlite3
import subprocess
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import cli
from harness import USER, Rounds, limited_main

from engrain import Engine

SLACK = 384 * 1024


def limit_files(limit: int) -> None:
    """This process (and its children) may write no file past ``limit`` bytes; a write that
    would is ``EFBIG``, not a signal."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))


def lift_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def largest(db: Path) -> int:
    return max((p.stat().st_size for p in db.parent.glob(db.name + "*")), default=0)


class FileLimit:
    """The store's largest file plus the round's slack, set before the first call; kept
    while what a failed call left is read (a read writes no file past it)."""

    progress = False  # writing the findings is what the limit stops
    close_may_refuse = False

    def __init__(self, engine: Engine, db: Path, slack: int, rng: random.Random) -> None:
        self.limit = largest(db) + slack

    def start(self) -> None:
        limit_files(self.limit)

    def lifted(self) -> AbstractContextManager[None]:
        return nullcontext()

    def end(self) -> None:
        lift_limit()


# -- the CLI under a limit ----------------------------------------------------------------


def rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as raw:
        return raw.execute("SELECT id, content FROM memories ORDER BY id").fetchall()


def limited_cli(env: dict[str, str], limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engrain.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False,
                          preexec_fn=lambda: limit_files(limit))  # fmt: skip


def cli_checks(root: Path, db: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """``export FILE`` / ``import`` / ``migrate --from`` under a limit, then without it."""
    url = f"sqlite:///{db}"
    out: list[dict[str, Any]] = []
    target = root / "exports" / "all.jsonl"
    target.parent.mkdir(exist_ok=True)
    first = cli(env, "export", str(target), "--all-users", "--url", url)
    earlier = target.read_bytes() if first.returncode == 0 else b""
    for limit in (0, 4096, len(earlier) // 2):
        done = limited_cli(env, limit, "export", str(target), "--all-users", "--url", url)
        problems = []
        if done.returncode not in (0, 3):
            problems.append(f"exit {done.returncode}")
        if done.returncode == 3 and target.read_bytes() != earlier:
            problems.append("FILE changed by a failed export")
        lines = done.stderr.strip().splitlines()
        if done.returncode and (len(lines) != 1 or not lines[0].startswith("error:")):
            problems.append(f"stderr not one error line: {done.stderr[-200:]!r}")
        left = [p.name for p in target.parent.iterdir() if p.name != target.name]
        if left:
            problems.append(f"left beside FILE: {left}")
        out.append({"command": "export", "limit": limit, "exit": done.returncode,
                    "stderr": done.stderr.strip()[-160:], "problems": problems})  # fmt: skip
    before = rows(db)
    records = root / "more.jsonl"
    records.write_text("".join(json.dumps({"type": "remember", "user_id": USER,
                       "content": f"imported by the cli {k} " + "x " * 300})
                       + "\n" for k in range(200)))  # fmt: skip
    done = limited_cli(env, largest(db) + 8192, "import", str(records), "--url", url)
    problems = []
    if done.returncode not in (0, 3):
        problems.append(f"exit {done.returncode}: {done.stderr[-200:]}")
    if done.returncode == 3 and rows(db) != before:
        problems.append("a failed import changed the rows")
    again = cli(env, "import", str(records), "--url", url)
    if again.returncode != 0:
        problems.append(f"import without the limit: exit {again.returncode}")
    out.append({"command": "import", "exit": done.returncode, "again": again.returncode,
                "stderr": done.stderr.strip()[-160:], "problems": problems})  # fmt: skip
    copy = root / "copy.db"
    done = limited_cli(env, 64 * 1024, "migrate", "--from", url, "--url", f"sqlite:///{copy}")
    problems = []
    if done.returncode not in (0, 3):
        problems.append(f"exit {done.returncode}: {done.stderr[-200:]}")
    again = cli(env, "migrate", "--from", url, "--url", f"sqlite:///{copy}")
    if again.returncode != 0:
        problems.append(f"migrate without the limit: exit {again.returncode} {again.stderr[-200:]}")
    elif sorted(rows(copy)) != sorted(rows(db)):
        problems.append("the re-run copy differs from the source")
    out.append({"command": "migrate", "exit": done.returncode, "again": again.returncode,
                "stderr": done.stderr.strip()[-160:], "problems": problems})  # fmt: skip
    return out


def after_rounds(done: Rounds) -> tuple[dict[str, Any], bool]:
    commands = cli_checks(done.root, done.db, done.env)
    return {"cli": commands}, not any(c["problems"] for c in commands)


def main() -> None:
    limited_main(__doc__, __file__, FileLimit, attack="file_limit", prefix="h4-file-limit-",
                 rounds=8, seed=25, slack=SLACK, after=after_rounds)  # fmt: skip


if __name__ == "__main__":
    main()
