"""Attack: ``kill -9`` of a process while its background jobs compress sessions and compile
tiers, then a reopen.

Each round a child process opens the store (SQLite, hash embedder, ``auto_compress`` on,
a low ``compression_threshold``) and ingests conversations of one user in a loop: every
ingest queues the background compression; every third call also compiles the tiers
(``tiers(rebuild=True)``) and asks a tier-1 ``context()``. It notes each session whose
ingest returned. After a random 1-4 s it is killed with SIGKILL, mid-job or not. Then a
new process opens the store, checks it and carries on. Checked after every kill:

- every session whose ingest returned is stored (its turns in some memory);
- a session has at most one summary; a summary's session has all its episodic memories
  marked compressed and every memory marked compressed has its session's summary
  (a compression is whole or absent);
- ``PRAGMA integrity_check`` is ok; the reopened engine compresses, compiles the tiers
  and answers ``context()``.

Prints a JSON summary; exits 0 only when every round held.

    PYTHONPATH=src .venv/bin/python bench/attacks/compress_kill.py [--rounds 6]
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
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, private_environment

USER = "kim"
CHILD = """
import json, sys, uuid, warnings
warnings.simplefilter("ignore")
from engrain import Engine
from engrain.config import Settings
db, start, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
settings = Settings(data_dir=str(__import__("pathlib").Path(db).parent), url=f"sqlite:///{db}",
                    embedder="hash", auto_compress=True, compression_threshold=2,
                    sessions_to_compress=2)
e = Engine(settings=settings)
for n in range(start, start + 100000):
    w = [uuid.uuid4().hex[:7] for _ in range(6)]
    e.ingest_conversation([
        {"speaker": "kim", "text": f"Crate {w[0]} went to {w[1]} with {w[2]} bolts."},
        {"speaker": "bot", "text": f"Noted: {w[3]} signed for {w[4]} at dock {w[5]}."},
    ], "kim", session_id=f"s{n}")
    with open(log, "a") as f:
        f.write(json.dumps([n, w[0]]) + "\\n")
    if n % 3 == 0:
        e.tiers("kim", rebuild=True)
        e.context("Where did the crate go?", "kim")
"""


def check(db: Path, stored: list[list[Any]]) -> dict[str, Any]:
    with sqlite3.connect(db) as c:
        integrity = c.execute("PRAGMA integrity_check").fetchone()[0]
        rows = c.execute(
            "SELECT content, session_id, compressed, compression_source, source_session_id "
            "FROM memories WHERE user_id = ?", (USER,),
        ).fetchall()  # fmt: skip
    text = "\n".join(r[0] for r in rows if not r[3])
    missing = [n for n, tag in stored if f"Crate {tag} went" not in text]
    summaries = Counter(r[4] for r in rows if r[3])
    twice = sorted(s for s, k in summaries.items() if k > 1)
    compressed = {r[1] for r in rows if r[2] and not r[3]}
    partly = {r[1] for r in rows if not r[2] and not r[3]} & compressed
    without_summary = sorted(compressed - set(summaries))
    plain = {r[1] for r in rows if not r[2] and not r[3]}
    summary_of_uncompressed = sorted(s for s in summaries if s in plain)
    return {"rows": len(rows), "missing_sessions": missing[:5], "summaries": len(summaries),
            "two_summaries": twice[:5], "sessions_partly_compressed": sorted(partly)[:5],
            "compressed_without_summary": without_summary[:5],
            "summary_of_uncompressed": summary_of_uncompressed[:5],
            "integrity": integrity}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    random.seed(args.seed)
    root, env = private_environment("engrain-compress-kill-")
    db, log = root / "e.db", root / "stored.jsonl"
    start, rounds = 0, []

    def stored() -> list[list[Any]]:
        """The sessions whose ingest returned (a line cut by the kill is not one)."""
        lines = log.read_text().split("\n") if log.exists() else []
        return [json.loads(x) for x in lines if x.endswith("]")]

    for _ in range(args.rounds):
        before = len(stored())
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(start), str(log)],
                                 env=env, stderr=subprocess.PIPE)  # fmt: skip
        try:
            began = time.monotonic()
            while time.monotonic() - began < 300 and child.poll() is None and len(
                stored()
            ) == before:  # fmt: skip
                time.sleep(0.05)  # until the first ingest of this round returned
            time.sleep(random.uniform(1.0, 4.0))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        sessions = stored()
        start = max((n for n, _ in sessions), default=-1) + 1
        result = check(db, sessions)
        result["stored_sessions"] = len(sessions)
        rounds.append(result)
    reopen = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from engrain import Engine\nfrom engrain.config import Settings\n"
        f"e = Engine(settings=Settings(data_dir={str(root)!r}, url='sqlite:///{db}', "
        "embedder='hash', compression_threshold=2, sessions_to_compress=2))\n"
        f"e.compress({USER!r}, force=True)\ne.tiers({USER!r}, rebuild=True)\n"
        f"assert e.context('Where did the crate go?', {USER!r}).text\ne.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", reopen], env=env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    final = check(db, stored())
    broken = [r for r in [*rounds, final]
              if r["missing_sessions"] or r["two_summaries"] or r["sessions_partly_compressed"]
              or r["compressed_without_summary"] or r["summary_of_uncompressed"]
              or r["integrity"] != "ok"]  # fmt: skip
    summary = {"attack": "compress_kill", "rounds": rounds, "after_reopen": final,
               "reopened": done.returncode == 0, "reopen_error": done.stderr[-300:],
               "broken": len(broken), "ok": not broken and done.returncode == 0}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
