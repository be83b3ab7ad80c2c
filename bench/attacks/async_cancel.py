"""Attack: cancel ``AsyncEngine`` calls in the middle, then check each wrote all or nothing.

One SQLite store (hash embedder), ``AsyncEngine``. Each round starts one call of each
writing method as a task — ``remember``, ``ingest_conversation`` (a session of 12 turns),
``ingest_conversations`` (three sessions), ``feedback`` (four memories rated), ``forget``
(three memories), ``import_records`` (three records), ``compress`` — and cancels it after
0–50 ms, by ``task.cancel()`` or by ``asyncio.wait_for``'s timeout (the two alternate).
Between rounds a ``context()`` must answer (the engine keeps serving); at the end
``close()`` must return within 120 s, with calls just cancelled still in their threads (the
last round cancels and closes at once). Then a new engine reads the file and checks, for
every cancelled call, by the words it wrote:

- ``remember``: the memory is stored whole or not at all;
- ``ingest_conversation`` / ``ingest_conversations``: each session's turns are all stored
  or none of them (``ingest_conversations`` is a session per transaction: sessions in
  order, each whole, as documented);
- ``import_records``: the three records all or none; ``forget``: the three ids all gone
  or all there; ``feedback``: the four memories' usefulness all moved or none;
- ``compress``: no session half compressed, at most one summary per session, every
  summary's sources stored and compressed;
- ``PRAGMA integrity_check`` ok; no call raised anything but ``CancelledError`` /
  ``TimeoutError`` (or returned); no thread of the engine left running after ``close()``
  (the process's shared read pool, ``engrain-read``, stays by design).

Exits 0 only when every check held. Prints (and with ``--json`` writes) a JSON summary.

    PYTHONPATH=src .venv/bin/python bench/attacks/async_cancel.py [--rounds 12] \\
        [--json bench/results/attack-async-cancel-s23-h2.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_settings, private_environment

from engrain import Engine
from engrain.aio import AsyncEngine
from engrain.config import Settings
from engrain.model import Kind

USER = "ada"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def settings(db: Path) -> Settings:
    return hash_settings(db, auto_compress=False, max_chunk_tokens=20, min_chunk_tokens=0,
                         sessions_to_compress=2)  # fmt: skip


def word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwz") + rng.choice("aeiou") for _ in range(4))


def turns(tag: str, n: int) -> list[dict[str, str]]:
    """``n`` turns, each a word of its own (``tag`` and its number) among pseudo-words, so
    no turn is a near-duplicate of another (each is stored as it is)."""
    rng = random.Random(tag)
    return [
        {
            "speaker": "user" if i % 2 == 0 else "assistant",
            "text": f"{tag}x{i}y " + " ".join(word(rng) for _ in range(8)) + ".",
        }
        for i in range(n)
    ]


class Round:
    """One round's calls: what each asks, and how to tell afterwards what it wrote."""

    def __init__(self, engine: AsyncEngine, rng: random.Random, n: int) -> None:
        self.engine, self.rng, self.n = engine, rng, n
        self.expect: list[dict[str, Any]] = []

    async def setup(self) -> None:
        """Memories the round's forget and feedback act on (written and awaited)."""
        e = self.engine
        self.doomed, self.rated = [], []
        for i in range(7):
            out = await e.remember(
                f"Setup {self.n}-{i}: {word(self.rng)} {word(self.rng)} stays in bin {i}.",
                USER,
                now=T0,
            )
            (self.doomed if i < 3 else self.rated).append(out.memory_id)

    def calls(self) -> list[tuple[str, Callable[[], Awaitable[Any]], dict[str, Any]]]:
        e, n, rng = self.engine, self.n, self.rng
        tag = [word(rng) for _ in range(6)]
        records = [
            {
                "type": "remember",
                "user_id": USER,
                "content": f"{t} " + " ".join(word(rng) for _ in range(6)) + ".",
            }
            for t in tag[3:6]
        ]
        sessions = [
            {
                "turns": turns(f"{tag[1]}s{k}", 4),
                "user_id": USER,
                "session_id": f"r{n}-many-{k}",
                "now": T0 + timedelta(hours=n, minutes=k),
            }
            for k in range(3)
        ]
        when = T0 + timedelta(hours=n)
        return [
            (
                "remember",
                lambda: e.remember(f"Remembered {tag[0]} in round {n}.", USER, now=when),
                {"words": [tag[0]]},
            ),
            (
                "ingest_conversation",
                lambda: e.ingest_conversation(
                    turns(tag[2], 12), USER, session_id=f"r{n}-one", now=when
                ),
                {"sessions": [[f"{tag[2]}x{i}y" for i in range(12)]]},
            ),
            (
                "ingest_conversations",
                lambda: e.ingest_conversations(sessions),
                {
                    "sessions": [[f"{tag[1]}s{k}x{i}y" for i in range(4)] for k in range(3)],
                    "ordered": True,
                },
            ),
            ("import_records", lambda: e.import_records(records, now=when), {"words": tag[3:6]}),
            ("forget", lambda: e.forget(self.doomed, USER), {"ids": list(self.doomed)}),
            (
                "feedback",
                lambda: e.feedback(USER, memory_ids=self.rated, helpful=True),
                {"rated": list(self.rated)},
            ),
            ("compress", lambda: e.compress(USER, force=True, now=when), {}),
        ]


async def cancelled(make: Callable[[], Awaitable[Any]], delay: float, by_timeout: bool) -> str:
    """Start the call, cancel it after ``delay`` seconds; how it ended."""
    try:
        if by_timeout:
            await asyncio.wait_for(make(), delay)
        else:
            task = asyncio.ensure_future(make())
            await asyncio.sleep(delay)
            task.cancel()
            await task
    except (asyncio.CancelledError, TimeoutError):
        return "cancelled"
    except Exception as exc:  # anything else is a finding
        return f"raised {type(exc).__name__}: {exc}"
    return "returned"


async def attack(db: Path, rounds: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    engine = AsyncEngine(settings=settings(db))
    outcomes: list[dict[str, Any]] = []
    problems: list[str] = []
    answered = 0
    for n in range(rounds):
        r = Round(engine, rng, n)
        await r.setup()
        for name, make, expect in r.calls():
            delay = rng.choice([0.0, 0.001, 0.005, 0.01, 0.02, 0.05])
            how = await cancelled(make, delay, by_timeout=(n + len(outcomes)) % 2 == 0)
            outcomes.append({"round": n, "call": name, "delay": delay, "ended": how, **expect})
            if how.startswith("raised"):
                problems.append(f"round {n} {name}: {how}")
        started = time.monotonic()
        try:
            await asyncio.wait_for(engine.context("which crate ships on a pallet?", USER), 120)
            answered += 1
        except Exception as exc:
            problems.append(f"round {n}: context() after the cancels: {type(exc).__name__}")
        if time.monotonic() - started > 60:
            problems.append(f"round {n}: context() took {time.monotonic() - started:.0f} s")
    # the last calls cancelled, then close() at once, with their threads still at work
    last = Round(engine, rng, rounds)
    await last.setup()
    tasks = []
    for name, make, expect in last.calls():
        tasks.append(asyncio.ensure_future(make()))
        outcomes.append({"round": rounds, "call": name, "delay": 0.0, "ended": "closed", **expect})
    await asyncio.sleep(0.005)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    closed = time.monotonic()
    try:
        await asyncio.wait_for(engine.close(), 120)
    except Exception as exc:
        problems.append(f"close(): {type(exc).__name__}: {exc}")
    close_s = time.monotonic() - closed
    return {
        "outcomes": outcomes,
        "problems": problems,
        "answered": answered,
        "close_s": round(close_s, 3),
    }


def verify(db: Path, outcomes: list[dict[str, Any]]) -> list[str]:
    """What each call wrote, read by a new engine once every thread is done."""
    broken: list[str] = []
    with Engine(settings=settings(db)) as e:
        everything = e.list(USER, limit=None)
        texts = "\n".join(m.content for m in everything)
        ids = {m.id for m in everything}
        by_id = {m.id: m for m in everything}
        for o in outcomes:
            label = f"round {o['round']} {o['call']} ({o['ended']})"
            if "words" in o:
                there = [w in texts for w in o["words"]]
                if any(there) and not all(there):
                    broken.append(f"{label}: {sum(there)} of {len(there)} written")
            for k, session in enumerate(o.get("sessions", [])):
                there = [w in texts for w in session]
                if any(there) and not all(there):
                    broken.append(f"{label}: session {k} has {sum(there)} of {len(there)} turns")
            if o.get("ordered"):
                whole = [all(w in texts for w in s) for s in o["sessions"]]
                if whole != sorted(whole, reverse=True):
                    broken.append(f"{label}: sessions stored out of order {whole}")
            if "ids" in o:
                gone = [i not in ids for i in o["ids"]]
                if any(gone) and not all(gone):
                    broken.append(f"{label}: {sum(gone)} of {len(gone)} forgotten")
            if "rated" in o:
                moved = [i in by_id and by_id[i].usefulness != 0.5 for i in o["rated"]]
                if any(moved) and not all(moved):
                    broken.append(f"{label}: {sum(moved)} of {len(moved)} rated")
        summaries = [m for m in everything if m.kind is Kind.SUMMARY]
        per_session: dict[str, int] = {}
        for s in summaries:
            per_session[s.source_session_id or ""] = (
                per_session.get(s.source_session_id or "", 0) + 1
            )
            sources = s.provenance.metadata.get("compressed_from") or []
            if not all(i in by_id and by_id[i].compressed for i in sources):
                broken.append(f"summary of {s.source_session_id}: a source missing or uncompressed")
        broken += [f"session {k}: {v} summaries" for k, v in per_session.items() if v > 1]
        sessions: dict[str, set[bool]] = {}
        for m in everything:
            if m.session_id and m.kind is not Kind.SUMMARY:
                sessions.setdefault(m.session_id, set()).add(m.compressed)
        broken += [f"session {k}: half compressed" for k, v in sessions.items() if len(v) > 1]
    check = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
    if check != "ok":
        broken.append(f"integrity_check: {check}")
    return broken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root, _ = private_environment("h2-async-cancel-")
    db = root / "store.db"
    before = {t.ident for t in threading.enumerate()}
    result = asyncio.run(attack(db, args.rounds, args.seed))
    gc.collect()  # a closed engine's idle side threads end once it is collected
    # the read pool (``engrain-read``) is the process's, shared by every engine, by design
    left = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before
        and t.is_alive()
        and t.name.startswith("engrain")
        and not t.name.startswith("engrain-read")
    ]
    broken = verify(db, result["outcomes"])
    ended: dict[str, dict[str, int]] = {}
    for o in result["outcomes"]:
        ended.setdefault(o["call"], {}).setdefault(o["ended"].split(":")[0], 0)
        ended[o["call"]][o["ended"].split(":")[0]] += 1
    summary = {
        "attack": "async_cancel",
        "rounds": args.rounds,
        "calls": len(result["outcomes"]),
        "ended": ended,
        "context_answers_between_rounds": result["answered"],
        "close_seconds": result["close_s"],
        "engine_threads_left_after_close": left,
        "problems": result["problems"],
        "broken": broken,
        "ok": not broken
        and not result["problems"]
        and not left
        and result["answered"] == args.rounds,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
