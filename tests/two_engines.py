"""Two engines on one store, as two processes have: a fixture for the second engine, and
a way to make another engine's write land between one engine's plan and its write."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, Settings
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore, Store
from engrain.store.sqlite import SQLiteStore


@pytest.fixture
def other(engine: Engine, tmp_path: Path) -> Iterator[Engine]:
    """A second engine on ``engine``'s store, as another process has one: the same
    in-memory store, the same SQLite file, the same PostgreSQL database."""
    store: Store = engine.store
    if isinstance(store, MemoryStore):
        second: Store = store
    elif isinstance(store, SQLiteStore):
        second = SQLiteStore(store.path)
    else:
        from engrain.store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        second = PostgresStore(store.url, pool_size=2)
    settings = Settings(data_dir=tmp_path, embedder="hash")  # as conftest's make_settings
    eng = Engine(settings=settings, store=second, embedder=HashEmbedder())
    yield eng
    if second is not store:
        second.close()


def between(owner: Any, name: str, write: Callable[[], object]) -> list[Any]:
    """Make ``owner.name`` (a planning function) run ``write`` once, after its first call
    returns and so before the write it planned; returns what each of its calls returned."""
    plan = getattr(owner, name)
    plans: list[Any] = []

    def planned_then_other_writes(*args: Any, **kwargs: Any) -> Any:
        outcome = plan(*args, **kwargs)
        plans.append(outcome)
        if len(plans) == 1:
            write()
        return outcome

    setattr(owner, name, planned_then_other_writes)
    return plans
