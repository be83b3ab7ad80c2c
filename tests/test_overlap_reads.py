"""A ``context()``'s reads that need no query vector, overlapped with its embedding
(``store/reads.py`` ``overlap``, ``Settings.overlap_reads``; docs/scale.md, "Session 19 …
(h1)"): they run on the shared read pool while the calling thread embeds the query, give
the calling thread exactly what a serial read gives, are taken back by the calling thread
when no pool thread has begun them, and the setting turns it off."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.config import load_settings
from engrain.embed.base import Matrix
from engrain.embed.hashing import HashEmbedder
from engrain.store import reads
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

#: Seconds any wait of these tests gives up after (reached only when a test fails).
_PATIENCE = 10.0

_NOTES = [
    ("Deploys go through the release workflow on main.", "decision"),
    ("The release workflow needs the vault token from the ops vault.", "fact"),
    ("Staging deploys run every night at two.", "fact"),
    ("Use ruff format before pushing a branch.", "preference"),
    ("The billing service logs to the events table.", "fact"),
    ("A missing index on the events table slowed billing queries last month.", "fact"),
    ("Never force-push to main.", "invariant"),
    ("The vault token rotates every thirty days.", "fact"),
]

_QUESTIONS = [
    "How do deploys work?",
    "Where does the release workflow get its token?",
    "Why were billing queries slow? I keep seeing a missing index on the events table.",
    "What should I run before pushing?",
    "When do staging deploys happen and who rotates the vault token?",
]


class _Recording(SQLiteStore):
    """The SQLite store noting the thread each lexical search and pin listing ran in."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read_threads: list[str] = []
        self.reading = threading.Event()

    def lexical_found(self, *args: Any, **kwargs: Any) -> Any:
        self.read_threads.append(threading.current_thread().name)
        self.reading.set()
        return super().lexical_found(*args, **kwargs)


class _Slow(HashEmbedder):
    """Embeds only once the store has begun a lexical read (as the model takes a few
    milliseconds, in which a free pool thread takes the read up): the overlap is certain,
    not a race the test could lose."""

    def __init__(self, store: _Recording) -> None:
        super().__init__()
        self.store = store

    def embed(self, texts: Sequence[str]) -> Matrix:
        assert self.store.reading.wait(_PATIENCE)
        self.store.reading.clear()
        return super().embed(texts)


def _built(tmp_path: Path) -> Path:
    """A SQLite file holding the notes (one pinned), written once and copied per engine:
    every engine compared starts from the same rows, ids and counts."""
    path = tmp_path / "built.db"
    if not path.exists():
        with Engine(settings=make_settings(tmp_path / "built"), store=SQLiteStore(path),
                    embedder=HashEmbedder()) as engine:  # fmt: skip
            for text, kind in _NOTES:
                engine.remember(text, "u", kind=kind, now=NOW)
            engine.pin(engine.list("u")[0].id, "u", now=NOW)
    return path


def _engine(tmp_path: Path, name: str, *, slow: bool = False, **settings: object) -> Engine:
    copy = tmp_path / f"{name}.db"
    with sqlite3.connect(_built(tmp_path)) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    store = _Recording(copy)
    return Engine(
        settings=make_settings(tmp_path / name, **settings),
        store=store,
        embedder=_Slow(store) if slow else HashEmbedder(),
    )


def _answers(engine: Engine) -> list[tuple[str, int, list[str]]]:
    out = []
    store = engine.store
    assert isinstance(store, _Recording)
    for question in _QUESTIONS:
        for budget in (None, 60):
            # a call whose query vector is cached embeds nothing, so the read it began
            # would let the next call's embedding through before that call's own read
            # began (the caller then takes its read back: a race a loaded machine loses)
            store.reading.clear()
            context = engine.context(question, "u", token_budget=budget, now=NOW)
            out.append((context.text, context.tokens, [m.id for m in context.memories]))
    return out


def test_overlapped_reads_give_the_serial_blocks(tmp_path: Path) -> None:
    """The same memories, the same questions: every block (text, tokens, the memories in
    order) is the same with the reads on the pool thread as in the calling thread, and the
    lexical searches did run on the pool (so the comparison compares two paths)."""
    with _engine(tmp_path, "serial", overlap_reads=False) as serial:
        expected = _answers(serial)
        assert set(serial.store.read_threads) == {threading.current_thread().name}  # type: ignore[attr-defined]
    with _engine(tmp_path, "overlapped", slow=True) as overlapped:
        got = _answers(overlapped)
        ran_in = overlapped.store.read_threads  # type: ignore[attr-defined]
    assert got == expected
    # each question's first ask embeds (the second is the query cache's): its read ran on
    # the pool while the model waited for it
    assert sum(t.startswith("engrain-read") for t in ran_in) >= len(_QUESTIONS)
    assert any(memories for _, _, memories in got)


def test_an_overlapped_read_returns_what_the_read_returns_in_order() -> None:
    """The pool thread's result is handed over whole and in order, once: a dropped or
    reordered match would change the pool."""
    ran: list[str] = []
    rows = [("b", 0.9), ("a", 0.5), ("c", 0.5), ("d", 0.1)]

    def read() -> list[tuple[str, float]]:
        ran.append(threading.current_thread().name)
        return list(rows)

    result = reads.Reads(object(), overlap=True).start(read)
    assert result() == rows
    assert result() == rows  # asked again: the same answer, not a second read
    assert len(ran) == 1


def _blocked_pool() -> Iterator[threading.Event]:
    """Every thread of the shared read pool held until the event is set."""
    release, started = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(_PATIENCE)

    pool = reads._executor()
    for _ in range(reads.READ_THREADS):
        pool.submit(hold)
    for _ in range(reads.READ_THREADS):
        assert started.acquire(timeout=_PATIENCE)
    try:
        yield release
    finally:
        release.set()


def test_a_read_no_pool_thread_took_runs_in_the_calling_thread() -> None:
    """With every pool thread busy, the result is computed by the caller at once (it never
    waits in the pool's queue, and never runs twice)."""
    ran: list[str] = []

    def read() -> str:
        ran.append(threading.current_thread().name)
        return "rows"

    held = _blocked_pool()
    next(held)
    try:
        result = reads.Reads(object(), overlap=True).start(read)
        assert result() == "rows"
        assert ran == [threading.current_thread().name]
    finally:
        held.close()
    assert ran == [threading.current_thread().name]  # the cancelled task never ran


def test_a_context_with_a_busy_pool_gives_the_same_block(tmp_path: Path) -> None:
    """A whole ``context()`` while every pool thread is held: it does not wait for them
    and returns the block a free pool gives."""
    with _engine(tmp_path, "free") as engine:
        free = engine.context(_QUESTIONS[2], "u", now=NOW)
        held = _blocked_pool()
        next(held)
        try:
            engine.store.read_threads.clear()  # type: ignore[attr-defined]
            busy = engine.context(_QUESTIONS[2], "u", now=NOW)
            ran_in = list(engine.store.read_threads)  # type: ignore[attr-defined]
        finally:
            held.close()
    assert ran_in == [threading.current_thread().name]
    assert busy.text == free.text
    assert [m.id for m in busy.memories] == [m.id for m in free.memories]


def test_a_failed_overlapped_read_raises_in_the_caller() -> None:
    """A read's error reaches the caller (the public call raises it, as a serial read
    would), not the pool."""

    def read() -> None:
        raise ValueError("the store failed")

    result = reads.Reads(object(), overlap=True).start(read)
    with pytest.raises(ValueError, match="the store failed"):
        result()


def test_overlap_is_a_setting_on_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_settings({"data_dir": tmp_path}, environ={}).overlap_reads is True
    monkeypatch.setenv("ENGRAIN_OVERLAP_READS", "false")
    assert load_settings({"data_dir": tmp_path}).overlap_reads is False


def test_a_store_reading_concurrently_keeps_its_own_way() -> None:
    """PostgreSQL's reads already start at once in the pool; ``overlap`` changes nothing
    there (no cancel-and-take-back: its reads are on connections of their own)."""

    class Concurrent:
        concurrent_reads = True

    started = reads.Reads(Concurrent(), overlap=True)
    assert started.parallel and not started.overlap
    assert not reads.Reads(object()).overlap


def test_writes_from_other_threads_during_overlapped_calls(tmp_path: Path) -> None:
    """Threads calling ``context()`` with overlapped reads while another thread forgets
    memories: no call fails, and once ``forget`` has returned no later block shows the
    memory (each read takes the store's snapshot as it begins)."""
    with _engine(tmp_path, "writes") as engine:
        doomed = [m for m in engine.list("u") if "vault" in m.content]
        assert doomed
        errors: list[BaseException] = []
        gone: set[str] = set()
        lock = threading.Lock()
        stop = threading.Event()

        def ask() -> None:
            while not stop.is_set():
                with lock:
                    forgotten = set(gone)
                try:
                    context = engine.context(_QUESTIONS[1], "u", now=NOW)
                except BaseException as exc:
                    errors.append(exc)
                    return
                shown = {m.id for m in context.memories}
                if shown & forgotten:
                    errors.append(AssertionError(f"forgotten memories shown: {shown & forgotten}"))

        callers = [threading.Thread(target=ask) for _ in range(3)]
        for caller in callers:
            caller.start()
        for memory in doomed:
            engine.forget(memory.id, "u")
            with lock:
                gone.add(memory.id)
        stop.set()
        for caller in callers:
            caller.join(_PATIENCE)
    assert not errors


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_overlaps_on_threads_of_its_own() -> None:
    """A child forked after the pool started inherits the pool object but none of its
    threads: it starts its own pool, and its reads still run on a pool thread."""

    def on_a_pool_thread() -> bool:
        begun = threading.Event()

        def where() -> str:
            begun.set()
            return threading.current_thread().name

        result = reads.Reads(object(), overlap=True).start(where)
        return begun.wait(_PATIENCE) and result().startswith("engrain-read")

    assert on_a_pool_thread()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        try:
            os._exit(0 if on_a_pool_thread() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
