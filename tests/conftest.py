"""Shared fixtures: engines over the in-memory, SQLite and PostgreSQL stores with the
deterministic test embedder (fast), and one with the real all-MiniLM-L6-v2 model (marked
``model``). PostgreSQL runs on one private server per session (``tests/pg.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, Settings
from engrain.embed import HashEmbedder
from engrain.recall.results import Gated
from engrain.store import MemoryStore, Store
from engrain.store.sqlite import SQLiteStore

from .chroma import chroma_http_url, chroma_server  # noqa: F401  (fixtures)
from .pg import pg_server, pg_url  # noqa: F401  (fixtures)
from .two_engines import other  # noqa: F401  (fixture)

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

#: The tests this run's marker expression left out (``-m``), by node id: what
#: ``tests/test_suite.py`` reads to check that no module loses all its tests to them.
DESELECTED = pytest.StashKey[list[str]]()


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Keep the node ids ``-m`` left out, on the session's config."""
    if items:
        config = items[0].config
        config.stash.setdefault(DESELECTED, []).extend(item.nodeid for item in items)


#: LoCoMo's development split, beside the repository (``../shared``) when it is there.
LOCOMO_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


#: What the embedder tests embed: short and long turns, a plain sentence, Unicode, and a
#: turn past the model's 256 tokens.
EMBED_TEXTS = [
    "ada: I moved to Lisbon last spring and I love the light there",
    "bob: ok",
    "ada: my sister is a nurse, she works nights at the children's hospital",
    "bob: Did you finish the marathon training plan we talked about in March?",
    "The database migration failed twice because of a lock timeout on the users table.",
    "ünïcödé, emoji 🎉 and CJK 東京 in one line",
    "ada: " + "a much longer turn about gardening and tomatoes " * 40,  # truncated at 256
]


def locomo_turns(limit: int) -> list[str]:
    """The first ``limit`` turns of LoCoMo dev's first conversation as ``speaker: text``,
    as the benchmark embeds them; the test is skipped without the data set."""
    if not LOCOMO_DEV.is_file():
        pytest.skip("LoCoMo dev is not beside the repository")
    conversation = json.loads(LOCOMO_DEV.read_text(encoding="utf-8"))[0]["conversation"]
    return [
        f"{t['speaker']}: {t['text']}"
        for key, session in conversation.items()
        if key.startswith("session_") and isinstance(session, list)
        for t in session
    ][:limit]


def cli_env(tmp_path: Path) -> dict[str, str | None]:
    """The environment of a CLI test run through click's runner: the hash embedder, a data
    directory of the test's own, and none of the user's ``ENGRAIN_USER``, ``ENGRAIN_URL``
    or ``ENGRAIN_CONFIG`` (``None`` unsets a variable for the run)."""
    return {
        "ENGRAIN_EMBEDDER": "hash",
        "ENGRAIN_DATA_DIR": str(tmp_path / "data"),
        "ENGRAIN_USER": None,
        "ENGRAIN_URL": None,
        "ENGRAIN_CONFIG": None,
    }


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings isolated from the machine: data dir in tmp, no environment read."""
    values: dict[str, object] = {"data_dir": tmp_path, "embedder": "hash", **overrides}
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every backend, one test body (the contract suite)."""
    backend: Store
    if request.param == "memory":
        backend = MemoryStore()
    elif request.param == "sqlite":
        backend = SQLiteStore(tmp_path / "t.db")
    else:
        from engrain.store.postgres import PostgresStore

        backend = PostgresStore(request.getfixturevalue("pg_url"), pool_size=2)
    yield backend
    backend.close()


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A PostgreSQL store on the session's private server, two pooled connections (a test
    module that counts round trips or needs more connections defines its own ``pg``)."""
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(request.getfixturevalue("pg_url"), pool_size=2)
    yield store
    store.close()


@pytest.fixture
def engine(store: Store, tmp_path: Path) -> Iterator[Engine]:
    """An engine over each backend with the deterministic hash embedder."""
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    yield eng


@pytest.fixture
def mem_engine(tmp_path: Path) -> Iterator[Engine]:
    """A fast engine over the in-memory store only."""
    yield Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())


@pytest.fixture
def runner() -> Any:
    """click's test runner, the error output kept apart (``mix_stderr=False`` before click
    8.2, which always keeps it apart)."""
    from click.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


@pytest.fixture
def through_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches over more than 20 rows go through the approximate index
    (``vector_search.EXACT_SUBSET``), so a test's few hundred memories reach it."""
    from engrain.store import vector_search

    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)


@pytest.fixture(scope="session")
def minilm():  # type: ignore[no-untyped-def]
    """The real all-MiniLM-L6-v2 embedder, loaded once per test session."""
    from engrain.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder()


def score_of_turn(result: Gated, turn: str) -> float:
    """The score ``explain()`` gave the memory holding conversation turn ``turn``."""
    for scored in result.ranked:
        if turn in scored.memory.provenance.turn_ids:
            return float(scored.score)
    raise AssertionError(f"no ranked memory holds turn {turn}")
