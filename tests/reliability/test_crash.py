"""kill -9 of a writer process in the middle of remember / ingest / conversations / bulk
imports: every id the child reported (in a ledger flushed after each call returned) is in
the store, every import batch is there entirely or not at all, ``PRAGMA integrity_check``
says ok and a new engine opens the store and answers."""

from __future__ import annotations

import collections
import json
import random
import time
from pathlib import Path

import pytest

from tests.reliability import helpers, workers
from tests.reliability.processes import SPAWN


def _kill_once(url: str, data_dir: Path, ledger: Path, seed: int, early: bool) -> bool:
    """Start a writer, SIGKILL it at a random moment; whether it was still running."""
    ready = SPAWN.Event()
    proc = SPAWN.Process(target=workers.crash_writer,
                         args=(url, str(data_dir), seed, str(ledger), ready))  # fmt: skip
    proc.start()
    rng = random.Random(seed)
    if not early:
        while not ready.wait(timeout=1) and proc.is_alive():
            pass
        time.sleep(rng.uniform(0.1, 1.5))
    else:  # while the engine opens the store and migrates
        time.sleep(rng.uniform(0.3, 1.2))
    alive = proc.is_alive()
    proc.kill()
    proc.join(timeout=60)
    return alive


def _check(url: str, ledger: Path) -> dict[str, object]:
    committed: set[tuple[str, str]] = set()
    batches: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
    done: set[str] = set()
    for tag, user, memory_id in helpers.Ledger.read([ledger]):
        if tag == "C":
            committed.add((user, memory_id))
        elif tag.startswith("I."):
            batches[tag[2:]].add((user, memory_id))
        elif tag.startswith("B."):
            done.add(tag[2:])
    for batch in done:
        committed |= batches[batch]
    path = helpers.sqlite_path(url)
    present = helpers.stored_ids(url) if path is None or path.exists() else set()
    partial = [b for b, ids in batches.items() if 0 < len(ids & present) < len(ids)]
    return {
        "committed": len(committed), "rows": len(present),
        "lost": sorted(committed - present)[:5], "lost_count": len(committed - present),
        "batches": len(batches), "batches_committed": len(done), "partial_batches": partial,
        "integrity": helpers.integrity_check(path) if path and path.exists() else "n/a",
        "users": sorted({user for user, _ in committed}),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "runs"),
    [
        pytest.param("sqlite", 3, id="sqlite-fast", marks=pytest.mark.timeout(120)),
        pytest.param("sqlite", 40, id="sqlite-long",
                     marks=[pytest.mark.reliability, pytest.mark.timeout(1500)]),
        pytest.param("postgres", 40, id="postgres-long",
                     marks=[pytest.mark.reliability, pytest.mark.timeout(1500)]),
    ],
)  # fmt: skip
def test_kill_9_loses_nothing_reported(
    backend: str, runs: int, request: pytest.FixtureRequest, tmp_path: Path, data_dir: Path
) -> None:
    """``runs`` SIGKILLs of a writer, checked after each one and at the end."""
    url = (request.getfixturevalue("sqlite_url") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))  # fmt: skip
    ledger = tmp_path / "ledger"
    rng = random.Random(20251123)
    kills = 0
    for run in range(runs):
        early = run > 0 and rng.random() < 0.1
        kills += _kill_once(url, data_dir, ledger, rng.randrange(2**31), early)
        result = _check(url, ledger)
        print(f"\nkill {run}: {json.dumps({'killed': kills, **result})}")
        assert not result["lost_count"], result["lost"]
        assert not result["partial_batches"]
        assert result["integrity"] in ("ok", "n/a")
    assert kills == runs  # each child was still writing when killed
    # on a loaded machine a few short runs may commit nothing for one of the users: only
    # a user the ledger says was committed must have memories (and someone must be)
    users = result["users"]
    assert isinstance(users, list) and users
    engine = helpers.open_engine(url, data_dir, auto_compress=False)
    try:
        for user in ("ada", "bob", "cyd"):
            engine.context("what do you remember about this project?", user)
            assert engine.list(user, limit=5) or user not in users, user
    finally:
        engine.close()
