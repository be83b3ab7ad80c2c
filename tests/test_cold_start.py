"""Opening a SQLite store and loading a user's working set (issue 18: cold start).

The load reads the user's rows in chunks of rowids inside one read transaction and decodes
vectors into one matrix the memories view; these tests hold that it returns exactly the
rows, in insertion order, whatever the chunking, the other users' rows in between, or rows
without a vector or with another size."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.store import sqlite_load
from engrain.store.sqlite import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _memory(user: str, i: int, vector: np.ndarray | None) -> Memory:
    return Memory.new(
        user, f"{user} note {i}", MemoryType.SEMANTIC, Kind.FACT, now=NOW + timedelta(seconds=i),
        embedding=vector, domains=("work",) if i % 2 else (), importance=0.5 + i / 1000,
    )  # fmt: skip


def _written(path: Path, vectors: list[np.ndarray | None]) -> list[Memory]:
    """Memories of "ada" written one by one between other users' rows."""
    store = SQLiteStore(path, ann_min_vectors=None)
    mine = []
    for i, vector in enumerate(vectors):
        memory = _memory("ada", i, vector)
        store.write([memory, _memory("bob", i, vector)])
        mine.append(memory)
    store.close()
    return mine


@pytest.mark.parametrize("chunk", [1, 3, 4096])
@pytest.mark.parametrize("shape", ["uniform", "missing", "mixed sizes"])
def test_the_loaded_working_set_is_exactly_the_rows_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, shape: str
) -> None:
    rng = np.random.default_rng(1)
    vectors: list[np.ndarray | None] = [
        rng.standard_normal(8).astype(np.float32) for _ in range(10)
    ]
    if shape == "missing":
        vectors[4] = None
    elif shape == "mixed sizes":
        vectors[6] = rng.standard_normal(5).astype(np.float32)
    mine = _written(tmp_path / "e.db", vectors)
    monkeypatch.setattr(sqlite_load, "LOAD_CHUNK", chunk)
    store = SQLiteStore(tmp_path / "e.db", ann_min_vectors=None)
    loaded = list(store.working_set("ada").values())
    assert loaded == mine  # every field but the vector, in insertion order
    for got, want in zip(loaded, mine, strict=True):
        if want.embedding is None:
            assert got.embedding is None
        else:
            assert got.embedding is not None and np.array_equal(got.embedding, want.embedding)
    assert {m.user_id for m in store.working_set("bob").values()} == {"bob"}
    # searches see the same vectors as the rows hold
    assert vectors[0] is not None
    assert store.search("ada", vectors[0], 1)[0][0].id == mine[0].id


def test_loaded_vectors_are_read_only_and_a_write_leaves_them_as_stored(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    mine = _written(tmp_path / "e.db", [rng.standard_normal(8).astype(np.float32)
                                        for _ in range(5)])  # fmt: skip
    store = SQLiteStore(tmp_path / "e.db", ann_min_vectors=None)
    first = store.working_set("ada")[mine[0].id]
    assert first.embedding is not None
    with pytest.raises(ValueError):
        first.embedding[0] = 1.0
    moved = rng.standard_normal(8).astype(np.float32)
    store.write([first.evolve(embedding=moved)])
    assert store.search("ada", moved, 1)[0][0].id == mine[0].id
    assert np.array_equal(store.working_set("ada")[mine[1].id].embedding, mine[1].embedding)
    reopened = SQLiteStore(tmp_path / "e.db", ann_min_vectors=None)
    assert np.array_equal(reopened.working_set("ada")[mine[0].id].embedding, moved)


def test_access_times_are_parsed_once_per_distinct_time() -> None:
    from engrain.store.columns import NO_TIME, parse_micros

    times = [None, "2026-01-15T12:00:00+00:00", None, "2026-01-15T12:00:00+00:00",
             "2025-03-01T08:30:00.250000+00:00"]  # fmt: skip
    got = sqlite_load._times(times)
    assert got.dtype == np.int64
    assert got.tolist() == [NO_TIME if t is None else parse_micros(t) for t in times]
    assert got[1] == got[3] != got[4]
