"""A large user's typed learnings' index walked beside the pool's (``store/vector_search.py``
``approximate``'s ``begin``, ``store/reads.py`` :meth:`Reads.beside`,
``Settings.overlap_walks``; docs/scale.md, "Session 22 … (h2)"): the learnings' walk and
its candidates' read run on the shared read pool while the calling thread walks and reads
the pool's, every block is the one the serial search gives, a walk no pool thread took runs
in the calling thread, its error is raised in the caller, and threads sharing the engine
while another forgets see nothing forgotten.

As in tests/test_ann_kinds.py the thresholds are forced low and the indexes are built once,
saved in the file, and loaded by each engine's copy (the same graphs for every engine)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import Engine
from engrain.config import load_settings
from engrain.embed.hashing import HashEmbedder
from engrain.errors import StoreError
from engrain.model import Kind, Memory
from engrain.store import ALL, ann_kinds, reads, vector_search
from engrain.store.ann import VectorIndex
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings
from .test_overlap_reads import _blocked_pool

USER = "u"
#: Seconds a wait of these tests gives up after (reached only when a test fails).
_PATIENCE = 10.0

_TOPICS = ["deploys", "billing", "vault", "staging", "ruff", "release", "index", "events"]
_VERBS = ["needs", "uses", "avoids", "logs", "rotates", "checks", "blocks", "runs"]
_KINDS = [Kind.FACT, Kind.PREFERENCE, Kind.DECISION, Kind.EVENT, Kind.INVARIANT]
_QUESTIONS = [
    "How do deploys use the vault?",
    "What does billing log to the events table?",
    "Which release checks block staging?",
    "Why does ruff avoid the index?",
]


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    monkeypatch.setattr(ann_kinds, "MIN_ROWS", 50)


def _notes(n: int = 400) -> list[Memory]:
    embedder = HashEmbedder()
    texts = [
        f"The {_TOPICS[i % 8]} service {_VERBS[(i // 8) % 8]} the "
        f"{_TOPICS[(i * 3 + 1) % 8]} {_TOPICS[(i // 64) % 8]} step {i}"
        for i in range(n)
    ]
    vectors = embedder.embed(texts)
    return [
        Memory.new(
            USER,
            text,
            _KINDS[i % 5].default_memory_type,
            _KINDS[i % 5],
            now=NOW,
            embedding=vectors[i],
        )
        for i, text in enumerate(texts)
    ]


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """400 notes (240 of the learnings' kinds), both indexes built and saved in the file."""
    path = tmp_path / "built.db"
    with closing(SQLiteStore(path, ann_min_vectors=0, ann_background=False)) as store:
        store.write(_notes())
        assert store.wait_for_index(USER)
        assert store._cache(USER).snapshot.part is not None
    return path


def _engine(built: Path, tmp_path: Path, name: str, **settings: object) -> Engine:
    copy = tmp_path / f"{name}.db"
    with sqlite3.connect(built) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    store = SQLiteStore(copy, ann_min_vectors=0, ann_background=False)
    assert store.wait_for_index(USER)
    return Engine(
        settings=make_settings(tmp_path / name, **settings), store=store, embedder=HashEmbedder()
    )


def _answers(engine: Engine) -> list[tuple[str, int, list[str]]]:
    out = []
    for question in _QUESTIONS:
        for budget in (None, 3_000):
            context = engine.context(question, USER, token_budget=budget, now=NOW)
            out.append((context.text, context.tokens, [m.id for m in context.memories]))
    return out


class _Walks:
    """``VectorIndex.search_similar`` noting the thread of each learnings' walk; with
    ``beside``, the first index's walk waits until the learnings' walk has begun on another
    thread (so the overlap is certain, not a race the test could lose; a serial search
    waits the whole patience and the test fails)."""

    def __init__(self, engine: Engine, *, beside: bool) -> None:
        snapshot = engine.store._cache(USER).snapshot  # type: ignore[attr-defined]
        assert snapshot.ann is not None and snapshot.part is not None
        self.first, self.part = snapshot.ann.index, snapshot.part.index
        self.beside = beside
        self.part_threads: list[str] = []
        self.begun = threading.Event()
        self.waited_out = 0
        self.fail: Exception | None = None

    def search_similar(self, index: VectorIndex, vector: np.ndarray, count: int) -> Any:
        if index is self.part:
            self.part_threads.append(threading.current_thread().name)
            self.begun.set()
            if self.fail is not None:
                raise self.fail
        elif index is self.first and self.beside:
            if not self.begun.wait(_PATIENCE):
                self.waited_out += 1
            self.begun.clear()
        return _SEARCH(index, vector, count)


_SEARCH = VectorIndex.search_similar


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_Walks]]:
    """Install a :class:`_Walks` with ``walks.append(_Walks(...))``."""
    installed: list[_Walks] = []

    def search_similar(index: VectorIndex, vector: np.ndarray, count: int) -> Any:
        if not installed:
            return _SEARCH(index, vector, count)
        return installed[-1].search_similar(index, vector, count)

    monkeypatch.setattr(VectorIndex, "search_similar", search_similar)
    yield installed


def test_the_learnings_walk_beside_the_pool_s_gives_the_serial_blocks(
    built: Path, tmp_path: Path, walks: list[_Walks]
) -> None:
    """Every block (text, tokens, memories in order) is the serial search's, and the
    learnings' index was walked on a pool thread while the first was walked (the first
    walk waited for it): the comparison compares two paths."""
    with _engine(built, tmp_path, "serial", overlap_walks=False) as serial:
        walks.append(_Walks(serial, beside=False))
        expected = _answers(serial)
        assert set(walks[-1].part_threads) == {threading.current_thread().name}
    with _engine(built, tmp_path, "beside", overlap_walks=True) as beside:
        walks.append(_Walks(beside, beside=True))
        got = _answers(beside)
        ran_in = walks[-1].part_threads
    assert got == expected
    assert walks[-1].waited_out == 0
    assert len(ran_in) == len(_QUESTIONS) * 2
    assert all(name.startswith("engrain-read") for name in ran_in)
    assert any(memories for _, _, memories in got)


def test_the_searches_through_both_indexes_give_what_the_serial_search_gives(
    built: Path,
) -> None:
    """The store's search itself, each match and score, with the second walk begun on the
    pool and without, over the pool's filter and the learnings' (the gate's two searches),
    and a learnings' filter alone."""
    with closing(SQLiteStore(built, ann_min_vectors=0, ann_background=False)) as store:
        assert store.wait_for_index(USER)
        embedder = HashEmbedder()
        searches = [(40, ALL), (100, ann_kinds.FILTER)]
        for question in [*_QUESTIONS, "vault rotates", "staging step 7"]:
            vector = embedder.embed([question])[0]
            serial = store.search_found(USER, vector, searches)
            beside = store.search_found(USER, vector, searches, reads.overlapped)
            assert [[(f.id, s) for f, s in found] for found in beside] == [
                [(f.id, s) for f, s in found] for found in serial
            ]
            assert len(serial[0]) == 40 and len(serial[1]) == 100
            alone = [(5, ann_kinds.FILTER)]  # one index walked: nothing to begin beside
            (one,) = store.search_found(USER, vector, alone, reads.overlapped)
            assert [f.id for f, _ in one] == [
                f.id for f, _ in store.search_found(USER, vector, alone)[0]
            ]


def test_a_walk_no_pool_thread_took_runs_in_the_calling_thread(
    built: Path, tmp_path: Path, walks: list[_Walks]
) -> None:
    """With every pool thread held, a ``context()`` does not wait for them: the learnings'
    walk runs in the calling thread and the block is the one a free pool gives."""
    with _engine(built, tmp_path, "busy", overlap_walks=True) as engine:
        free = engine.context(_QUESTIONS[1], USER, now=NOW)
        walks.append(_Walks(engine, beside=False))
        held = _blocked_pool()
        next(held)
        try:
            busy = engine.context(_QUESTIONS[1], USER, now=NOW)
        finally:
            held.close()
        assert walks[-1].part_threads == [threading.current_thread().name]
    assert busy.text == free.text
    assert [m.id for m in busy.memories] == [m.id for m in free.memories]


def test_a_failed_walk_beside_raises_in_the_caller_and_writes_nothing(
    built: Path, tmp_path: Path, walks: list[_Walks]
) -> None:
    """The learnings' walk failing on the pool thread fails the call with its error (as
    the serial walk would), and the call counts no use."""
    with _engine(built, tmp_path, "failing", overlap_walks=True) as engine:
        watch = _Walks(engine, beside=True)
        watch.fail = StoreError("the learnings' index failed")
        walks.append(watch)
        before = {m.id: m.access_count for m in engine.list(USER, limit=1_000)}
        with pytest.raises(StoreError, match="the learnings' index failed"):
            engine.context(_QUESTIONS[0], USER, now=NOW)
        assert watch.part_threads and watch.part_threads[0].startswith("engrain-read")
        after = {m.id: m.access_count for m in engine.list(USER, limit=1_000)}
    assert after == before


def test_threads_sharing_the_engine_while_another_forgets(built: Path, tmp_path: Path) -> None:
    """Threads calling ``context()`` with the walks beside while another thread forgets
    learnings: no call fails, and once ``forget`` has returned no later block shows the
    memory (each search takes the working set current as it begins)."""
    with _engine(built, tmp_path, "threads", overlap_walks=True) as engine:
        doomed = [m for m in engine.list(USER, limit=1_000)
                  if m.kind is Kind.DECISION and "vault" in m.content][:12]  # fmt: skip
        assert doomed
        errors: list[BaseException] = []
        gone: set[str] = set()
        lock = threading.Lock()
        stop = threading.Event()

        def ask(question: str) -> None:
            while not stop.is_set():
                with lock:
                    forgotten = set(gone)
                try:
                    context = engine.context(question, USER, token_budget=3_000, now=NOW)
                except BaseException as exc:
                    errors.append(exc)
                    return
                shown = {m.id for m in context.memories}
                if shown & forgotten:
                    errors.append(AssertionError(f"forgotten memories shown: {shown & forgotten}"))

        callers = [threading.Thread(target=ask, args=(q,)) for q in _QUESTIONS[:3]]
        for caller in callers:
            caller.start()
        for memory in doomed:
            engine.forget(memory.id, USER)
            with lock:
                gone.add(memory.id)
        stop.set()
        for caller in callers:
            caller.join(_PATIENCE)
    assert not errors


def test_walks_beside_is_a_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_settings({"data_dir": tmp_path}, environ={}).overlap_walks is False
    monkeypatch.setenv("ENGRAIN_OVERLAP_WALKS", "true")
    assert load_settings({"data_dir": tmp_path}).overlap_walks is True


def test_beside_is_only_asked_of_a_store_that_searches_in_the_caller() -> None:
    """``Reads.beside`` hands work to the pool only with ``walks`` on a serial store;
    PostgreSQL (``concurrent_reads``) keeps its own way."""

    class Concurrent:
        concurrent_reads = True

    assert reads.Reads(object(), walks=True).beside is reads.overlapped
    assert reads.Reads(object()).beside is None
    assert reads.Reads(Concurrent(), walks=True).beside is None
