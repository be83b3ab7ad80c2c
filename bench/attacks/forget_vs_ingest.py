"""Attack: one process forgets while another ingests (conversations, texts and remembered
facts that are near-duplicates of what is being forgotten), on one SQLite file.

The writer process ingests for ``--seconds`` and logs every outcome (stored / merged id);
the forgetter process lists the user's memories and forgets random ones, logging the ids
each forget reported. Both restate the same few facts, so merges into a memory being
forgotten happen often. Checked afterwards, on a fresh engine:

* a forgotten id never comes back (no row, not in ``list``, ``recall`` or ``context``);
* every stored id the writer reported either exists or was forgotten afterwards;
* a merge the writer reported into a memory whose forget had returned before the ingest
  call began is lost content (``merged_into_forgotten``: the report says "merged" but the
  row it names was already gone, so the new text is nowhere);
* no call failed with anything but ``EngrainError``, ``PRAGMA integrity_check`` is ok.

Prints a JSON summary; exits 0 only when nothing was lost and no call failed.

    PYTHONPATH=src .venv/bin/python bench/attacks/forget_vs_ingest.py --seconds 30
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine

from engrain import Engine
from engrain.errors import EngrainError

USER = "ada"
FACTS = ["Ada's sister Mia lives in Oslo", "Ada drinks green tea every morning",
         "The team deploys on Fridays at noon", "Ada's cat Pixel hates rain",
         "The billing service is written in Rust"]  # fmt: skip


def engine(db: Path) -> Engine:
    return hash_engine(db)


def writer(db: Path, seconds: float, seed: int, log: Path) -> None:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    with engine(db) as e:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            fact = rng.choice(FACTS)
            started = time.time()
            try:
                way = n % 3
                if way == 0:
                    report = e.ingest_conversation(
                        [{"speaker": "ada", "text": f"{fact}. Also note {n}."},
                         {"speaker": "bot", "text": f"Noted: {fact.lower()}."}],
                        USER, session_id=f"s{n}")  # fmt: skip
                    outcomes = report.outcomes
                elif way == 1:
                    outcomes = e.ingest(f"{fact}, as I said before ({n}).", USER).outcomes
                else:
                    outcomes = (e.remember(fact, USER, "fact"),)
                for o in outcomes:
                    if o.memory_id:
                        events.append({"t": started, "action": o.action, "id": o.memory_id})
            except EngrainError as exc:
                events.append({"t": time.time(), "error": f"{type(exc).__name__}: {exc}"})
            except Exception as exc:
                events.append({"t": time.time(), "crash": f"{type(exc).__name__}: {exc}"})
        e.wait()
    log.write_text(json.dumps(events))


def forgetter(db: Path, seconds: float, seed: int, log: Path) -> None:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    with engine(db) as e:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                ids = [m.id for m in e.list(USER, limit=None)]
                if ids:
                    chosen = rng.sample(ids, k=max(1, len(ids) // 3))
                    gone = e.forget(chosen, USER)
                    events.append({"t": time.time(), "forgot": chosen, "count": gone})
            except EngrainError as exc:
                events.append({"t": time.time(), "error": f"{type(exc).__name__}: {exc}"})
            except Exception as exc:
                events.append({"t": time.time(), "crash": f"{type(exc).__name__}: {exc}"})
            time.sleep(rng.uniform(0, 0.05))
    log.write_text(json.dumps(events))


def attack(seconds: float, seed: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="h8-forget-ingest-"))
    db = work / "e.db"
    with engine(db) as e:
        for fact in FACTS:
            e.remember(fact, USER, "fact")
    ctx = mp.get_context("spawn")
    logs = work / "writer.json", work / "forgetter.json"
    procs = [ctx.Process(target=writer, args=(db, seconds, seed, logs[0])),
             ctx.Process(target=forgetter, args=(db, seconds, seed + 1, logs[1]))]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(seconds + 300)
    written = json.loads(logs[0].read_text())
    forgets = json.loads(logs[1].read_text())
    forgotten: dict[str, float] = {}
    for ev in forgets:
        for mid in ev.get("forgot", []):
            forgotten.setdefault(mid, ev["t"])
    with engine(db) as e:
        present = {m.id for m in e.list(USER, limit=None)}
        rows = {r[0] for r in sqlite3.connect(db).execute("SELECT id FROM memories")}
        found = set()
        for fact in FACTS:
            found |= {m.id for m in e.recall(fact, USER, top_k=50).memories}
            found |= {m.id for m in e.context(fact, USER).memories}
    integrity = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
    came_back = sorted(set(forgotten) & (rows | present | found))
    stored = [ev for ev in written if ev.get("action") == "stored"]
    lost = [ev["id"] for ev in stored if ev["id"] not in rows and ev["id"] not in forgotten]
    merged_gone = [ev for ev in written if ev.get("action") == "merged"
                   and ev["id"] in forgotten and forgotten[ev["id"]] < ev["t"]]  # fmt: skip
    crashes = [ev for ev in written + forgets if "crash" in ev]
    errors = [ev for ev in written + forgets if "error" in ev]
    summary = {
        "attack": "forget_vs_ingest", "seconds": seconds, "writes": len(written),
        "stored": len(stored), "merged": sum(ev.get("action") == "merged" for ev in written),
        "forget_calls": sum("forgot" in ev for ev in forgets), "forgotten": len(forgotten),
        "came_back": came_back, "stored_then_lost": lost,
        "merged_into_forgotten": len(merged_gone), "errors": errors[:10],
        "crashes": crashes[:10], "integrity": integrity,
    }  # fmt: skip
    summary["ok"] = (
        not (came_back or lost or crashes or errors or merged_gone) and integrity == "ok"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    summary = attack(args.seconds, args.seed)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
