"""Memory running out inside a public call (session 26's ``bench/attacks/memory_limit.py``:
``RLIMIT_AS`` set low at a random point). A call either succeeds or raises an
``EngrainError`` and writes nothing: ``MemoryError`` (and a thread that cannot start) before
the commit is ``OutOfMemoryError`` (an ``EngrainError``), nothing written; after the commit,
the SQLite store's working set that could not follow the write is dropped and read again,
and the call succeeds (it used to raise ``MemoryError`` with the write stored). The failing
allocation is made to fail where the attack saw it fail, by raising what the allocator
raises there."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed.hashing import HashEmbedder
from engrain.errors import EngrainError
from engrain.store.cache import UserCache
from engrain.store.sqlite import SQLiteStore

from .conftest import make_settings
from .refused_threads import refuse_threads

USER = "ada"


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    eng = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "s.db"),
                 embedder=HashEmbedder())  # fmt: skip
    for i in range(12):
        eng.remember(f"fact {i}: the staging port is {8000 + i} for service s{i}", USER)
    eng.context("which port does service s3 use?", USER)  # its working set loaded
    yield eng
    eng.close()


def _ids(engine: Engine) -> set[str]:
    return {m.id for m in engine.list(USER, limit=None)}


def test_a_committed_forget_whose_working_set_cannot_follow_succeeds(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = engine.recall("service s3", USER).memories[0].id

    def no_memory(self: UserCache, ids: Any) -> None:
        raise MemoryError  # copying the working set's arrays without the forgotten row

    monkeypatch.setattr(UserCache, "delete", no_memory)
    engine.forget([victim], USER)  # succeeds: the row is gone
    monkeypatch.undo()
    assert victim not in _ids(engine)
    assert victim not in {m.id for m in engine.recall("service s3 port", USER).memories}
    assert victim not in engine.context("which port does service s3 use?", USER).text


def test_a_committed_remember_whose_working_set_cannot_follow_succeeds(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(self: UserCache, memories: Any) -> None:
        raise MemoryError

    monkeypatch.setattr(UserCache, "upsert", no_memory)
    new = engine.remember("the billing queue drains every night at two", USER).memory_id
    monkeypatch.undo()
    assert new in _ids(engine)
    assert new in {m.id for m in engine.recall("billing queue drains", USER).memories}


@pytest.mark.parametrize("failure", ["memory", "thread"])
def test_memory_running_out_before_the_commit_is_an_engrain_error_and_writes_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    before = _ids(engine)

    def embed(self: HashEmbedder, texts: Any) -> Any:
        if failure == "memory":
            raise MemoryError
        threading.Thread(target=lambda: None).start()  # as the planner's pool starts one
        raise AssertionError("unreachable")

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(HashEmbedder, "embed", embed)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with pytest.raises(EngrainError) as caught:
        engine.remember("a memory that never gets its vector", USER)
    monkeypatch.undo()
    assert caught.value.code == "out_of_memory" and caught.value.http_status == 503
    assert _ids(engine) == before


def test_memory_running_out_while_an_export_is_read_is_an_engrain_error(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engrain.model import Memory

    def no_memory(self: Memory, *args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    records = engine.export_records(USER)
    monkeypatch.setattr(Memory, "to_dict", no_memory)
    with pytest.raises(EngrainError):
        list(records)


def test_a_checkpoint_thread_that_cannot_start_after_a_commit_fails_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = refuse_threads("engrain-checkpoint", monkeypatch)
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "c.db"),
                    embedder=HashEmbedder())  # fmt: skip
    try:
        first = engine.remember("the first commit wakes the checkpointer", USER).memory_id
        assert refused  # it was asked for, after the commit, and could not start
        monkeypatch.undo()
        second = engine.remember("the next commit starts it", USER).memory_id
        assert {first, second} <= _ids(engine)
    finally:
        engine.close()


def test_a_background_compression_that_cannot_start_fails_no_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path, auto_compress=True, compression_threshold=1)
    store = SQLiteStore(tmp_path / "b.db")
    engine = Engine(settings=settings, store=store, embedder=HashEmbedder())
    try:
        refused = refuse_threads("engrain-background", monkeypatch)
        turns = [{"speaker": "user", "text": f"turn {i}: the deploy runs on host h{i}"}
                 for i in range(4)]  # fmt: skip
        done = engine.ingest_conversation(turns, USER, session_id="s1")
        assert refused  # the compression it queued after its commit could not start
        monkeypatch.undo()
        stored = {o.memory_id for o in done.outcomes if o.memory_id}
        assert stored and stored <= _ids(engine)
        engine.ingest_conversation(turns, USER, session_id="s2")  # queues it again: runs
    finally:
        engine.close()


def test_an_index_build_that_cannot_start_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    store = SQLiteStore(tmp_path / "i.db", ann_min_vectors=0)
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    refused = refuse_threads("engrain-ann", monkeypatch)
    try:
        for i in range(20):
            engine.remember(f"note {i}: the cache server c{i} holds shard {i}", USER)
        query = np.asarray(HashEmbedder().embed(["shard 3"])[0], dtype=np.float32)
        assert [m.id for m, _ in store.search(USER, query, 3)]  # answered exactly meanwhile
        assert refused  # the build was asked for and could not start
        monkeypatch.undo()
        store.search(USER, query, 3)  # the slot is idle again: this call starts the build
        assert store.wait_for_index(USER, timeout=120)
    finally:
        engine.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # its death
def test_a_thread_that_dies_as_it_starts_does_not_hang_its_starter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engrain import threads

    class DiesStarting(threading.Thread):
        """Out of memory before it says it runs (what CPython's ``thread_run`` meets when
        calling ``_bootstrap`` fails): ``Thread.start()`` alone waits for it forever."""

        def _bootstrap(self) -> None:  # type: ignore[override]
            raise MemoryError

    monkeypatch.setattr(threads, "BOOT_WAIT", 0.5)
    monkeypatch.setattr(threads, "_quiet_until", 0.0)  # (restored after: no pause left)
    thread = DiesStarting(target=lambda: None, name="engrain-dies", daemon=True)
    done: list[bool] = []
    starter = threading.Thread(target=lambda: done.append(threads.started(thread)), daemon=True)
    starter.start()
    starter.join(timeout=60)
    assert done == [True]  # returned: counted as started, not waited for
    assert not thread.is_alive()
    # for BOOT_PAUSE after it no thread is started, so none waits BOOT_WAIT again
    paused = threading.Thread(target=lambda: None, name="engrain-paused")
    assert not threads.started(paused) and paused.ident is None
    monkeypatch.setattr(threads, "_quiet_until", 0.0)  # the pause over
    ok = threading.Thread(target=lambda: None, name="engrain-ok")
    assert threads.started(ok)
    ok.join()


@pytest.mark.parametrize("defer", [False, True], ids=["in-the-call", "deferred"])
def test_counted_uses_whose_working_set_cannot_follow_fail_no_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, defer: bool
) -> None:
    """A context's counted uses commit, then copy the working set's count arrays (the copy
    that may run out of memory at a large user): that copy failing must not fail the call
    that committed them (in the call: the context itself; deferred: whichever call next
    takes the store's lock, here a remember), and the counts the process then serves are
    the stored ones (its working set dropped and read again, not left behind them)."""
    store = SQLiteStore(tmp_path / "u.db", defer_uses=defer)
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        for i in range(12):
            engine.remember(f"fact {i}: the staging port is {8000 + i} for service s{i}", USER)
        engine.context("which port does service s3 use?", USER)  # its working set loaded
        ids = sorted(_ids(engine))  # the deferred counts committed by this read

        def no_memory(self: UserCache, ids: Any, at: Any) -> None:
            raise MemoryError  # copying the count arrays with the new uses

        monkeypatch.setattr(UserCache, "touch", no_memory)
        shown = engine.context("which port does service s3 use?", USER)
        engine.remember("the billing queue drains every night at two", USER)
        monkeypatch.undo()
        assert shown.memories
        held = {m.id: m.access_count for m in store.cached(USER, ids)}
        stored = {m.id: m.access_count for m in store.get(USER, ids)}
        assert held == stored and sum(stored.values()) >= 2 * len(shown.memories)
    finally:
        engine.close()


def test_deferred_counts_out_of_memory_fail_no_other_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred counts are committed by whichever thread next takes the store's lock,
    before its own statement: their transaction running out of memory loses those counts
    (logged, as any failure of theirs) and fails neither that caller nor the store's
    thread; the counts the process serves are then the stored ones."""
    from engrain.store import sqlite_uses

    store = SQLiteStore(tmp_path / "d.db", defer_uses=True)
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        for i in range(12):
            engine.remember(f"fact {i}: the staging port is {8000 + i} for service s{i}", USER)
        engine.context("which port does service s3 use?", USER)
        ids = sorted(_ids(engine))

        def no_memory(*args: Any, **kwargs: Any) -> None:
            raise MemoryError

        monkeypatch.setattr(sqlite_uses, "count", no_memory)
        engine.context("which port does service s3 use?", USER)  # its record commits
        new = engine.remember("the billing queue drains every night at two", USER).memory_id
        monkeypatch.undo()
        assert new in _ids(engine)
        held = {m.id: m.access_count for m in store.cached(USER, ids)}
        assert held == {m.id: m.access_count for m in store.get(USER, ids)}
    finally:
        engine.close()


def _never_run(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads whose name starts with ``prefix`` die as they start, before they say they
    run (CPython's ``thread_run`` failing to call ``_bootstrap`` out of memory,
    python/cpython#140746): ``Thread.start()`` alone waits for them forever."""
    from engrain import threads

    bootstrap = threading.Thread._bootstrap  # type: ignore[attr-defined]

    def dies(self: threading.Thread) -> None:
        if self.name.startswith(prefix):
            raise MemoryError
        bootstrap(self)

    monkeypatch.setattr(threads, "BOOT_WAIT", 0.5)
    monkeypatch.setattr(threads, "_quiet_until", 0.0, raising=False)  # its pause ends with it
    monkeypatch.setattr(threading.Thread, "_bootstrap", dies)


def _within(call: Any, seconds: float = 120.0) -> tuple[bool, Any]:
    """``call()`` in a thread of its own, waited for at most ``seconds`` (a harness bound:
    one that hangs is left behind as a daemon): whether it returned or raised, and what."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="test-within")
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive(), out[0] if out else None)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # its death
def test_a_background_job_whose_thread_never_runs_hangs_neither_the_call_nor_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compression an ingest queues after its commit goes to the background worker,
    whose pool starts its thread on that call's path: a thread that never says it runs
    hung the ingest in ``concurrent.futures``' ``Thread.start()`` (session 26's memory
    attack, seed 26); now the job is not started (the next request of it runs it), the
    ingest returns with its memories stored and the engine closes."""
    settings = make_settings(tmp_path, auto_compress=True, compression_threshold=1)
    engine = Engine(settings=settings, store=SQLiteStore(tmp_path / "w.db"),
                    embedder=HashEmbedder())  # fmt: skip
    turns = [{"speaker": "user", "text": f"turn {i}: the deploy runs on host h{i}"}
             for i in range(4)]  # fmt: skip
    _never_run("engrain-background", monkeypatch)
    returned, done = _within(lambda: engine.ingest_conversation(turns, USER, session_id="s1"))
    assert returned and not isinstance(done, BaseException)
    closed, error = _within(engine.close)
    assert closed and error is None
    monkeypatch.undo()
    with Engine(settings=settings, store=SQLiteStore(tmp_path / "w.db"),
                embedder=HashEmbedder()) as again:  # fmt: skip
        stored = {o.memory_id for o in done.outcomes if o.memory_id}
        assert stored and stored <= {m.id for m in again.list(USER, limit=None)}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_embedding_thread_that_never_runs_fails_the_call_with_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation's chunks are embedded on the planner's side thread, started on the
    call's path before anything is written: one that never says it runs made the call
    hang; now it is ``OutOfMemoryError`` with nothing written, and the call succeeds once
    threads start again."""
    engine = Engine(settings=make_settings(tmp_path, max_chunk_tokens=40),
                    store=SQLiteStore(tmp_path / "p.db"), embedder=HashEmbedder())  # fmt: skip
    turns = [{"speaker": "user" if i % 2 == 0 else "assistant",
              "text": f"turn {i}: " + " ".join(f"word{i}x{k}" for k in range(30))}
             for i in range(6)]  # fmt: skip
    try:
        _never_run("engrain-embed", monkeypatch)
        returned, error = _within(lambda: engine.ingest_conversation(turns, USER))
        monkeypatch.undo()
        assert returned and isinstance(error, EngrainError) and error.code == "out_of_memory"
        assert _ids(engine) == set()
        assert engine.ingest_conversation(turns, USER).outcomes
        assert _ids(engine)
    finally:
        _within(engine.close)  # (a call that hung holds the planner's pool: bounded too)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_read_pool_that_cannot_start_a_thread_leaves_the_reads_to_the_call(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``context()`` hands its reads that need no vector to the shared read pool, whose
    threads start on the call's path: with none that runs, the call reads them itself and
    answers as it does without the pool."""
    from engrain.store import reads

    fresh = reads.SharedThreads(reads.READ_THREADS, "engrain-read-never")
    monkeypatch.setattr(reads, "_executor", fresh)
    _never_run("engrain-read-never", monkeypatch)
    returned, shown = _within(lambda: engine.context("which port does service s3 use?", USER))
    assert returned and not isinstance(shown, BaseException)
    assert "8003" in shown.text


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_index_build_whose_thread_never_runs_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index build's thread that never says it runs (counted as started by
    ``threads.started``) left its slot busy for good: no build again in the process,
    every search exact. Now the slot is idle again and the next search starts the build."""
    import numpy as np

    store = SQLiteStore(tmp_path / "n.db", ann_min_vectors=0)
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        _never_run("engrain-ann", monkeypatch)
        for i in range(20):
            engine.remember(f"note {i}: the cache server c{i} holds shard {i}", USER)
        query = np.asarray(HashEmbedder().embed(["shard 3"])[0], dtype=np.float32)
        assert [m.id for m, _ in store.search(USER, query, 3)]  # answered exactly meanwhile
        monkeypatch.undo()
        store.search(USER, query, 3)  # the slot is idle again: this call starts the build
        assert store.wait_for_index(USER, timeout=120)
    finally:
        engine.close()


def test_a_background_thread_whose_start_runs_out_of_memory_fails_no_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Thread.start()`` raising ``MemoryError`` (its boot state not allocated) for the
    compression an ingest queues after its commit: the ingest raised ``OutOfMemoryError``
    ("nothing was written") with its memories stored, and the pool kept the thread that
    never started as its one thread, so no background job ran again and ``close()`` waited
    for ever. Now the job is left to its next request, which runs it."""
    settings = make_settings(tmp_path, auto_compress=True, compression_threshold=1)
    engine = Engine(settings=settings, store=SQLiteStore(tmp_path / "m.db"),
                    embedder=HashEmbedder())  # fmt: skip
    turns = [{"speaker": "user", "text": f"turn {i}: the deploy runs on host h{i}"}
             for i in range(4)]  # fmt: skip
    start = threading.Thread.start

    def no_memory(self: threading.Thread) -> None:
        if self.name.startswith("engrain-background"):
            raise MemoryError
        start(self)

    try:
        monkeypatch.setattr(threading.Thread, "start", no_memory)
        done = engine.ingest_conversation(turns, USER, session_id="s1")
        monkeypatch.undo()
        stored = {o.memory_id for o in done.outcomes if o.memory_id}
        assert stored and stored <= _ids(engine)
        engine.ingest_conversation(turns, USER, session_id="s2")  # queues it again: runs
        ran, finished = _within(lambda: engine.wait(60))
        assert ran and finished is True  # the pool runs jobs again
    finally:
        closed, _ = _within(engine.close)
    assert closed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # its death
@pytest.mark.parametrize("thread", ["engrain-uses", "engrain-checkpoint"])
def test_a_store_whose_own_thread_never_ran_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread: str
) -> None:
    """``threads.started`` counts a thread that does not say it runs within ``BOOT_WAIT``
    as started (it may yet run): the store's close then joined it, and ``join`` raises
    ``RuntimeError`` for a thread that never started, so ``close()`` failed."""
    from .test_store_contract import mem

    _never_run(thread, monkeypatch)
    store = SQLiteStore(tmp_path / "n.db", defer_uses=True)
    store.write([mem("m1", USER)])  # a commit: the checkpointer is asked for
    closed, error = _within(store.close)
    assert closed and error is None, error
