"""Attack: an explicit key meets ``corrects=`` — in every order, and from two processes.

A key the caller gives is one entry (``docs/concurrency.md``, sessions 22–23: "one live
memory per key"); ``corrects=id`` supersedes that memory ("never injected again"). Each
case below writes a key's first value (a memory holding key K), then one or two more
values of K through ``remember`` with ``key=``, ``corrects=`` or both, every value
carrying the case's token. Rule: afterwards exactly one live (not superseded) memory
holds a value of K, and it is the last value written — none of the older values is still
served beside it.

Sequential cases (in-memory, SQLite and, with ``--postgres``, PostgreSQL stores):

- ``keyed_correction_of_another``: K's memory exists; ``remember(v2, key=K, corrects=X)``
  corrects an unrelated memory X under K.
- ``correction_then_key``: ``remember(v2, corrects=<K's memory>)`` without a key, then
  ``remember(v3, key=K)``.
- ``kind_correction_then_key``: the same with ``kind="correction"``.
- ``keyed_correction_of_holder``: ``remember(v2, key=K, corrects=<K's memory>)``.
- ``two_keyed_corrections``: two keyed corrections under K of two unrelated memories.

Races (SQLite and, with ``--postgres``, PostgreSQL; two spawned processes with an engine
each on one store, released together by a barrier, ``--rounds`` each):

- ``race_keyed_correction_vs_key``: ``remember(vA, key=K, corrects=X)`` against
  ``remember(vB, key=K)``.
- ``race_correction_vs_key``: ``remember(vA, corrects=<K's memory>)`` against
  ``remember(vB, key=K)``.
- ``race_two_corrections``: two ``remember(v, corrects=<K's memory>)``; the one that
  commits second must be refused (``ValidationError`` "already superseded", as it is one
  after the other), not stored as a second live correction.

A call may raise ``EngrainError`` only where a sequential call would (the race of two
corrections of one memory); anything else is a failure. Prints a JSON summary; exits 0
only when every case left one live value and no call failed.

    PYTHONPATH=src .venv/bin/python bench/attacks/key_corrects.py [--rounds 12] \
        [--postgres] [--json bench/results/attack-key-corrects-s24-h2.json]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish
from key_race import store_url

from engrain import Engine
from engrain.config import Settings
from engrain.errors import EngrainError
from engrain.store import MemoryStore

KEY = "timezone"
#: Unrelated words per value, so no two values are near-duplicates of each other.
WORDS = ("amber quartz falcon", "birch cobalt heron", "cedar magnet lynx",
         "dune pepper otter", "ember violin moose")  # fmt: skip


def value(token: str, n: int) -> str:
    """The ``n``-th value of the case ``token``."""
    return f"{token} {WORDS[n % len(WORDS)]} value {n}"


def live_values(engine: Engine, user: str, token: str) -> list[str]:
    """The contents of the user's live memories holding one of ``token``'s values."""
    mine = [m for m in engine.list(user, limit=10_000) if m.superseded_by is None]
    return sorted(m.content for m in mine if token in m.content and " value " in m.content)


def _first(engine: Engine, user: str, token: str) -> tuple[str, str]:
    """K's first value and an unrelated memory: their ids."""
    held = engine.remember(value(token, 0), user, key=KEY)
    other = engine.remember(f"unrelated {token} note about lunch", user)
    assert held.memory_id and other.memory_id
    return held.memory_id, other.memory_id


def _keyed_correction_of_another(e: Engine, u: str, t: str) -> str:
    _, other = _first(e, u, t)
    e.remember(value(t, 1), u, key=KEY, corrects=other)
    return value(t, 1)


def _correction_then_key(e: Engine, u: str, t: str, kind: str = "fact") -> str:
    held, _ = _first(e, u, t)
    e.remember(value(t, 1), u, kind, corrects=held)
    e.remember(value(t, 2), u, key=KEY)
    return value(t, 2)


def _kind_correction_then_key(e: Engine, u: str, t: str) -> str:
    return _correction_then_key(e, u, t, "correction")


def _keyed_correction_of_holder(e: Engine, u: str, t: str) -> str:
    held, _ = _first(e, u, t)
    e.remember(value(t, 1), u, key=KEY, corrects=held)
    return value(t, 1)


def _two_keyed_corrections(e: Engine, u: str, t: str) -> str:
    _, other = _first(e, u, t)
    third = e.remember(f"another {t} note about parking", u).memory_id
    e.remember(value(t, 1), u, key=KEY, corrects=other)
    e.remember(value(t, 2), u, key=KEY, corrects=third)
    return value(t, 2)


SEQUENTIAL: dict[str, Callable[[Engine, str, str], str]] = {
    "keyed_correction_of_another": _keyed_correction_of_another,
    "correction_then_key": _correction_then_key,
    "kind_correction_then_key": _kind_correction_then_key,
    "keyed_correction_of_holder": _keyed_correction_of_holder,
    "two_keyed_corrections": _two_keyed_corrections,
}


def sequential(engine: Engine, backend: str) -> list[dict[str, Any]]:
    """Each sequential case once on ``engine``, a user of its own."""
    results = []
    for name, case in SEQUENTIAL.items():
        user, token = f"{backend}-{name}", f"tok{name.replace('_', '')}"
        error = None
        try:
            last = case(engine, user, token)
        except Exception as exc:  # the attack records any failure
            error, last = f"{type(exc).__name__}: {exc}", ""
        values = live_values(engine, user, token)
        results.append({"backend": backend, "case": name, "live": values, "error": error,
                        "ok": error is None and values == [last]})  # fmt: skip
    return results


RACES = ("race_keyed_correction_vs_key", "race_correction_vs_key", "race_two_corrections")


def racer(url: str, data_dir: str, side: int, race: str, rounds: int, barrier: Any,
          queue: Any) -> None:  # fmt: skip
    """One side of ``race``: each round waits for the parent's ids, then writes."""
    warnings.simplefilter("ignore")
    engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(data_dir)))
    for r in range(rounds):
        user, token = f"{race}-{r}", f"tok{race.replace('_', '')}r{r}"
        held, other = barrier_ids(barrier, engine, user)
        text = value(token, 1 + side)
        outcome = "ok"
        try:
            if race == "race_keyed_correction_vs_key":
                if side == 0:
                    engine.remember(text, user, key=KEY, corrects=other)
                else:
                    engine.remember(text, user, key=KEY)
            elif race == "race_correction_vs_key":
                if side == 0:
                    engine.remember(text, user, corrects=held)
                else:
                    engine.remember(text, user, key=KEY)
            else:
                engine.remember(text, user, corrects=held)
        except EngrainError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # outside the error tree: a failure
            outcome = f"FAILED {type(exc).__name__}: {exc} {traceback.format_exc()[-300:]}"
        queue.put((r, side, outcome))
        barrier.wait()  # both wrote; the parent counts
    engine.close()


def barrier_ids(barrier: Any, engine: Engine, user: str) -> tuple[str, str]:
    """Wait until the parent wrote the round's first value, then read its ids."""
    barrier.wait()
    mine = {m.content: m.id for m in engine.list(user, limit=100)}
    held = next(i for c, i in mine.items() if "value 0" in c)
    other = next(i for c, i in mine.items() if "lunch" in c)
    return held, other


def race(url: str, tmp: str, name: str, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` rounds of ``name`` between two spawned processes on ``url``."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=racer, args=(url, tmp, side, name, rounds, barrier, queue))
             for side in range(2)]  # fmt: skip
    for p in procs:
        p.start()
    engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(tmp)))
    results = []
    for r in range(rounds):
        user, token = f"{name}-{r}", f"tok{name.replace('_', '')}r{r}"
        _first(engine, user, token)
        barrier.wait()  # released: both write
        barrier.wait()  # both wrote
        outcomes = dict(queue.get(timeout=300)[1:] for _ in range(2))
        values = live_values(engine, user, token)
        failed = [o for o in outcomes.values() if o.startswith("FAILED")]
        refused = [o for o in outcomes.values() if o != "ok" and not o.startswith("FAILED")]
        # two corrections of one memory: one must be refused, as one after the other;
        # elsewhere every call succeeds
        allowed = 1 if name == "race_two_corrections" else 0
        ok = len(values) == 1 and not failed and len(refused) == allowed
        results.append({"case": name, "round": r, "live": values, "outcomes": outcomes,
                        "ok": ok})  # fmt: skip
    for p in procs:
        p.join(120)
    engine.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--postgres", action="store_true",
                        help="also on a private PostgreSQL server started for the run")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    backends = ["sqlite", "postgres"] if args.postgres else ["sqlite"]
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="key-corrects-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp))
        cases += sequential(Engine(settings=settings, store=MemoryStore()), "memory")
        for backend in backends:
            with (
                tempfile.TemporaryDirectory(prefix=f"key-corrects-{backend}-") as d,
                store_url(backend, d) as url,
            ):
                engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(d)))
                cases += sequential(engine, backend)
                engine.close()
                for name in RACES:
                    cases += [{"backend": backend, **c} for c in race(url, d, name, args.rounds)]
    broken = [c for c in cases if not c["ok"]]
    by_case: dict[str, list[int]] = {}
    for c in cases:
        counts = by_case.setdefault(f"{c['backend']}:{c['case']}", [0, 0])
        counts[0] += 1
        counts[1] += not c["ok"]
    summary = {
        "attack": "key_corrects", "backends": ["memory", *backends], "rounds": args.rounds,
        "broken_of_run_by_case": {k: f"{b} of {n}" for k, (n, b) in by_case.items()},
        "broken": len(broken), "examples": broken[:8], "ok": not broken,
    }  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
