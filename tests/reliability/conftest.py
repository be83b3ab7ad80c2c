"""Fixtures of the reliability suite: a store URL on each backend that other processes can
open too (a SQLite file, or a schema of its own on the session's private PostgreSQL), and a
data directory. The PostgreSQL server (``tests/pg.py``) runs with durability off: these
tests kill engrain's processes, never the server."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'engrain.db'}"
    pg_url: str = request.getfixturevalue("pg_url")
    return pg_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite store URL (tests of the SQLite file itself)."""
    return f"sqlite:///{tmp_path / 'engrain.db'}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The engines' data directory, inside the test's temporary directory."""
    path = tmp_path / "data"
    path.mkdir()
    return path
