"""The SQLite half of ``derived_files.py``: the derived indexes kept as rows of the store's
own file (``derived_indexes``: the approximate indexes, their stamps, the columns' image,
BM25) damaged through a connection of the attack's own, between phases, while a served
process (a child, alive through every phase) and each phase a fresh one answer searches.

Phases: ``flip`` (64 bytes of every derived row flipped), ``cut`` (each cut to half),
``other_user`` (bob's rows copied over alice's), ``stale`` (the rows of two phases ago put
back), ``other_store`` (the rows of alice in another store file, filled with other vectors
by the same writes, so at the same revision, with the same migrations and rowids, copied
in), ``deleted`` (every derived row deleted). Before each, the parent forgets 4 of alice's
memories and adds 4 (one write each). After it, both processes answer 10 searches (k = 10,
every memory and the typed learnings), compared id by id with an exact search over the
vectors the parent wrote (numpy), and ``get`` of every live id.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from derived_files import (
    DIM,
    memory,
    typed_filter,
    unit,
    vectors,
)
from harness import Asked, K, compared

CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[2])
from derived_files import typed_filter
from harness import searched
from engrain.store.base import ALL
from engrain.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1], ann_min_vectors=0)
filters = {"pool": ALL, "typed": typed_filter()}
for line in sys.stdin:
    request = json.loads(line)
    if request.get("close"):
        break
    answer = {"answers": [], "errors": [], "missing": 0}
    for query in request["queries"]:
        answer["answers"].append(searched(store, "alice", query, filters, answer["errors"]))
        store.wait_for_index("alice", timeout=60)
    try:
        got = {m.id for m in store.get("alice", request["live"])}
        answer["missing"] = len(set(request["live"]) - got)
        answer["foreign"] = sorted(got - set(request["live"]))[:5]
    except Exception as exc:
        answer["errors"].append(f"{type(exc).__name__}: {exc}")
    print(json.dumps(answer), flush=True)
store.close()
print(json.dumps({"closed": True}), flush=True)
"""


def sqlite_child(db: Path) -> Asked:
    """A child serving searches of the SQLite store ``db`` (:data:`CHILD`)."""
    return Asked([sys.executable, "-c", CHILD, str(db), str(Path(__file__).parent)])


def rows(db: Path, user: str) -> dict[str, bytes]:
    with sqlite3.connect(db, timeout=60) as c:
        return {k: bytes(d) for k, d in c.execute(
            "SELECT kind, data FROM derived_indexes WHERE user_id = ?", (user,))}  # fmt: skip


def put(db: Path, user: str, derived: dict[str, bytes], replace_all: bool = True) -> None:
    with sqlite3.connect(db, timeout=60) as c:
        if replace_all:
            c.execute("DELETE FROM derived_indexes WHERE user_id = ?", (user,))
        for kind, data in derived.items():
            c.execute("INSERT OR REPLACE INTO derived_indexes VALUES (?, ?, ?, datetime('now'))",
                      (user, kind, data))  # fmt: skip


def exact(
    live: dict[str, np.ndarray[Any, Any]], typed: set[str], q: np.ndarray[Any, Any]
) -> dict[str, list[str]]:
    ids = sorted(live)
    m = np.stack([live[i] for i in ids])
    scores = m @ q
    order = np.argsort(-scores, kind="stable")
    pool = [ids[i] for i in order[:K]]
    typed_order = [ids[i] for i in order if ids[i] in typed][:K]
    return {"pool": pool, "typed": typed_order}


def run_sqlite(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from engrain.store.sqlite import SQLiteStore

    os.environ["ENGRAIN_ANN_MIN_VECTORS"] = "0"
    rng = random.Random(args.seed)
    db, other_db = root / "store.db", root / "other.db"
    n = args.memories
    vs = vectors(n + 400, args.seed + 1)
    findings: list[str] = []
    phases: list[dict[str, Any]] = []
    # the other store: alice's memories with other vectors, by the same writes (revision)
    for path, flip_vectors in ((db, False), (other_db, True)):
        s = SQLiteStore(path, ann_min_vectors=0)
        s.write([memory(f"a-{i:05d}", "alice", unit(v[::-1].copy()) if flip_vectors else v, i)
                 for i, v in enumerate(vs[:n])])  # fmt: skip
        if not flip_vectors:
            s.write([memory(f"b-{i:05d}", "bob", v, i) for i, v in enumerate(vs[n:])])
        s.search("alice", vs[0], K)
        s.wait_for_index("alice", timeout=120)
        s.search("alice", vs[0], K, typed_filter())
        s.wait_for_index("alice", timeout=120)
        if not flip_vectors:
            s.search("bob", vs[n], K)
            s.wait_for_index("bob", timeout=120)
        s.close()
    live = {f"a-{i:05d}": vs[i] for i in range(n)}
    typed = {f"a-{i:05d}" for i in range(n) if i % 3 == 0}
    writer = SQLiteStore(db, ann_min_vectors=None)
    other_writer = SQLiteStore(other_db, ann_min_vectors=None)
    served = sqlite_child(db)
    history: list[dict[str, bytes]] = []
    added = 0
    try:
        first = served.ask({"queries": [vs[0].tolist()], "live": []})
        if first is None:
            findings.append(f"sqlite: the served process did not start: {served.end()}")
            return {"phases": phases, "findings": findings}
        for number, attack in enumerate(
            ("flip", "cut", "other_user", "stale", "other_store", "deleted")
        ):
            history.append(rows(db, "alice"))
            gone = rng.sample(sorted(live), 4)
            news = []
            for j in range(4):
                anchor = live[rng.choice(sorted(live))]
                v = unit(
                    anchor
                    + 0.02
                    * np.random.default_rng(100 + number * 10 + j)
                    .standard_normal(DIM)
                    .astype(np.float32)
                )
                i = 3 * added  # a typed learning every third, as the corpus
                news.append(memory(f"n-{added:04d}", "alice", v, i))
                live[f"n-{added:04d}"] = v
                if i % 3 == 0:
                    typed.add(f"n-{added:04d}")
                added += 1
            for store in (writer, other_writer):  # the same writes: the same revision
                store.write(deletes=store.get("alice", gone))
                store.write(news)
            for g in gone:
                del live[g]
                typed.discard(g)
            current = rows(db, "alice")
            if attack == "flip":
                damaged = {}
                for kind, data in current.items():
                    b = bytearray(data)
                    for _ in range(64):
                        at = rng.randrange(len(b))
                        b[at] ^= 0xFF
                    damaged[kind] = bytes(b)
                put(db, "alice", damaged)
            elif attack == "cut":
                put(db, "alice", {k: d[: len(d) // 2] for k, d in current.items()})
            elif attack == "other_user":
                put(db, "alice", rows(db, "bob"))
            elif attack == "stale":
                put(db, "alice", history[-2] if len(history) >= 2 else history[-1])
            elif attack == "other_store":
                put(db, "alice", rows(other_db, "alice"))
            else:
                put(db, "alice", {})
            queries = [live[f"n-{added - 1 - j:04d}"] for j in range(4)]
            queries += [vs[int(g[2:])] for g in gone]
            queries += [live[k] for k in rng.sample(sorted(live), 2)]
            expected = [exact(live, typed, q) for q in queries]
            request = {"queries": [q.tolist() for q in queries], "live": sorted(live)}
            phase: dict[str, Any] = {"attack": attack}
            fresh = sqlite_child(db)
            for who, child in (("served", served), ("fresh", fresh)):
                started = time.monotonic()
                answer = child.ask(request)
                phase[f"{who}_seconds"] = round(time.monotonic() - started, 1)
                if answer is None:
                    findings.append(
                        f"sqlite {attack}: the {who} process gave no answer ({child.end()})"
                    )
                    phase[who] = "no answer"
                    if who == "served":
                        served = sqlite_child(db)
                    continue
                forgotten = {f"a-{i:05d}" for i in range(n)} - set(live)
                wrong, shown = compared(answer["answers"], expected, forgotten)
                other = [e for e in answer["errors"] if not e.startswith("engrain")]
                phase[who] = {"answers_wrong": len(wrong), "forgotten_returned": shown,
                              "get_missing": answer["missing"], "foreign": answer.get("foreign"),
                              "errors": answer["errors"][:3]}  # fmt: skip
                if wrong or shown or other or answer["missing"] or answer.get("foreign"):
                    findings.append(
                        f"sqlite {attack}: {who}: {len(wrong)} answers differ from the exact "
                        f"search, forgotten returned {shown}, get missing "
                        f"{answer['missing']}, errors {other[:2]}"
                    )
            if phase.get("fresh") != "no answer":
                ok, err = fresh.close()
                if not ok:
                    findings.append(
                        f"sqlite {attack}: the fresh process did not close cleanly: {err}"
                    )
            with sqlite3.connect(db, timeout=60) as c:
                phase["integrity"] = c.execute("PRAGMA integrity_check").fetchone()[0]
            phases.append(phase)
            print(json.dumps(phase), file=sys.stderr, flush=True)
        ok, err = served.close()
        if not ok:
            findings.append(f"sqlite: the served process did not close cleanly: {err}")
    except Exception:
        findings.append(f"sqlite: the attack itself failed: {traceback.format_exc()[-800:]}")
        served.end()
    finally:
        writer.close()
        other_writer.close()
    return {"phases": phases, "findings": findings}
