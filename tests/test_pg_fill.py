"""The token counts a large PostgreSQL table's migration 009 left, filled after it
(``store/postgres/fill.py``): by ``engrain migrate`` or a store's background filler,
resumable, one filler at a time, recorded as done by a validated constraint, and invisible
to calls (the same blocks before, during and after)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.recall import lines
from engrain.store import Patch
from engrain.tokens import spaced_count

from .conftest import NOW, make_settings
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
import psycopg  # noqa: E402
import psycopg.errors  # noqa: E402

fill = postgres.fill
PostgresStore = postgres.PostgresStore

ROWS = 23


def _left_to_fill(url: str, memories: list[Any] | None = None) -> list[Any]:
    """A database whose rows hold no count and no constraint, as migration 009 leaves a
    table above its limit; the memories written."""
    memories = memories or [
        mem(f"r{i:02d}", content=f"note {i}: {'ünïcode ' * (i % 4)}deploy") for i in range(ROWS)
    ]
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        store.write(memories)
    finally:
        store.close()
    _forget_counts(url)
    return memories


def _forget_counts(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"ALTER TABLE memories DROP CONSTRAINT IF EXISTS {fill.CONSTRAINT}")
        db.execute("UPDATE memories SET content_tokens = NULL")


def _counts(url: str) -> dict[str, int | None]:
    with psycopg.connect(url, autocommit=True) as db:
        return dict(db.execute("SELECT id, content_tokens FROM memories").fetchall())


def _pending(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as db:
        return fill.pending(db)


def _counted(memories: list[Any]) -> dict[str, int]:
    return {m.id: spaced_count(m.content) for m in memories}


def _starts_a_filler(url: str) -> bool:
    """Whether a store opening the database starts a background filler."""
    store = PostgresStore(url, pool_size=1)
    try:
        return store._filler is not None
    finally:
        store.close()


def _limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # tables above 5 rows are "large": the migrator leaves them to a filler
    monkeypatch.setattr(postgres.schema, "FILL_IN_MIGRATION_MAX", 5)


def test_a_small_table_gets_the_constraint_when_it_opens(pg_url: str) -> None:
    memories = [mem(f"s{i}", content=f"small note {i}") for i in range(4)]
    _left_to_fill(pg_url, memories)
    assert _pending(pg_url)
    store = PostgresStore(pg_url, pool_size=1)
    try:
        assert store._filler is None  # filled by the migrator, nothing left to a filler
        assert not _pending(pg_url)
        assert _counts(pg_url) == _counted(memories)
        # the constraint holds from now on
        with pytest.raises(psycopg.errors.CheckViolation), store._pool.connection() as db:
            db.execute("UPDATE memories SET content_tokens = NULL WHERE id = 's1'")
    finally:
        store.close()


def test_migrate_fills_a_large_table_and_records_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = _left_to_fill(pg_url)
    _limit(monkeypatch)
    store = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    try:
        assert store._filler is None and _pending(pg_url)
        assert set(_counts(pg_url).values()) == {None}
        assert store.fill_content_tokens(batch=4) == ROWS
        assert _counts(pg_url) == _counted(memories)
        assert not _pending(pg_url)
        assert store.fill_content_tokens() == 0
    finally:
        store.close()
    assert not _starts_a_filler(pg_url)  # recorded: no process looks for rows again


def test_the_background_filler_fills_and_the_next_open_starts_none(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = _left_to_fill(pg_url)
    _limit(monkeypatch)
    monkeypatch.setattr(fill, "BACKGROUND_BATCH", 3)
    monkeypatch.setattr(fill, "START_DELAY", 0.0)
    store = PostgresStore(pg_url, pool_size=1)
    try:
        assert store._filler is not None
        assert store.wait_for_fill(timeout=60)
        assert store._filler.filled == ROWS
        assert _counts(pg_url) == _counted(memories)
    finally:
        store.close()
    assert not _starts_a_filler(pg_url)


def test_a_store_closed_before_the_filler_starts_leaves_the_rows_to_the_next(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _left_to_fill(pg_url)
    _limit(monkeypatch)
    store = PostgresStore(pg_url, pool_size=1)  # a CLI command: closed within the delay
    filler = store._filler
    store.close()
    assert filler is not None and filler.wait(60) and filler.filled == 0  # (ends at once)
    assert set(_counts(pg_url).values()) == {None} and _pending(pg_url)


def test_a_fill_stopped_midway_resumes_where_it_was(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = _left_to_fill(pg_url)
    batches: list[int] = []
    real = fill.fill_batch

    def killed_after_two(db: Any, after: Any, size: int) -> Any:
        if len(batches) == 2:
            raise KeyboardInterrupt  # as a process killed midway: the batch is not committed
        found = real(db, after, size)
        batches.append(0 if found is None else found[1])
        return found

    monkeypatch.setattr(fill, "fill_batch", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        fill.fill(pg_url, batch=5)
    assert batches == [5, 5]
    assert sum(n is not None for n in _counts(pg_url).values()) == 10
    assert _pending(pg_url)  # not recorded: the next filler resumes
    monkeypatch.setattr(fill, "fill_batch", real)
    # the lock died with the killed filler's connection: another takes it at once
    assert fill.fill(pg_url, batch=5, wait=False) == ROWS - 10
    assert _counts(pg_url) == _counted(memories)
    assert not _pending(pg_url)


def _race(url: str, waits: tuple[bool, ...], writer: PostgresStore | None = None) -> list[Any]:
    """Fillers (each waiting for the lock or not) and, with ``writer``, patches of every
    row in the opposite key order, started together; the fillers' results."""
    results: list[int | None] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(waits) + (writer is not None))

    def run(wait: bool) -> None:
        try:
            start.wait()
            results.append(fill.fill(url, batch=2, wait=wait))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def write() -> None:
        assert writer is not None
        try:
            start.wait()
            for i in reversed(range(ROWS)):
                writer.write(patches=[Patch("alice", f"r{i:02d}", {"importance": 0.4})])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in waits]
    if writer is not None:
        threads.append(threading.Thread(target=write))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads), "a filler or the writer is stuck"
    assert not errors, errors
    return results


def test_a_table_held_by_a_long_transaction_is_recorded_by_the_next_filler(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = _left_to_fill(pg_url)
    monkeypatch.setattr(fill, "LOCK_TIMEOUT", "100ms")
    with psycopg.connect(pg_url) as reader:  # a long read: the constraint would queue behind it
        reader.execute("SELECT count(*) FROM memories").fetchone()
        assert fill.fill(pg_url, batch=10) == ROWS  # filled, not waiting for the reader
        assert _counts(pg_url) == _counted(memories) and _pending(pg_url)
    assert fill.fill(pg_url, batch=10) == 0 and not _pending(pg_url)


def test_concurrent_fillers_fill_each_row_once(pg_url: str) -> None:
    memories = _left_to_fill(pg_url)
    results = _race(pg_url, (True, True, False, False))
    # one filler filled every row; the others found it done (waited) or the lock held
    assert sorted(results, key=lambda n: -1 if n is None else n)[-1] == ROWS
    assert sum(n or 0 for n in results) == ROWS
    assert _counts(pg_url) == _counted(memories)
    assert not _pending(pg_url)


def test_fillers_and_a_writer_do_not_deadlock(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    memories = _left_to_fill(pg_url)
    _limit(monkeypatch)
    writer = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    try:
        results = _race(pg_url, (True, False), writer)
    finally:
        writer.close()
    assert sum(n or 0 for n in results) <= ROWS  # the writer counted the rows it patched
    assert _counts(pg_url) == _counted(memories)
    assert not _pending(pg_url)


def test_rows_written_during_a_fill_are_counted_by_their_writer(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _left_to_fill(pg_url)
    _limit(monkeypatch)
    store = PostgresStore(pg_url, pool_size=1, fill_in_background=False)
    real = fill.fill_batch

    def with_a_write_between(db: Any, after: Any, size: int) -> Any:
        if after is not None and after[1] == "r04":
            store.write([mem("r99", content="written during the fill")])
            store.write(patches=[Patch("alice", "r20", {"content": "rewritten meanwhile"})])
        return real(db, after, size)

    monkeypatch.setattr(fill, "fill_batch", with_a_write_between)
    try:
        assert fill.fill(pg_url, batch=5) == ROWS - 1  # r20's writer counted it
        counts = _counts(pg_url)
        assert counts["r99"] == spaced_count("written during the fill")
        assert counts["r20"] == spaced_count("rewritten meanwhile")
        assert None not in counts.values() and not _pending(pg_url)
    finally:
        store.close()


def test_calls_during_the_fill_give_the_same_blocks(
    pg_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .pg import new_schema

    texts = [
        "Deploys go through the staging cluster first.",
        "The staging cluster runs Postgres 16 with pgvector.",
        "Always run the migrations before deploying to staging.",
        "Ada prefers short answers with code samples.",
        "We decided to keep SQLite as the embedded default.",
        "The on-call rotation changes every Monday morning.",
        "Never deploy on Fridays after three in the afternoon.",
        "Backups of the primary database run nightly at two.",
        "Staging deploys page the release channel on failure.",
        "The deploy script lives in tools/release.sh.",
        "Release notes are written by whoever merges last.",
        "Backups are kept for thirty days in cold storage.",
    ]
    questions = [
        "How do deploys to staging work?",
        "What did we decide about the default store?",
        "When do backups run?",
    ]
    urls = {"counted": new_schema(pg_server), "filled": new_schema(pg_server)}
    _limit(monkeypatch)
    engines: dict[str, Engine] = {}
    for name, url in urls.items():
        store = PostgresStore(url, pool_size=2, fill_in_background=False)
        engines[name] = Engine(
            settings=make_settings(tmp_path / name), store=store, embedder=HashEmbedder()
        )
        for text in texts:
            engines[name].remember(text, "ada", now=NOW)
    _forget_counts(urls["filled"])
    with psycopg.connect(urls["filled"], autocommit=True) as db:
        steps = []
        after = None
        while True:  # one batch between rounds of calls: none, some, all rows counted
            lines.clear()  # each round takes a line's count from its row if it has one
            blocks = {
                # a budget the lines' counts decide what fits in
                name: [
                    engines[name].context(q, "ada", token_budget=60, now=NOW).text
                    for q in questions
                ]
                for name in urls
            }
            assert blocks["filled"] == blocks["counted"]
            steps.append(sum(n is not None for n in _counts(urls["filled"]).values()))
            with db.transaction():
                found = fill.fill_batch(db, after, 5)
            if found is None:
                break
            after = found[0]
    assert steps[0] == 0 and steps[-1] == len(texts) and len(steps) > 3
    for engine in engines.values():
        engine.close()
