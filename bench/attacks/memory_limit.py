"""Attack: memory runs out at a random point (``RLIMIT_AS``), session 26 (h6).

Each round's child opens the SQLite store (hash embedder, ``ENGRAIN_ANN_MIN_VECTORS=0``:
every user's approximate index is built, patched and saved; every other round
``auto_compress`` on), loads the user's working set with a ``context()``, then a timer
thread sets the process's address-space limit to what it maps now plus a random 0–24 MB,
at a random moment 0–1.5 s later, inside whatever call runs then (an ingest, an index build
or save, a compression, a read). The child makes random public calls (remember,
ingest_conversation, import of three records, forget, pin, update, compress, context,
recall, export) until 12 failed or 60 were made; every third round closes the engine under
the limit. Then the limit is lifted and the same engine must remember, import and answer.

The rules (``file_limit.py``'s, for memory): every failed call raised an ``EngrainError``
(never ``MemoryError``, never a thread's death, never an abort) and left the user's
memories as they were; the child exits 0 within 300 s; once the limit is lifted the
engine writes and answers; after each round a new engine finds every acknowledged memory
and none forgotten, ``integrity_check`` ok, no session summarised twice or half compressed.

    PYTHONPATH=src .venv/bin/python bench/attacks/memory_limit.py [--rounds 9] [--seed 26] \\
        [--json bench/results/attack-memory-limit-s26-h6.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import random
import resource
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine, private_environment
from file_limit import CALLS, FAILURES, USER, check_store, fingerprint

from engrain.errors import EngrainError

SLACK = 24 * 2**20


def address_space() -> int:
    """What this process maps now (``VmSize``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def limit_memory(limit: int) -> None:
    """This process may map no more than ``limit`` bytes: an allocation past it fails."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def lift_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def child(db: Path, seed: int, slack: int, auto: bool, close_limited: bool, out: Path) -> None:
    rng = random.Random(seed)
    faulthandler.dump_traceback_later(240, exit=True)  # a hang: every thread's stack, then out
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
    engine.context("what was opened?", USER)  # the working set and its index, loaded
    limit = address_space() + slack
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

    # the limit lands at a random point: on a timer thread, inside whatever call runs then
    timer = threading.Timer(rng.uniform(0.0, 1.5), limit_memory, (limit,))
    timer.start()
    failed = 0
    while failed < FAILURES and n < CALLS:
        live = [m.id for m in engine.list(USER, limit=None) if m.kind.value != "summary"]
        table = ops(rng.choice(live))
        name = rng.choice(list(table))
        try:
            before = fingerprint(engine)
        except EngrainError:
            before = None  # the read failed under the limit: cleanly; not compared
        except Exception as exc:
            broken.append(f"call {n} list: {type(exc).__name__}: {exc} (outside the tree)")
            before = None
        try:
            acked += table[name]()
            calls.append({"call": name, "ok": True})
        except EngrainError as exc:
            failed += 1
            calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                          "message": exc.message[:120]})  # fmt: skip
            timer.join()
            lift_limit()  # compared with room to read (and put back below)
            after = fingerprint(engine)
            limit_memory(limit)
            if before is not None and after != before:
                broken.append(f"call {n} {name} failed ({exc.message[:80]}) yet changed "
                              f"{len(set(after) ^ set(before))} memories")  # fmt: skip
        except Exception as exc:
            failed += 1
            broken.append(f"call {n} {name}: {type(exc).__name__}: {exc} (outside the tree)")
            calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                          "trace": traceback.format_exc()[-600:]})  # fmt: skip
        n += 1
        # kept as the round goes: a child that hangs (and is ended) still tells what it
        # acknowledged and forgot
        out.write_text(json.dumps({"limit": limit, "calls": calls, "acked": acked,
                                   "forgotten": forgotten, "broken": broken, "died": died,
                                   "logged": logged}))  # fmt: skip
    if close_limited:  # the derived indexes' images and stamps saved at close, limited
        try:
            engine.close()
        except Exception as exc:
            if not isinstance(exc, EngrainError):
                broken.append(f"close() under the limit: {type(exc).__name__}: {exc}")
    timer.cancel()
    timer.join()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--child", nargs=6, metavar=("DB", "SEED", "SLACK", "AUTO", "CLOSE", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        db, seed, slack, auto, close_limited, out = args.child
        child(Path(db), int(seed), int(slack), auto == "1", close_limited == "1", Path(out))
        return
    root, env = private_environment("h6-memory-limit-")
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
            broken.append(f"child exit {code}: {stderr[-4000:]}")
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
        print(f"round {n}: slack {slack >> 20} MB, {len(calls)} calls, {errors}, "
              f"broken {broken[:3]}", file=sys.stderr)  # fmt: skip
    summary = {
        "attack": "memory_limit",
        "rounds": rounds,
        "acknowledged": len(acked),
        "forgotten": len(forgotten),
        "calls": sum(r["calls"] for r in rounds),
        "failed_calls": sum(r["failed"] for r in rounds),
        "ok": not any(r["broken"] for r in rounds),
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
