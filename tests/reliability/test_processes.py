"""Processes sharing one store: writer and reader processes at once (readers write too: use
counts, context records), then one writer process beside a process whose threads read.
No call may fail (issue 11: ``database is locked`` came back after 0 ms because the version
check ran outside the busy timeout), no id a writer reported may be missing, the SQLite file
stays healthy and a fresh engine answers."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import helpers, workers
from tests.reliability.processes import results, run_together
from tests.reliability.scale import scales


def _run(url: str, data_dir: Path, tmp_path: Path, roles: list[tuple[str, int]],
         seconds: float) -> dict[str, Any]:  # fmt: skip
    helpers.open_engine(url, data_dir).close()  # migrate once, before the race
    outs, jobs = [], []
    for index, (role, threads) in enumerate(roles):
        out = tmp_path / f"{role}{index}"
        outs.append(out)
        jobs.append((workers.churn, (role, index, url, str(data_dir), seconds, threads,
                                     str(out))))  # fmt: skip
    codes = run_together(jobs, timeout=seconds + 180)
    tally = helpers.Tally()
    background: collections.Counter[str] = collections.Counter()
    for r in results([Path(f"{o}.json") for o in outs]):
        tally.merge(r)
        background.update(r.get("background_errors", {}))
    committed: dict[str, set[str]] = collections.defaultdict(set)
    for _, user, memory_id in helpers.Ledger.read(Path(f"{o}.ids") for o in outs):
        committed[user].add(memory_id)
    present = helpers.stored_ids(url)
    lost = sorted((u, i) for u, ids in committed.items() for i in ids if (u, i) not in present)
    path = helpers.sqlite_path(url)
    engine = helpers.open_engine(url, data_dir)
    try:
        answers = all(engine.context("what do we know?", u) is not None for u in workers.USERS)
    finally:
        engine.close()
    summary = {
        "processes": dict(collections.Counter(f"{r} ({t} threads)" for r, t in roles)),
        "seconds": seconds, "exit_codes": codes, "ops": dict(tally.ops),
        "errors": dict(tally.errors), "background_errors": dict(background),
        "committed": sum(len(v) for v in committed.values()), "rows": len(present),
        "lost": len(lost), "lost_examples": lost[:5],
        "integrity": helpers.integrity_check(path) if path else "n/a",
        "engine_after": answers,
    }  # fmt: skip
    print(f"\nprocesses: {json.dumps(summary)}")
    assert codes == [0] * len(roles)
    assert not tally.errors, tally.report()
    assert not background
    assert summary["committed"] > 0
    assert not lost
    assert summary["integrity"] in ("ok", "n/a")
    assert answers
    return summary


@pytest.mark.parametrize("size", scales((2, 1, 5.0), (8, 4, 60.0)))
def test_writer_and_reader_processes(
    url: str, data_dir: Path, tmp_path: Path, size: tuple[int, int, float]
) -> None:
    """Writers and readers, one engine per process, on one store."""
    writers, readers, seconds = size
    roles = [("writer", 1)] * writers + [("reader", 1)] * readers
    _run(url, data_dir, tmp_path, roles, seconds)


@pytest.mark.parametrize("seconds", scales(5.0, 60.0))
def test_writer_process_beside_reading_threads(
    url: str, data_dir: Path, tmp_path: Path, seconds: float
) -> None:
    """One writer process while four threads of another process share an engine to read."""
    _run(url, data_dir, tmp_path, [("writer", 1), ("reader", 4)], seconds)
