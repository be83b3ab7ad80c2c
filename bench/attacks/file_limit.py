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

import argparse
import json
import logging
import random
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import cli, finish, hash_engine, private_environment

from engrain.errors import EngrainError

USER = "ada"
FAILURES = 12
CALLS = 60
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


def fingerprint(engine: Any) -> list[tuple[Any, ...]]:
    """The user's memories as a call must leave them when it fails (summaries and the
    compressed flag left out: a background compression may write them meanwhile)."""
    return sorted(
        (m.id, m.content, m.pinned, m.superseded_by)
        for m in engine.list(USER, limit=None)
        if m.kind.value != "summary"
    )


# -- the child ------------------------------------------------------------------------------


def child(db: Path, seed: int, slack: int, auto: bool, close_limited: bool, out: Path) -> None:
    rng = random.Random(seed)
    died: list[str] = []
    threading.excepthook = lambda a: died.append(f"{a.thread.name if a.thread else '?'}: "
                                                 f"{a.exc_type.__name__}")  # fmt: skip
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage()[:160])

    logging.getLogger("engrain").addHandler(Keep())
    engine = hash_engine(db, auto_compress=auto, compression_threshold=2)
    engine.remember(f"round {seed} opened the store", USER)
    limit = largest(db) + slack
    acked: list[str] = []
    forgotten: list[str] = []
    calls: list[dict[str, Any]] = []
    broken: list[str] = []
    n = 0

    def words(k: int, letter: str) -> str:
        return " ".join(f"{letter}{rng.randrange(10**6)}" for _ in range(k))

    def imported(prefix: str) -> list[str]:
        ids = [m.id for m in engine.list(USER, limit=None) if m.content.startswith(prefix)]
        if len(ids) != 3:
            broken.append(f"import {prefix} returned, {len(ids)} of 3 stored")
        return ids

    def ops(pick: str) -> dict[str, Callable[[], list[str]]]:
        tag = f"r{seed}c{n}"
        text = f"{tag} " + words(rng.randrange(5, 400), "w")
        turns = [{"speaker": "user" if i % 2 == 0 else "assistant",
                  "text": f"{tag}t{i} " + words(40, "v")}
                 for i in range(rng.randrange(2, 14))]  # fmt: skip
        records = [{"type": "remember", "user_id": USER,
                    "content": f"{tag}i{k} " + words(rng.randrange(5, 200), "u")}
                   for k in range(3)]  # fmt: skip

        def forget() -> list[str]:
            engine.forget([pick], USER)
            forgotten.append(pick)
            return []

        return {
            "remember": lambda: [engine.remember(text, USER).memory_id or ""],
            "conversation": lambda: [
                o.memory_id
                for o in engine.ingest_conversation(turns, USER, session_id=tag).outcomes
                if o.memory_id
            ],
            "import": lambda: (engine.import_records(records), imported(f"{tag}i"))[1],
            "forget": forget,
            "pin": lambda: (engine.pin(pick, USER), [])[1],
            "update": lambda: (engine.update(pick, USER, content=f"{tag} edited"), [])[1],
            "compress": lambda: (engine.compress(USER, force=True), [])[1],
            "context": lambda: (engine.context(f"what about {tag}?", USER), [])[1],
            "recall": lambda: (engine.recall(f"w{rng.randrange(10**6)}", USER), [])[1],
            "export": lambda: (list(engine.export_records(USER)), [])[1],
        }

    limit_files(limit)
    failed = 0
    while failed < FAILURES and n < CALLS:
        live = [m.id for m in engine.list(USER, limit=None) if m.kind.value != "summary"]
        table = ops(rng.choice(live))
        name = rng.choice(list(table))
        before = fingerprint(engine)
        try:
            acked += table[name]()
            calls.append({"call": name, "ok": True})
        except EngrainError as exc:
            failed += 1
            calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                          "message": exc.message[:120]})  # fmt: skip
            after = fingerprint(engine)
            if after != before:
                broken.append(f"call {n} {name} failed ({exc.message[:80]}) yet changed "
                              f"{len(set(after) ^ set(before))} memories")  # fmt: skip
        except Exception as exc:
            failed += 1
            broken.append(f"call {n} {name}: {type(exc).__name__}: {exc} (outside the tree)")
            calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                          "trace": traceback.format_exc()[-600:]})  # fmt: skip
        n += 1
    if close_limited:  # the derived indexes' images and stamps saved at close, limited
        try:
            engine.close()
        except Exception as exc:
            broken.append(f"close() under the limit: {type(exc).__name__}: {exc}")
    lift_limit()
    after_space: dict[str, Any] = {}
    if close_limited:
        engine = hash_engine(db, auto_compress=auto, compression_threshold=2)
    try:
        after_space["remember"] = engine.remember(f"round {seed} space returned", USER).memory_id
        acked.append(after_space["remember"] or "")
        engine.import_records([{"type": "remember", "user_id": USER,
                                "content": f"r{seed}back{k} " + words(30, "z")}
                               for k in range(3)])  # fmt: skip
        acked += imported(f"r{seed}back")
        text = engine.context(f"round {seed} space returned?", USER).text
        after_space["context_has_it"] = "space returned" in text
        if not after_space["context_has_it"]:
            broken.append("context() after the limit was lifted misses the new memory")
    except Exception as exc:
        broken.append(f"after the limit was lifted: {type(exc).__name__}: {exc}")
    engine.close()
    out.write_text(json.dumps({
        "limit": limit, "calls": calls, "acked": acked, "forgotten": forgotten,
        "broken": broken, "died": died, "logged": logged, "after_space": after_space,
    }))  # fmt: skip


# -- the parent -----------------------------------------------------------------------------


def check_store(db: Path, acked: set[str], forgotten: set[str]) -> list[str]:
    broken: list[str] = []
    with sqlite3.connect(db) as raw:
        check = raw.execute("PRAGMA integrity_check").fetchone()[0]
    if check != "ok":
        broken.append(f"integrity_check: {check}")
    with hash_engine(db) as e:
        everything = e.list(USER, limit=None)
        ids = {m.id for m in everything}
        lost = acked - forgotten - ids
        if lost:
            broken.append(f"{len(lost)} acknowledged memories missing: {sorted(lost)[:5]}")
        back = forgotten & ids
        if back:
            broken.append(f"{len(back)} forgotten memories stored: {sorted(back)[:5]}")
        per_session: dict[str, int] = {}
        flags: dict[str, set[bool]] = {}
        for m in everything:
            if m.kind.value == "summary":
                key = m.source_session_id or ""
                per_session[key] = per_session.get(key, 0) + 1
            elif m.session_id:
                flags.setdefault(m.session_id, set()).add(m.compressed)
        broken += [f"session {k}: {v} summaries" for k, v in per_session.items() if v > 1]
        broken += [f"session {k}: half compressed" for k, v in flags.items() if len(v) > 1]
    return broken


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--child", nargs=6, metavar=("DB", "SEED", "SLACK", "AUTO", "CLOSE", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        db, seed, slack, auto, close_limited, out = args.child
        child(Path(db), int(seed), int(slack), auto == "1", close_limited == "1", Path(out))
        return
    root, env = private_environment("h4-file-limit-")
    db = root / "store.db"
    rng = random.Random(args.seed)
    acked: set[str] = set()
    forgotten: set[str] = set()
    rounds: list[dict[str, Any]] = []
    for n in range(args.rounds):
        out = root / f"round{n}.json"
        slack = rng.randrange(0, SLACK)
        auto = n % 2 == 1
        try:
            done = subprocess.run([sys.executable, __file__, "--child", str(db),
                                   str(args.seed * 100 + n), str(slack), "1" if auto else "0",
                                   "1" if n % 3 == 2 else "0", str(out)], env=env,
                                  capture_output=True, text=True, timeout=300,
                                  check=False)  # fmt: skip
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code, stderr = None, "hung for 300 s"
        result = json.loads(out.read_text()) if out.exists() else {}
        broken = list(result.get("broken", []))
        if code != 0:
            broken.append(f"child exit {code}: {stderr[-400:]}")
        broken += [f"thread died: {d}" for d in result.get("died", [])]
        acked |= set(result.get("acked", []))
        forgotten |= set(result.get("forgotten", []))
        broken += check_store(db, acked, forgotten)
        calls = result.get("calls", [])
        errors: dict[str, int] = {}
        for c in calls:
            if not c["ok"]:
                errors[c["error"]] = errors.get(c["error"], 0) + 1
        messages = sorted({c.get("message", "") for c in calls if not c["ok"]})
        logged = result.get("logged", [])
        rounds.append({"round": n, "slack": slack, "auto_compress": auto,
                       "closed_under_the_limit": n % 3 == 2, "calls": len(calls),
                       "failed": sum(not c["ok"] for c in calls), "errors": errors,
                       "messages": messages[:6], "logged": sorted(set(logged))[:6],
                       "logged_count": len(logged), "broken": broken})  # fmt: skip
        print(f"round {n}: slack {slack}, {len(calls)} calls, {errors}, broken {len(broken)}",
              file=sys.stderr)  # fmt: skip
    commands = cli_checks(root, db, env)
    summary = {
        "attack": "file_limit",
        "rounds": rounds,
        "acknowledged": len(acked),
        "forgotten": len(forgotten),
        "calls": sum(r["calls"] for r in rounds),
        "failed_calls": sum(r["failed"] for r in rounds),
        "cli": commands,
        "ok": not any(r["broken"] for r in rounds) and not any(c["problems"] for c in commands),
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
