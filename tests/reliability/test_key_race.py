"""Two engines remembering one new procedural key at once leave one memory under it.

A procedural memory's key makes it a key-value entry: "the same preference restated
updates one entry" (docs/decisions.md). The planner looks the key up before the write
transaction, so two engines (two processes, or two engines of one process) both found the
key free and both inserted (``bench/attacks/key_race.py``: 5–7 of 20 rounds left two
memories). Each write now checks what its plan found inside its transaction
(``KeyClaim``) and the engine plans again when another engine wrote the key meanwhile:
exactly one live memory per key, holding one side's value with the other's in its history
(no write lost).

Near-identical values under two different keys at once (``remember_twins``) leave one
memory under each key, each with its own value: a key the caller gives is an identity,
never merged into another key's near-duplicate (session 23)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from engrain.model import Memory
from tests.reliability import helpers, workers
from tests.reliability.processes import SPAWN, results, run_together
from tests.reliability.scale import scales

USER = "ada"


def _race_in_processes(work: Any, url: str, data_dir: Path, tmp_path: Path, rounds: int) -> None:
    """Two spawned processes, an engine each on one store, run ``work`` (a barrier per
    round); both exit 0, every remember done and none failed."""
    barrier = SPAWN.Barrier(2)
    outs = [tmp_path / f"side{n}.json" for n in (0, 1)]
    jobs = [(work, (n, url, str(data_dir), USER, rounds, barrier, str(out)))
            for n, out in enumerate(outs)]  # fmt: skip
    assert run_together(jobs, timeout=300) == [0, 0]
    sides = results(outs)
    assert not any(s["errors"] for s in sides), [s["examples"] for s in sides]
    assert [s["ops"] for s in sides] == [{"remember": rounds}] * 2


def _race_in_threads(url: str, data_dir: Path, rounds: int, *, twins: bool) -> None:
    """Two threads, each with an engine of its own on one store (no shared engine lock), run
    :func:`workers.remember_rounds` (``twins``: near-duplicates under their own keys); none
    failed."""
    engines = [helpers.open_engine(url, data_dir, auto_compress=False) for _ in (0, 1)]
    barrier = threading.Barrier(2)
    tallies = [helpers.Tally(), helpers.Tally()]
    threads = [threading.Thread(target=workers.remember_rounds,
                                args=(engines[n], n, USER, rounds, barrier, tallies[n]),
                                kwargs={"twins": twins})
               for n in (0, 1)]  # fmt: skip
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    finally:
        for engine in engines:
            engine.close()
    assert not any(t.errors for t in tallies), [t.report() for t in tallies]


def _live_memories(url: str, data_dir: Path, rounds: int) -> list[Memory]:
    """The user's live memories, read by a new engine after the race."""
    engine = helpers.open_engine(url, data_dir, auto_compress=False)
    try:
        memories = engine.list(USER, limit=10 * rounds + 10)
    finally:
        engine.close()
    return [m for m in memories if m.superseded_by is None]


def _assert_one_memory_per_key(url: str, data_dir: Path, rounds: int) -> None:
    """Every round's key holds exactly one live memory, whose value and history hold both
    sides' values."""
    memories = _live_memories(url, data_dir, rounds)
    for r in range(rounds):
        live = [m for m in memories if m.key == workers.round_key(r)]
        assert len(live) == 1, (r, [m.content for m in live])
        (memory,) = live
        history = [h["content"] for h in memory.provenance.metadata.get("history", [])]
        assert sorted([memory.content, *history]) == sorted(
            workers.keyed_value(n, r) for n in (0, 1)
        )


def _assert_one_memory_per_twin_key(url: str, data_dir: Path, rounds: int) -> None:
    """Each side's key of every round holds one live memory: its own value, no history."""
    live = sorted((m.key or "", m.content, len(m.provenance.metadata.get("history", [])))
                  for m in _live_memories(url, data_dir, rounds))  # fmt: skip
    assert live == sorted(
        (workers.twin_key(n, r), workers.twin_value(n, r), 0) for r in range(rounds) for n in (0, 1)
    )


@pytest.mark.parametrize("rounds", scales(12, 60))
def test_two_processes_remembering_one_key_leave_one_memory(
    url: str, data_dir: Path, tmp_path: Path, rounds: int
) -> None:
    """Two spawned processes, an engine each on one store, remember under the same new key
    at once (a barrier per round)."""
    _race_in_processes(workers.remember_keys, url, data_dir, tmp_path, rounds)
    _assert_one_memory_per_key(url, data_dir, rounds)


@pytest.mark.parametrize("rounds", scales(20, 100))
def test_two_engines_in_threads_remembering_one_key_leave_one_memory(
    url: str, data_dir: Path, rounds: int
) -> None:
    """Two threads, each with an engine of its own on one store (no shared engine lock)."""
    _race_in_threads(url, data_dir, rounds, twins=False)
    _assert_one_memory_per_key(url, data_dir, rounds)


@pytest.mark.parametrize("rounds", scales(12, 60))
def test_two_processes_remembering_near_duplicates_under_two_keys_keep_both(
    url: str, data_dir: Path, tmp_path: Path, rounds: int
) -> None:
    """Two spawned processes at once (a barrier per round), each under its own key, the
    two values near-duplicates."""
    _race_in_processes(workers.remember_twins, url, data_dir, tmp_path, rounds)
    _assert_one_memory_per_twin_key(url, data_dir, rounds)


@pytest.mark.parametrize("rounds", scales(20, 100))
def test_two_engines_in_threads_remembering_near_duplicates_under_two_keys_keep_both(
    url: str, data_dir: Path, rounds: int
) -> None:
    """Two threads, an engine each, near-duplicate values under their own keys."""
    _race_in_threads(url, data_dir, rounds, twins=True)
    _assert_one_memory_per_twin_key(url, data_dir, rounds)


def test_a_key_written_between_plan_and_write_is_updated_not_doubled(
    url: str, data_dir: Path
) -> None:
    """Deterministically: engine B remembers under the key after engine A planned (found it
    free) and before A writes. A's write is refused inside its transaction, A plans again
    and updates B's memory: one memory, A's value (the later) with B's in its history."""
    a = helpers.open_engine(url, data_dir, auto_compress=False)
    b = helpers.open_engine(url, data_dir, auto_compress=False)
    plan = a.planner.item
    plans: list[Any] = []

    def plan_then_b_writes(*args: Any, **kwargs: Any) -> Any:
        outcome = plan(*args, **kwargs)
        plans.append(outcome)
        if len(plans) == 1:
            b.remember("deploy with make b", USER, kind="golden_path", key="deploy")
        return outcome

    a.planner.item = plan_then_b_writes
    try:
        outcome = a.remember("deploy with make a", USER, kind="golden_path", key="deploy")
        live = [m for m in b.list(USER) if m.key == "deploy" and m.superseded_by is None]
    finally:
        a.close()
        b.close()
    assert [p.action for p in plans] == ["stored", "merged"]  # planned twice
    assert outcome.action == "merged"
    assert [m.id for m in live] == [outcome.memory_id]
    assert live[0].content == "deploy with make a"
    assert [h["content"] for h in live[0].provenance.metadata["history"]] == ["deploy with make b"]
