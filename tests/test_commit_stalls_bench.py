"""``bench/commit_stalls.py``: its percentiles, and the timing of a store's transactions
(the store's own, entered and left as before)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import commit_stalls  # noqa: E402

import engrain.store.sqlite as sqlite_module  # noqa: E402
from engrain import Engine, Settings  # noqa: E402
from engrain.errors import StoreError  # noqa: E402


def test_summary_reads_the_percentiles_of_the_values() -> None:
    values = [float(v) for v in range(1, 101)]  # 1 … 100 ms
    assert commit_stalls.summary(values) == {
        "p50": 51.0, "p90": 91.0, "p95": 96.0, "mean": 50.5, "n": 100,
    }  # fmt: skip
    assert commit_stalls.summary([]) == {}


def test_stalls_tells_the_commits_during_and_first_after_a_pass() -> None:
    commits = [(0.0, 0.001), (0.010, 0.030), (0.040, 0.041), (0.100, 0.120), (0.130, 0.131)]
    passes = [(0.015, 0.020), (0.032, 0.036), (0.050, 0.090)]
    assert commit_stalls.stalls(commits, passes) == {
        "slow_commits": 2,  # the two of 20 ms
        "slow_commits_during_a_pass": 1,  # the one the first pass overlapped
        "first_commits_after_a_pass": 2,  # the third and the fourth commits
        "slow_first_commits_after_a_pass": 1,  # the fourth
    }
    assert commit_stalls.stalls(commits, [])["first_commits_after_a_pass"] == 0


def test_instrument_times_each_commit_and_keeps_the_store_s_own_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the original is restored after the test (instrument replaces it for the process)
    monkeypatch.setattr(
        sqlite_module.SQLiteStore, "_transaction", sqlite_module.SQLiteStore._transaction
    )
    for name in ("record_uses", "_begin_log"):
        monkeypatch.setattr(
            sqlite_module.SQLiteStore, name, getattr(sqlite_module.SQLiteStore, name)
        )
    spent: dict[str, list[Any]] = {"begin_wall": [], "commit_wall": [], "commit_cpu": [],
                                   "commit_spans": [], "uses_wall": [],
                                   "log_begun_wall": []}  # fmt: skip
    commit_stalls.instrument(spent)
    # the counts in the call, as the bench times them (by default a thread of the store
    # commits them after the call, racing the counts read below)
    monkeypatch.setenv("ENGRAIN_DEFER_USES", "off")
    settings = Settings(url=f"sqlite:///{tmp_path / 'e.db'}", data_dir=tmp_path, embedder="hash")
    with Engine(settings=settings) as engine:
        engine.remember("The staging database is on port 5433.", "u")
        shown = engine.context("which port is the staging database on?", "u", token_budget=500)
        assert shown.memories  # a use counted: one more transaction
        commits = len(spent["commit_wall"])
        assert commits >= 2
        assert len(spent["begin_wall"]) == commits == len(spent["commit_cpu"])
        assert len(spent["commit_spans"]) == commits
        assert all(ms >= 0.0 for ms in spent["commit_wall"])
        # a failing transaction is still rolled back and reported as the store reports it
        store = engine.store
        with pytest.raises(StoreError), store._transaction() as db:
            db.execute("INSERT INTO no_such_table VALUES (1)")
        assert len(spent["commit_wall"]) == commits
        again = engine.context("which port is the staging database on?", "u", token_budget=500)
        assert again.memories
        # each context()'s record_uses timed whole, the store's lock included
        assert len(spent["uses_wall"]) == 2 and all(ms > 0.0 for ms in spent["uses_wall"])
