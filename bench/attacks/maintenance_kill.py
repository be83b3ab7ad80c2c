"""Attack: ``kill -9`` in maintenance paths the shared ``crash_safety.py`` does not cover:
the derived indexes saved as an engine closes, resolutions and corrections of reviewed
pairs, and ``engrain export FILE``.

Each round starts a child on one SQLite file (hash embedder, ``ENGRAIN_ANN_MIN_VECTORS=0``
so a small user's approximate index is built and saved too) and kills it with SIGKILL
after a random 0.3–3 s of work:

- ``close``: open an engine, remember 40 facts, ``recall`` and ``context()`` (the BM25
  and approximate indexes built), ``close()`` (their images saved), again and again;
- ``resolve``: remember pairs of facts, then resolve each (keep / correct / both in turn)
  or correct one with ``remember(…, corrects=)``;
- ``export``: ``engrain export FILE --all-users`` over an earlier whole export of
  ``FILE``, killed 0–50 ms after its temporary file appears.

The delays count from the child's engine being open (its ``ready`` line), not from its
start: on a loaded machine the imports alone take seconds.

The child notes each call that returned (``ack`` lines, flushed). After each kill:
``integrity_check`` ok; every memory whose ``remember`` returned is stored once, except
those a returned resolution forgot (or the one the resolution a kill interrupted may
have forgotten); no memory is superseded by one that does not exist
and no conflict flag names a missing memory (no half-resolved pair); ``FILE`` is the
earlier export or a whole new one (every line JSON, as many as the store's records);
then a new engine opens the file, answers ``context()`` and writes. The temporary files an
export leaves beside ``FILE`` are counted (not a failure: see docs/reliability.md).

Prints a JSON summary; exits 0 only when every round held.

    PYTHONPATH=src .venv/bin/python bench/attacks/maintenance_kill.py [--rounds 4] \
        [--json bench/results/attack-maintenance-kill-s24-h2.json]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import cli, finish, next_process, private_environment

USER = "kim"
CHILD = """
import sys, uuid, warnings
warnings.simplefilter("ignore")
from engrain import Engine
from engrain.config import Settings
mode, db, log = sys.argv[1], sys.argv[2], sys.argv[3]
out = open(log, "a", buffering=1)
def ack(*words):
    out.write(" ".join(words) + "\\n"); out.flush()
def engine():
    return Engine(settings=Settings(data_dir=str(__import__("pathlib").Path(db).parent),
                                    url=f"sqlite:///{db}", embedder="hash"))
e = engine()
ack("ready", "-")
for n in range(100000):
    w = uuid.uuid4().hex[:8]
    if mode == "close":
        for i in range(40):
            ack("stored", e.remember(f"crate {w}{i} went to dock {i} of yard {w}", "kim").memory_id)
        e.recall(f"yard {w}", "kim")
        e.context(f"which dock got crate {w}3?", "kim")
        e.close()
        e = engine()
    else:
        x = e.remember(f"alpha {w}: the standup starts at nine", "kim").memory_id
        ack("stored", x)
        y = e.remember(f"beta {w}: lunch is in the blue room", "kim").memory_id
        ack("stored", y)
        how = ("keep", "correct", "both", "corrects")[n % 4]
        if how == "corrects":
            ack("stored", e.remember(f"gamma {w}: the standup moved to ten", "kim",
                                     corrects=x).memory_id)
        else:
            ack("pending", y)  # a keep may forget it: the kill may land after its commit
            done = e.resolve(x, y, "kim", how)
            for gone in done.forgotten:
                ack("forgotten", gone)
            ack("settled", y)
"""


def check_store(db: Path, log: Path) -> dict[str, Any]:
    """What a killed child left: acknowledged memories, dangling links, integrity."""
    stored, forgotten, pending = set(), set(), set()
    for line in log.read_text().splitlines() if log.exists() else []:
        what, _, memory_id = line.partition(" ")
        if what in ("stored", "forgotten"):
            (stored if what == "stored" else forgotten).add(memory_id)
        elif what == "pending":
            pending.add(memory_id)
        elif what == "settled":
            pending.discard(memory_id)
    forgotten |= pending  # the resolution a kill interrupted: committed or not
    con = sqlite3.connect(db)
    rows = {i: (sup, json.loads(prov or "{}").get("metadata") or {}) for i, sup, prov in
            con.execute("SELECT id, superseded_by, provenance FROM memories WHERE user_id = ?",
                        (USER,))}  # fmt: skip
    integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
    con.close()
    lost = sorted(stored - forgotten - set(rows))
    dangling = sorted(i for i, (sup, _) in rows.items() if sup is not None and sup not in rows)
    flags = sorted(i for i, (_, meta) in rows.items()
                   if any(o not in rows for o in meta.get("conflicts_with") or ()))  # fmt: skip
    return {"acknowledged": len(stored), "rows": len(rows), "lost": lost[:5],
            "superseded_by_missing": dangling[:5], "flags_naming_missing": flags[:5],
            "integrity": integrity}  # fmt: skip


def kill_after(args: list[str], env: dict[str, str], started: Any, seconds: float) -> int | None:
    """Run ``args``; once ``started()`` is true (polled every 5 ms), SIGKILL it after
    ``seconds`` unless it ended. Its exit code, or None when killed."""
    child = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not started() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        return child.wait(seconds)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        return None


def _temporary(root: Path) -> set[str]:
    """The export's temporary files in ``root``."""
    return {p.name for p in root.iterdir() if p.name.startswith(".export.jsonl.")}


def _readies(log: Path) -> int:
    return log.read_text().count("ready -") if log.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root, env = private_environment("maintenance-kill-")
    results: list[dict[str, Any]] = []
    for mode in ("close", "resolve"):
        db, log = root / f"{mode}.db", root / f"{mode}.log"
        for r in range(args.rounds):
            delay = rng.uniform(0.3, 3.0)  # after the child's engine opened
            before = _readies(log)
            code = kill_after([sys.executable, "-c", CHILD, mode, str(db), str(log)], env,
                              lambda log=log, n=before: _readies(log) > n, delay)  # fmt: skip
            found = check_store(db, log)
            ok = (not found["lost"] and not found["superseded_by_missing"]
                  and not found["flags_naming_missing"] and found["integrity"] == "ok")  # fmt: skip
            results.append({"mode": mode, "round": r, "delay_s": round(delay, 2),
                            "killed": code is None, **found, "ok": ok})  # fmt: skip
        opens, err = next_process(db, USER, env)
        results.append({"mode": mode, "reopened_writes_and_answers": opens, "error": err,
                        "ok": opens})  # fmt: skip
    # export: a whole earlier export of FILE, then exports killed midway
    db = root / "close.db"
    target = root / "export.jsonl"
    store_env = {**env, "ENGRAIN_URL": f"sqlite:///{db}"}
    first = cli(store_env, "export", str(target), "--all-users")
    whole = target.read_bytes() if first.returncode == 0 else b""
    records = len(whole.splitlines())
    for r in range(args.rounds):
        delay = rng.uniform(0.0, 0.05)  # once its temporary file exists: mid-write

        stale = _temporary(root)

        def writing(stale: set[str] = stale) -> bool:
            return bool(_temporary(root) - stale)  # a temporary file of this export

        code = kill_after([sys.executable, "-m", "engrain.cli", "export", str(target),
                           "--all-users"], store_env, writing, delay)  # fmt: skip
        now = target.read_bytes() if target.exists() else b""
        lines = now.splitlines()
        parsed = all(_is_json(line) for line in lines)
        leftovers = _temporary(root)
        ok = now == whole or (parsed and len(lines) == records)
        results.append({"mode": "export", "round": r, "delay_s": round(delay, 2),
                        "killed": code is None, "file_is_earlier_export": now == whole,
                        "file_lines": len(lines), "records": records,
                        "temporary_files_left": len(leftovers), "ok": ok})  # fmt: skip
    summary = {"attack": "maintenance_kill", "rounds": args.rounds, "results": results,
               "kills": sum(bool(r.get("killed")) for r in results),
               "broken": sum(not r["ok"] for r in results),
               "ok": first.returncode == 0 and all(r["ok"] for r in results)}  # fmt: skip
    finish(summary, args.json)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    main()
