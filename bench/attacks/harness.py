"""What attacks that run rounds in child processes share (session 27, gathered from the
scripts of sessions 25 and 26).

**Random calls under a process limit** (``file_limit.py``: ``RLIMIT_FSIZE``,
``memory_limit.py``: ``RLIMIT_AS``). Each round is a child process (:func:`limited_child`)
that opens the SQLite store, sets its :class:`Limit`, makes random public calls (remember,
ingest_conversation, import of three records, forget, pin, update, compress, context,
recall, export) until :data:`FAILURES` of them failed or :data:`CALLS` were made, checks
that each failed call raised an ``EngrainError`` and left the user's memories as they were
(:func:`fingerprint`), then lifts the limit and must remember, import and answer in the
same engine. The parent (:func:`limited_rounds`) runs the rounds and after each checks the
store (:func:`check_store`): every acknowledged memory there, none forgotten back,
``integrity_check`` ok, at most one summary per session and none half compressed. A script
gives its limit and its name; ``file_limit.py`` adds its CLI checks.

**Processes asked by JSON lines** (``derived_files.py``, ``derived_rows.py``): a child
serving searches, one JSON line a request and one an answer (:class:`Asked`), each query
searched under each filter (:func:`searched`), and the answers compared with the exact
search's (:func:`compared`).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import random
import select
import sqlite3
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attack_report import finish, hash_engine, private_environment

from engrain import Engine
from engrain.errors import EngrainError

USER = "ada"
#: A round's child stops after this many failed calls, or :data:`CALLS` calls.
FAILURES = 12
CALLS = 60
#: Seconds before a child that hangs dumps every thread's stack and exits (its parent ends
#: it at :data:`ROUND_SECONDS`).
HANG_SECONDS = 240
ROUND_SECONDS = 300


# -- random calls under a process limit ---------------------------------------------------


class Limit(Protocol):
    """A process limit a round's child runs its calls under."""

    #: The limit, in the child's findings.
    limit: int
    #: Whether the child's findings are written after every call (a child that hangs and is
    #: ended still tells what it acknowledged); not where writing a file is what is limited.
    progress: bool
    #: Whether ``close()`` under the limit may raise an ``EngrainError`` (else any error of
    #: it is a finding).
    close_may_refuse: bool

    def start(self) -> None:
        """Set the limit (now, or at a moment of its own)."""

    def lifted(self) -> AbstractContextManager[None]:
        """The limit lifted inside the block (to read what a failed call left), set again
        after it."""

    def end(self) -> None:
        """Lift the limit for good."""


#: Makes a round's limit once its engine is open: ``(engine, db, slack, rng)``.
LimitOf = Callable[[Engine, Path, int, random.Random], Limit]


def fingerprint(engine: Any) -> list[tuple[Any, ...]]:
    """The user's memories as a call must leave them when it fails (summaries and the
    compressed flag left out: a background compression may write them meanwhile)."""
    return sorted(
        (m.id, m.content, m.pinned, m.superseded_by)
        for m in engine.list(USER, limit=None)
        if m.kind.value != "summary"
    )


@dataclass
class _Round:
    """What a round's child found, written to its ``out`` file."""

    engine: Engine
    rng: random.Random
    seed: int
    acked: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    died: list[str] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)
    n: int = 0

    def words(self, k: int, letter: str) -> str:
        return " ".join(f"{letter}{self.rng.randrange(10**6)}" for _ in range(k))

    def imported(self, prefix: str) -> list[str]:
        """The ids of the three records an import under ``prefix`` stored."""
        ids = [m.id for m in self.engine.list(USER, limit=None) if m.content.startswith(prefix)]
        if len(ids) != 3:
            self.broken.append(f"import {prefix} returned, {len(ids)} of 3 stored")
        return ids

    def ops(self, pick: str) -> dict[str, Callable[[], list[str]]]:
        """The public calls a step may make, each returning the ids it acknowledged;
        ``pick`` is the live memory the calls on one memory take."""
        engine, rng, tag = self.engine, self.rng, f"r{self.seed}c{self.n}"
        text = f"{tag} " + self.words(rng.randrange(5, 400), "w")
        turns = [{"speaker": "user" if i % 2 == 0 else "assistant",
                  "text": f"{tag}t{i} " + self.words(40, "v")}
                 for i in range(rng.randrange(2, 14))]  # fmt: skip
        records = [{"type": "remember", "user_id": USER,
                    "content": f"{tag}i{k} " + self.words(rng.randrange(5, 200), "u")}
                   for k in range(3)]  # fmt: skip

        def forget() -> list[str]:
            engine.forget([pick], USER)
            self.forgotten.append(pick)
            return []

        return {
            "remember": lambda: [engine.remember(text, USER).memory_id or ""],
            "conversation": lambda: [
                o.memory_id
                for o in engine.ingest_conversation(turns, USER, session_id=tag).outcomes
                if o.memory_id
            ],
            "import": lambda: (engine.import_records(records), self.imported(f"{tag}i"))[1],
            "forget": forget,
            "pin": lambda: (engine.pin(pick, USER), [])[1],
            "update": lambda: (engine.update(pick, USER, content=f"{tag} edited"), [])[1],
            "compress": lambda: (engine.compress(USER, force=True), [])[1],
            "context": lambda: (engine.context(f"what about {tag}?", USER), [])[1],
            "recall": lambda: (engine.recall(f"w{rng.randrange(10**6)}", USER), [])[1],
            "export": lambda: (list(engine.export_records(USER)), [])[1],
        }

    def step(self, limit: Limit) -> bool:
        """One random call; whether it failed."""
        live = [m.id for m in self.engine.list(USER, limit=None) if m.kind.value != "summary"]
        table = self.ops(self.rng.choice(live))
        name = self.rng.choice(list(table))
        n, failed = self.n, True
        try:
            before: list[tuple[Any, ...]] | None = fingerprint(self.engine)
        except EngrainError:
            before = None  # the read failed under the limit: cleanly; not compared
        except Exception as exc:
            self.broken.append(f"call {n} list: {type(exc).__name__}: {exc} (outside the tree)")
            before = None
        try:
            self.acked += table[name]()
            self.calls.append({"call": name, "ok": True})
            failed = False
        except EngrainError as exc:
            self.calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                               "message": exc.message[:120]})  # fmt: skip
            with limit.lifted():  # room to read what it left
                after = fingerprint(self.engine)
            if before is not None and after != before:
                self.broken.append(f"call {n} {name} failed ({exc.message[:80]}) yet changed "
                                   f"{len(set(after) ^ set(before))} memories")  # fmt: skip
        except Exception as exc:
            self.broken.append(f"call {n} {name}: {type(exc).__name__}: {exc} (outside the tree)")
            self.calls.append({"call": name, "ok": False, "error": type(exc).__name__,
                               "trace": traceback.format_exc()[-600:]})  # fmt: skip
        self.n += 1
        return failed

    def space_returned(self) -> dict[str, Any]:
        """Once the limit is lifted the same engine remembers, imports and answers."""
        engine, seed = self.engine, self.seed
        after: dict[str, Any] = {}
        try:
            after["remember"] = engine.remember(f"round {seed} space returned", USER).memory_id
            self.acked.append(after["remember"] or "")
            engine.import_records([{"type": "remember", "user_id": USER,
                                    "content": f"r{seed}back{k} " + self.words(30, "z")}
                                   for k in range(3)])  # fmt: skip
            self.acked += self.imported(f"r{seed}back")
            text = engine.context(f"round {seed} space returned?", USER).text
            after["context_has_it"] = "space returned" in text
            if not after["context_has_it"]:
                self.broken.append("context() after the limit was lifted misses the new memory")
        except Exception as exc:
            self.broken.append(f"after the limit was lifted: {type(exc).__name__}: {exc}")
        return after

    def write(self, out: Path, limit: Limit, **more: Any) -> None:
        out.write_text(json.dumps({
            "limit": limit.limit, "calls": self.calls, "acked": self.acked,
            "forgotten": self.forgotten, "broken": self.broken, "died": self.died,
            "logged": self.logged, **more,
        }))  # fmt: skip


def limited_child(
    db: Path, seed: int, slack: int, auto: bool, close_limited: bool, out: Path, limit_of: LimitOf
) -> None:
    """One round: random public calls under the limit ``limit_of`` makes, then the limit
    lifted (module docstring); what it found written to ``out`` as JSON."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # a hang: every stack, then out
    died: list[str] = []
    threading.excepthook = lambda a: died.append(f"{a.thread.name if a.thread else '?'}: "
                                                 f"{a.exc_type.__name__}")  # fmt: skip
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage()[:160])

    logging.getLogger("engrain").addHandler(Keep())
    engine = hash_engine(db, auto_compress=auto, compression_threshold=2)
    found = _Round(engine, random.Random(seed), seed, died=died, logged=logged)
    engine.remember(f"round {seed} opened the store", USER)
    limit = limit_of(engine, db, slack, found.rng)
    limit.start()
    failed = 0
    while failed < FAILURES and found.n < CALLS:
        failed += found.step(limit)
        if limit.progress:
            found.write(out, limit)
    if close_limited:  # the derived indexes' images and stamps saved at close, limited
        try:
            engine.close()
        except Exception as exc:
            if not (limit.close_may_refuse and isinstance(exc, EngrainError)):
                found.broken.append(f"close() under the limit: {type(exc).__name__}: {exc}")
    limit.end()
    if close_limited:
        found.engine = hash_engine(db, auto_compress=auto, compression_threshold=2)
    after_space = found.space_returned()
    found.engine.close()
    found.write(out, limit, after_space=after_space)


def check_store(db: Path, acked: set[str], forgotten: set[str]) -> list[str]:
    """What is wrong with the store after a round: ``integrity_check``, an acknowledged
    memory missing, a forgotten one stored, a session summarised twice or half compressed."""
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


@dataclass
class Rounds:
    """What the parent gathered over the rounds: its private directory and environment,
    the store, each round's record, every acknowledged and forgotten id."""

    root: Path
    env: dict[str, str]
    db: Path
    rounds: list[dict[str, Any]]
    acked: set[str]
    forgotten: set[str]


#: What a script checks after the rounds (``file_limit.py``: the CLI under a limit): the
#: summary's entries it adds and whether they held.
After = Callable[[Rounds], tuple[dict[str, Any], bool]]


def limited_main(
    doc: str,
    script: str,
    limit_of: LimitOf,
    *,
    attack: str,
    prefix: str,
    rounds: int,
    seed: int,
    slack: int,
    after: After | None = None,
) -> None:
    """A limit attack's command line (``--rounds``, ``--seed``, ``--json``): the rounds
    (:func:`limited_rounds`), then ``after``, and the summary printed (``attack_report.
    finish``: exit 0 only when no round broke and ``after`` held); as a round's child
    (``--child``), that round."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--child", nargs=6, metavar=("DB", "SEED", "SLACK", "AUTO", "CLOSE", "OUT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.child:
        db, child_seed, child_slack, auto, close_limited, out = args.child
        limited_child(Path(db), int(child_seed), int(child_slack), auto == "1",
                      close_limited == "1", Path(out), limit_of)  # fmt: skip
        return
    done = limited_rounds(script, prefix, args.rounds, args.seed, slack)
    more, held = after(done) if after is not None else ({}, True)
    finish({
        "attack": attack,
        "rounds": done.rounds,
        "acknowledged": len(done.acked),
        "forgotten": len(done.forgotten),
        "calls": sum(r["calls"] for r in done.rounds),
        "failed_calls": sum(r["failed"] for r in done.rounds),
        **more,
        "ok": not any(r["broken"] for r in done.rounds) and held,
    }, args.json)  # fmt: skip


def limited_rounds(script: str, prefix: str, count: int, seed: int, slack: int) -> Rounds:
    """``count`` rounds, each a child of ``script`` with a slack drawn below ``slack``,
    ``auto_compress`` every other round and ``close()`` under the limit every third; the
    store checked after each (:func:`check_store`)."""
    root, env = private_environment(prefix)
    db = root / "store.db"
    rng = random.Random(seed)
    done = Rounds(root, env, db, [], set(), set())
    for n in range(count):
        out = root / f"round{n}.json"
        round_slack = rng.randrange(0, slack)
        auto, close_limited = n % 2 == 1, n % 3 == 2
        try:
            run = subprocess.run([sys.executable, script, "--child", str(db),
                                  str(seed * 100 + n), str(round_slack), "1" if auto else "0",
                                  "1" if close_limited else "0", str(out)], env=env,
                                 capture_output=True, text=True, timeout=ROUND_SECONDS,
                                 check=False)  # fmt: skip
            code, stderr = run.returncode, run.stderr
        except subprocess.TimeoutExpired:
            code, stderr = None, f"hung for {ROUND_SECONDS} s"
        result = json.loads(out.read_text()) if out.exists() else {}
        broken = list(result.get("broken", []))
        if code != 0:
            broken.append(f"child exit {code}: {stderr[-4000:]}")
        broken += [f"thread died: {d}" for d in result.get("died", [])]
        done.acked |= set(result.get("acked", []))
        done.forgotten |= set(result.get("forgotten", []))
        broken += check_store(db, done.acked, done.forgotten)
        calls = result.get("calls", [])
        errors: dict[str, int] = {}
        for c in calls:
            if not c["ok"]:
                errors[c["error"]] = errors.get(c["error"], 0) + 1
        messages = sorted({c.get("message", "") for c in calls if not c["ok"]})
        logged = result.get("logged", [])
        done.rounds.append({"round": n, "slack": round_slack, "auto_compress": auto,
                            "closed_under_the_limit": close_limited, "calls": len(calls),
                            "failed": sum(not c["ok"] for c in calls), "errors": errors,
                            "messages": messages[:6], "logged": sorted(set(logged))[:6],
                            "logged_count": len(logged), "broken": broken})  # fmt: skip
        print(f"round {n}: slack {round_slack}, {len(calls)} calls, {errors}, broken "
              f"{broken[:3]}", file=sys.stderr)  # fmt: skip
    return done


# -- processes asked by JSON lines ----------------------------------------------------------

#: Seconds a child has to answer one request.
ANSWER_SECONDS = 180.0
#: Memories each search asks for.
K = 10


class Asked:
    """A child process (``command``, with ``env``) asked by JSON lines: one request a line
    on its stdin, one answer a line on its stdout; ``{"close": true}`` closes it, and it
    answers ``{"closed": true}``."""

    def __init__(self, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            list(command), env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def ask(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The child's answer, or ``None`` (it died or took longer than ANSWER_SECONDS)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_SECONDS)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def close(self) -> tuple[bool, str]:
        """Close the child's store and wait for it: whether it ended cleanly, its stderr's end."""
        answer = self.ask({"close": True})
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        return bool(answer and answer.get("closed")) and self.proc.returncode == 0, err[-1500:]

    def end(self) -> str:
        """Kill the child (it hangs or died): its stderr's end and its exit code."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        return f"exit {self.proc.returncode}: {err[-1500:]}"


def compared(
    answers: list[dict[str, list[str]]],
    expected: list[dict[str, list[str]]],
    forgotten: set[str],
    names: Sequence[str] = ("pool", "typed"),
) -> tuple[list[tuple[int, str]], list[str]]:
    """Each search's answer against the exact search's: the (query, search) pairs whose ids
    differ, and the forgotten ids any answer returned."""
    pairs = list(zip(answers, expected, strict=True))
    wrong = [(i, name) for i, (got, want) in enumerate(pairs) for name in names
             if got.get(name) != want[name]]  # fmt: skip
    shown = {i for row in answers for ids in row.values() for i in ids} & forgotten
    return wrong, sorted(shown)


def searched(
    store: Any, user: str, query: Sequence[float], filters: dict[str, Any], errors: list[str]
) -> dict[str, list[str]]:
    """The ids ``store.search`` finds for ``query`` (the k nearest, :data:`K`) under each of
    ``filters``, by name; a search that fails is noted in ``errors``, ``"engrain …"`` for an
    ``EngrainError`` and ``"OTHER …"`` (its traceback on stderr) for anything else."""
    import numpy as np

    row: dict[str, list[str]] = {}
    for name, flt in filters.items():
        try:
            found = store.search(user, np.asarray(query, np.float32), K, flt)
            row[name] = [m.id for m, _ in found]
        except EngrainError as exc:
            errors.append(f"engrain {type(exc).__name__}: {exc}")
        except Exception as exc:
            errors.append(f"OTHER {type(exc).__name__}: {exc}")
            traceback.print_exc()
    return row
