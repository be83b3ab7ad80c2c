"""Attack: batches with one bad element in the middle, and batches killed midway.

``ingest_conversations([...])`` promises: every session validated before anything is
written (a malformed one refuses the call, nothing written); a later failure (the model,
the store) raises after the sessions before it were stored, each whole, with a note saying
how many; nothing of the failing session or after it. ``import_records([...])`` promises
all or nothing. Checked on one SQLite store (hash embedder, a private directory):

1. **a malformed element in the middle** (position 3 of 6): sessions whose turns are not a
   list, a turn's text over ``max_text_chars``, a speaker that is a number, a bad user id,
   a ``now`` that is no time, an unknown key; import records with a missing field, a bad
   kind, a content over the limit, a record that is not a mapping, an iterator that raises
   midway — each must raise ``EngrainError`` and change nothing (every row and document
   compared before and after);
2. **a failure while writing**: the model fails on the 4th session or record (an embedder
   that raises ``EmbeddingError`` on a poisoned text); the store refuses one
   (``KeyChangedError`` from a keyed memory another engine changed); sessions before the
   failing one stored whole, the rest absent, the note's count right; an import wrote
   nothing;
3. **SIGKILL midway**: a child process ingests 150 sessions in one call (or imports 1,500
   records in one call) and is killed after 0.05–1.5 s; the stored sessions must be a prefix
   of the call's order, each whole; the import all or nothing; ``integrity_check`` ok;
   then a new process writes and answers.

Exits 0 only when every promise held. Prints (and with ``--json`` writes) a JSON summary.

    PYTHONPATH=src .venv/bin/python bench/attacks/batch_atomicity.py [--kills 6] \\
        [--json bench/results/attack-batch-atomicity-s23-h2.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_settings, next_process, private_environment

from engrain import Engine
from engrain.config import Settings
from engrain.embed import HashEmbedder
from engrain.errors import EmbeddingError, EngrainError

USER = "ada"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
POISON = "poisonedword"


class Failing(HashEmbedder):
    """The hash embedder, failing like a model that ran out of memory on ``POISON``."""

    def embed(self, texts: Sequence[str]) -> Any:
        if any(POISON in t for t in texts):
            raise EmbeddingError("the model failed on this batch")
        return super().embed(texts)


def settings(db: Path) -> Settings:
    return hash_settings(db, auto_compress=False, max_chunk_tokens=40, min_chunk_tokens=0,
                         max_text_chars=2_000)  # fmt: skip


def word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwz") + rng.choice("aeiou") for _ in range(4))


def session(tag: str, k: int, turns: int = 4) -> dict[str, Any]:
    """A session whose every turn carries a mark ``{tag}s{k}t{i}m`` among pseudo-words."""
    rng = random.Random(f"{tag}-{k}")
    return {
        "user_id": USER,
        "session_id": f"{tag}-{k}",
        "now": T0 + timedelta(minutes=k),
        "turns": [
            {
                "speaker": "user" if i % 2 == 0 else "assistant",
                "text": f"{tag}s{k}t{i}m " + " ".join(word(rng) for _ in range(8)),
            }
            for i in range(turns)
        ],
    }


def record(tag: str, k: int) -> dict[str, Any]:
    rng = random.Random(f"{tag}-{k}")
    return {
        "type": "remember",
        "user_id": USER,
        "kind": "fact",
        "content": f"{tag}r{k}m " + " ".join(word(rng) for _ in range(8)),
    }


def digest(engine: Engine) -> str:
    """Every record the user's export holds (memories and documents), hashed."""
    lines = sorted(json.dumps(r, sort_keys=True, default=str) for r in engine.export_records(USER))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def marks(engine: Engine) -> str:
    return "\n".join(m.content for m in engine.list(USER, limit=None))


def malformed(db: Path) -> list[dict[str, Any]]:
    """Part 1: each bad element at position 3 of 6; must raise and change nothing."""
    bad_sessions: dict[str, Any] = {
        "turns not a list": {"turns": "hello", "user_id": USER},
        "turn over max_text_chars": {
            "turns": [{"speaker": "u", "text": "x" * 2_001}],
            "user_id": USER,
        },
        "speaker a number": {"turns": [{"speaker": 7, "text": "hi there"}], "user_id": USER},
        "bad user id": {"turns": [{"speaker": "u", "text": "hi there"}], "user_id": "a\u200bb"},
        "now not a time": {
            "turns": [{"speaker": "u", "text": "hi"}],
            "user_id": USER,
            "now": "yesterday",
        },
        "unknown key": {"turns": [{"speaker": "u", "text": "hi"}], "user_id": USER, "when": 1},
    }
    bad_records: dict[str, Any] = {
        "no content": {"type": "remember", "user_id": USER},
        "bad kind": {**record("x", 0), "kind": "gossip"},
        "content over the limit": {**record("x", 0), "content": "y" * 2_001},
        "not a mapping": ["remember", USER],
    }
    out = []
    with Engine(settings=settings(db)) as e:
        e.remember("a memory so the user exists", USER, now=T0)
        for name, bad in bad_sessions.items():
            batch = [session(f"m{len(out)}", k) for k in range(6)]
            batch[3] = bad
            out.append(
                _refused(
                    e, f"ingest_conversations: {name}", lambda b=batch: e.ingest_conversations(b)
                )
            )
        for name, bad in bad_records.items():
            recs = [record(f"m{len(out)}", k) for k in range(6)]
            recs[3] = bad
            out.append(_refused(e, f"import_records: {name}", lambda r=recs: e.import_records(r)))

        def raising() -> Iterator[dict[str, Any]]:
            for k in range(6):
                if k == 3:
                    raise EngrainError("the source of records broke")
                yield record("iter", k)

        out.append(
            _refused(
                e, "import_records: an iterator raising midway", lambda: e.import_records(raising())
            )
        )
    return out


def _refused(e: Engine, name: str, call: Any) -> dict[str, Any]:
    before = digest(e)
    try:
        call()
        outcome = "accepted"
    except EngrainError as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
    except Exception as exc:  # outside the error tree
        outcome = f"NOT EngrainError {type(exc).__name__}: {exc}"
    wrote = digest(e) != before
    ok = not wrote and not outcome.startswith(("accepted", "NOT"))
    return {"case": name, "outcome": outcome, "wrote": wrote, "ok": ok}


def failing_midway(db: Path) -> list[dict[str, Any]]:
    """Part 2: the model fails on the 4th session / record; a key changes under an import."""
    out = []
    with Engine(settings=settings(db), embedder=Failing()) as e:
        batch = [session("f", k) for k in range(6)]
        batch[3]["turns"][1]["text"] += f" {POISON}"
        try:
            e.ingest_conversations(batch)
            note, error = "", "none"
        except EngrainError as exc:
            note, error = " ".join(getattr(exc, "__notes__", [])), type(exc).__name__
        text = marks(e)
        whole = [all(f"fs{k}t{i}m" in text for i in range(4)) for k in range(6)]
        some = [any(f"fs{k}t{i}m" in text for i in range(4)) for k in range(6)]
        ok = (
            error == "EmbeddingError"
            and whole == [True] * 3 + [False] * 3
            and some == whole
            and "the 3 sessions before" in note
        )
        out.append(
            {
                "case": "ingest_conversations: the model fails on sessions[3]",
                "error": error,
                "note": note,
                "stored_whole": whole,
                "ok": ok,
            }
        )
        before = digest(e)
        recs = [record("g", k) for k in range(6)]
        recs[3]["content"] += f" {POISON}"
        try:
            e.import_records(recs)
            error = "none"
        except EngrainError as exc:
            error = type(exc).__name__
        out.append(
            {
                "case": "import_records: the model fails on record 3",
                "error": error,
                "wrote": digest(e) != before,
                "ok": error == "EmbeddingError" and digest(e) == before,
            }
        )
    # a key another engine takes while an import that claims it is planned
    with Engine(settings=settings(db)) as a, Engine(settings=settings(db)) as b:
        recs = [
            {**record("k", k), "kind": "preference", "memory_type": "procedural", "key": f"key{k}"}
            for k in range(6)
        ]
        real = a.planner.item
        planned = []

        def racing(*args: Any, **kwargs: Any) -> Any:
            planned.append(1)
            if len(planned) == 5:  # key3 was looked up (record 3): engine b takes it now
                b.remember(
                    "another value for key3 from engine b",
                    USER,
                    kind="preference",
                    memory_type="procedural",
                    key="key3",
                    now=T0,
                )
            return real(*args, **kwargs)

        a.planner.item = racing  # type: ignore[method-assign]
        before = marks(a)
        try:
            a.import_records(recs)
            error = "none"
        except EngrainError as exc:
            error = type(exc).__name__
        after = marks(a)
        written = [f"kr{k}m" in after for k in range(6)]
        ok = (error == "KeyChangedError" and not any(written)) or (error == "none" and all(written))
        a.planner.item = real  # type: ignore[method-assign]
        out.append(
            {
                "case": "import_records: a key changes under it",
                "error": error,
                "written": written,
                "raced": len(planned) >= 5,
                "ok": ok and len(planned) >= 5 and "kr0m" not in before,
            }
        )
    return out


CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {here!r})
from pathlib import Path
from engrain import Engine
from batch_atomicity import settings, session, record
e = Engine(settings=settings(Path({db!r})))
e.remember("child ready", "ada")
print("ready", flush=True)
if {what!r} == "sessions":
    e.ingest_conversations([session({tag!r}, k, 6) for k in range(150)])
else:
    e.import_records([record({tag!r}, k) for k in range(1500)])
print("done", flush=True)
e.close()
"""


def killed(db: Path, kills: int, seed: int) -> list[dict[str, Any]]:
    """Part 3: a child killed in the middle of one big call."""
    rng = random.Random(seed)
    out = []
    for n in range(kills):
        what = "sessions" if n % 2 == 0 else "records"
        tag = f"k{n}"
        code = CHILD.format(here=str(Path(__file__).parent), db=str(db), what=what, tag=tag)
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert child.stdout is not None
        child.stdout.readline()  # ready: the engine is open and has written
        delay = rng.uniform(0.05, 1.5)
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        finished = child.stdout.read().strip() == "done"
        with Engine(settings=settings(db)) as e:
            text = marks(e)
        if what == "sessions":
            whole = [all(f"{tag}s{k}t{i}m" in text for i in range(6)) for k in range(150)]
            some = [any(f"{tag}s{k}t{i}m" in text for i in range(6)) for k in range(150)]
            stored = sum(whole)
            ok = some == whole and whole == sorted(whole, reverse=True)
        else:
            there = [f"{tag}r{k}m" in text for k in range(1500)]
            stored = sum(there)
            ok = stored in (0, 1500)
        check = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
        out.append(
            {
                "round": n,
                "call": what,
                "killed_after_s": round(delay, 2),
                "stored": stored,
                "finished_before_the_kill": finished,
                "integrity": check,
                "ok": ok and check == "ok",
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root, env = private_environment("h2-batch-")
    db = root / "store.db"
    parts = {
        "malformed": malformed(db),
        "failing": failing_midway(db),
        "killed": killed(db, args.kills, args.seed),
    }
    answers, tail = next_process(db, USER, env)
    broken = [c for part in parts.values() for c in part if not c["ok"]]
    summary = {
        "attack": "batch_atomicity",
        **parts,
        "next_process_answers": answers,
        "next_process_error": tail,
        "broken": len(broken),
        "ok": not broken and answers,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
