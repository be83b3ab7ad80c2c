"""Overlapping reads (``engrain.store.reads``): lazy and in order on stores that serve one
reader at a time, started at once in reader threads on stores that serve many, and the same
context either way."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore
from engrain.store.reads import Reads, concurrent
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings
from .test_gate_reads import remember_notes


class Parallel:
    concurrent_reads = True


def test_on_a_serial_store_a_read_runs_when_asked_and_once() -> None:
    calls: list[str] = []
    result = Reads(MemoryStore()).start(lambda: calls.append("read") or 42)
    assert calls == []
    assert result() == 42
    assert result() == 42
    assert calls == ["read"]


def test_on_a_concurrent_store_a_read_starts_at_once_in_a_reader_thread() -> None:
    started = threading.Event()
    release = threading.Event()
    where: list[str] = []

    def read() -> int:
        where.append(threading.current_thread().name)
        started.set()
        assert release.wait(60)
        return 7

    result = Reads(Parallel()).start(read)
    # a bound for a stuck test only: the wait ends when the read begins
    assert started.wait(60), "the read did not start before its result was asked for"
    release.set()
    assert result() == 7
    assert where[0].startswith("engrain-read") and where[0] != threading.current_thread().name


def test_a_failing_read_raises_its_error_when_asked() -> None:
    def boom() -> None:
        raise KeyError("gone")

    for store in (MemoryStore(), Parallel()):
        result = Reads(store).start(boom)
        with pytest.raises(KeyError, match="gone"):
            result()


def test_which_stores_read_concurrently(tmp_path: Path, pg_url: str) -> None:
    from engrain.store.postgres import PostgresStore

    pg = PostgresStore(pg_url, pool_size=2)
    sqlite = SQLiteStore(tmp_path / "t.db")
    try:
        assert concurrent(pg) and not concurrent(sqlite) and not concurrent(MemoryStore())
    finally:
        pg.close()
        sqlite.close()


def test_context_on_postgres_reads_in_parallel_and_decides_the_same(
    tmp_path: Path, pg_url: str
) -> None:
    from engrain.store.postgres import PostgresStore

    store = PostgresStore(pg_url, pool_size=4)
    # overlap off: the serial half below reads every read in the calling thread
    settings = make_settings(tmp_path, overlap_reads=False)
    engine = Engine(settings=settings, store=store, embedder=HashEmbedder())
    remember_notes(engine)
    threads: dict[str, set[str]] = {}
    for name in ("search", "lexical_search", "query"):
        original = getattr(store, name)

        def spy(*args: Any, _call: Any = original, _name: str = name, **kw: Any) -> Any:
            threads.setdefault(_name, set()).add(threading.current_thread().name)
            return _call(*args, **kw)

        setattr(store, name, spy)
    message = "where is the deploy script for staging, and how should I debug it?"
    parallel = engine.context(message, "u", now=NOW)
    assert any(t.startswith("engrain-read") for t in threads["lexical_search"])
    assert any(t.startswith("engrain-read") for t in threads["query"])
    # The vector searches need the query vector, so they are not reads started before the
    # embedding (no reader thread); the pool's and the learnings' searches run at once,
    # one in the calling thread and the other in a search thread (search_many).
    others = threads["search"] - {threading.current_thread().name}
    assert threading.current_thread().name in threads["search"]
    assert len(others) == 1 and next(iter(others)).startswith("engrain-search")

    store.concurrent_reads = False  # type: ignore[misc]
    threads.clear()
    serial = engine.context(message, "u", now=NOW)
    assert all(
        not t.startswith(("engrain-read", "engrain-search")) for ts in threads.values() for t in ts
    )
    assert [m.id for m in parallel.memories] == [m.id for m in serial.memories]
    assert parallel.text == serial.text
    assert "linter" in parallel.text and "atlas" in parallel.text
    engine.close()
