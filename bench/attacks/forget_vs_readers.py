"""Attack: one process forgets and edits memories while another reads them through every
read path, the approximate index on (``ENGRAIN_ANN_MIN_VECTORS=0``), on one SQLite file.

The store starts with ``--memories`` facts, each with words of its own. The writer process
forgets them in a random order and edits others' content (``update(content=… version k)``),
noting when each call returned. The reader process, its working set and index loaded
before the start, asks ``recall()`` and ``context()`` for facts by their words (half of
them facts the writer has just forgotten or edited), lists them and exports the user
(``export_records``), noting when each call began. Checked afterwards, by the clock both
processes share:

- no call that began after a forget returned shows that memory (``recall``, ``context``,
  ``list``, an export), nor a version of a memory older than an edit that returned before
  it began;
- every export holds each id once, imports whole into a fresh store, and that store's
  export is the same records (nothing dropped, nothing invented);
- no call failed; ``PRAGMA integrity_check`` is ok.

Prints a JSON summary; exits 0 only when every check held.

    PYTHONPATH=src .venv/bin/python bench/attacks/forget_vs_readers.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import shutil
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine, private_environment

from engrain import Engine

USER = "ada"
VERSION = re.compile(r"version (\d+)\.$")


def engine(db: Path) -> Engine:
    return hash_engine(db, auto_compress=False)


def fact(tag: str, version: int) -> str:
    return f"The crate {tag} holds {tag[:3]} bolts and {tag[3:]} washers, version {version}."


def writer(db: Path, tags: dict[str, str], go: Any, seconds: float, out: str) -> None:
    """Forgets half the facts and edits others, noting when each call returned."""
    rng = random.Random(1)
    ids = list(tags)
    rng.shuffle(ids)
    doomed, edited = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    log: list[dict[str, Any]] = []
    versions = dict.fromkeys(edited, 0)
    with engine(db) as e:
        e.list(USER, limit=1)
        go.wait()
        stop_at = time.time() + seconds
        while time.time() < stop_at and doomed:
            if rng.random() < 0.5:
                memory_id = doomed.pop()
                gone = e.forget([memory_id], USER)
                log.append({"op": "forget", "id": memory_id, "n": gone, "at": time.time()})
            else:
                memory_id = rng.choice(edited)
                versions[memory_id] += 1
                e.update(memory_id, USER, content=fact(tags[memory_id], versions[memory_id]))
                log.append({"op": "edit", "id": memory_id, "version": versions[memory_id],
                            "at": time.time()})  # fmt: skip
            time.sleep(0.005)
    Path(out).write_text(json.dumps(log))


def reader(db: Path, tags: dict[str, str], ready: Any, go: Any, seconds: float, out: str) -> None:
    """Reads by every path, noting when each call began and what it showed."""
    rng = random.Random(2)
    ids = list(tags)
    log: list[dict[str, Any]] = []
    failures: list[str] = []
    exports: list[list[dict[str, Any]]] = []
    with engine(db) as e:
        e.recall("crate bolts", USER)  # working set and index loaded before the start
        ready.put(True)
        go.wait()
        stop_at = time.time() + seconds
        n = 0
        while time.time() < stop_at:
            tag = tags[rng.choice(ids)]
            began = time.time()
            try:
                if n % 10 == 9:
                    records = list(e.export_records(USER))
                    exports.append(records)
                    shown = {r["id"]: r["content"] for r in records}
                    call = "export"
                elif n % 10 == 8:
                    shown = {m.id: m.content for m in e.list(USER, limit=None)}
                    call = "list"
                elif n % 2:
                    found = e.recall(f"crate {tag} bolts washers", USER).memories
                    shown = {m.id: m.content for m in found}
                    call = "recall"
                else:
                    ctx = e.context(f"What does crate {tag} hold?", USER, token_budget=400)
                    shown = {m.id: m.content for m in ctx.memories}
                    call = "context"
            except Exception as exc:  # any failure is a finding
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            finally:
                n += 1
            log.append({"call": call, "began": began, "shown": shown})
    Path(out).write_text(json.dumps({"log": log, "failures": failures, "exports": exports}))


def check_exports(root: Path, exports: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Each export: ids once; imports whole into a fresh store, whose export matches."""
    duplicated, mismatched = 0, 0
    for n, records in enumerate(exports[:: max(1, len(exports) // 3)]):
        ids = [r["id"] for r in records]
        duplicated += len(ids) - len(set(ids))
        with engine(root / f"fresh{n}.db") as fresh:
            fresh.import_records(records)
            again = list(fresh.export_records(USER))
        mismatched += json.dumps(again, sort_keys=True) != json.dumps(records, sort_keys=True)
    return {"exports": len(exports), "duplicated_ids": duplicated,
            "reimport_mismatches": mismatched}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root, _ = private_environment("engrain-forget-readers-")
    db = root / "e.db"
    tags = {f"m{i:05d}": uuid.uuid4().hex[:8] for i in range(args.memories)}
    with engine(db) as e:
        e.import_records([{"type": "memory", "id": i, "user_id": USER, "content": fact(t, 0),
                           "memory_type": "semantic", "kind": "fact",
                           "created_at": "2026-01-02T03:04:05+00:00"}
                          for i, t in tags.items()])  # fmt: skip
    ctx = mp.get_context("spawn")
    ready, go = ctx.Queue(), ctx.Event()
    w_out, r_out = str(root / "writer.json"), str(root / "reader.json")
    procs = [ctx.Process(target=reader, args=(db, tags, ready, go, args.seconds, r_out)),
             ctx.Process(target=writer, args=(db, tags, go, args.seconds, w_out))]  # fmt: skip
    for p in procs:
        p.start()
    ready.get(timeout=600)
    time.sleep(2)  # the writer's engine open too
    go.set()
    for p in procs:
        p.join(900)
    writes = json.loads(Path(w_out).read_text())
    read = json.loads(Path(r_out).read_text())
    forgotten = {w["id"]: w["at"] for w in writes if w["op"] == "forget" and w["n"] == 1}
    edits: dict[str, list[tuple[float, int]]] = {}
    for w in writes:
        if w["op"] == "edit":
            edits.setdefault(w["id"], []).append((w["at"], w["version"]))
    resurrected, stale, by_call = [], [], {}
    for entry in read["log"]:
        by_call[entry["call"]] = by_call.get(entry["call"], 0) + 1
        for memory_id, content in entry["shown"].items():
            if forgotten.get(memory_id, float("inf")) < entry["began"]:
                resurrected.append((entry["call"], memory_id))
            done = [v for at, v in edits.get(memory_id, []) if at < entry["began"]]
            version = VERSION.search(content)
            if done and version and int(version.group(1)) < max(done):
                stale.append((entry["call"], memory_id, int(version.group(1)), max(done)))
    exports = check_exports(root, read["exports"])
    with sqlite3.connect(db) as check:
        integrity = check.execute("PRAGMA integrity_check").fetchone()[0]
        left = {r[0] for r in check.execute("SELECT id FROM memories WHERE user_id = ?", (USER,))}
    summary = {
        "attack": "forget_vs_readers", "memories": args.memories, "forgets": len(forgotten),
        "edits": sum(len(v) for v in edits.values()), "reads": by_call,
        "forgotten_shown_after_forget": resurrected[:10], "stale_versions": stale[:10],
        "forgotten_still_stored": sorted(set(forgotten) & left)[:10], **exports,
        "failures": read["failures"][:10], "integrity": integrity,
    }  # fmt: skip
    summary["ok"] = (not resurrected and not stale and not summary["forgotten_still_stored"]
                     and not exports["duplicated_ids"] and not exports["reimport_mismatches"]
                     and not read["failures"] and integrity == "ok")  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
