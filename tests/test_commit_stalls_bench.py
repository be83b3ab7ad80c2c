"""``bench/commit_stalls.py``: its percentiles, and the timing of a store's transactions
(the store's own, entered and left as before)."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_instrument_times_each_commit_and_keeps_the_store_s_own_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the original is restored after the test (instrument replaces it for the process)
    monkeypatch.setattr(
        sqlite_module.SQLiteStore, "_transaction", sqlite_module.SQLiteStore._transaction
    )
    spent: dict[str, list[float]] = {"begin_wall": [], "commit_wall": [], "commit_cpu": []}
    commit_stalls.instrument(spent)
    settings = Settings(url=f"sqlite:///{tmp_path / 'e.db'}", data_dir=tmp_path, embedder="hash")
    with Engine(settings=settings) as engine:
        engine.remember("The staging database is on port 5433.", "u")
        shown = engine.context("which port is the staging database on?", "u", token_budget=500)
        assert shown.memories  # a use counted: one more transaction
        commits = len(spent["commit_wall"])
        assert commits >= 2
        assert len(spent["begin_wall"]) == commits == len(spent["commit_cpu"])
        assert all(ms >= 0.0 for ms in spent["commit_wall"])
        # a failing transaction is still rolled back and reported as the store reports it
        store = engine.store
        with pytest.raises(StoreError), store._transaction() as db:
            db.execute("INSERT INTO no_such_table VALUES (1)")
        assert len(spent["commit_wall"]) == commits
        again = engine.context("which port is the staging database on?", "u", token_budget=500)
        assert again.memories
