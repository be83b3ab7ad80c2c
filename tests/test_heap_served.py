"""Freed heap handed back while serving a large user (``store/heap.py`` :func:`served`,
issue 18): one search of a large working set in :data:`~engrain.store.heap.TRIM_EVERY`
trims, whichever thread runs it; a small user's searches count nothing."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from engrain.store import cache, heap
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _memories


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The trims asked for (a stand-in for :func:`heap.release`), from a fresh count."""
    asked: list[int] = []

    def release() -> bool:
        asked.append(1)
        return True

    monkeypatch.setattr(heap, "release", release)
    monkeypatch.setattr(heap, "_served", itertools.count(1))
    return asked


def test_one_search_in_trim_every_trims(trims: list[int]) -> None:
    done = [heap.served() for _ in range(3 * heap.TRIM_EVERY + 7)]
    assert len(trims) == 3
    assert [i + 1 for i, trimmed in enumerate(done) if trimmed] == [
        heap.TRIM_EVERY, 2 * heap.TRIM_EVERY, 3 * heap.TRIM_EVERY
    ]  # fmt: skip


def test_threads_counting_at_once_trim_once_per_trim_every(trims: list[int]) -> None:
    per_thread = 3 * heap.TRIM_EVERY + 1
    threads = [
        threading.Thread(target=lambda: [heap.served() for _ in range(per_thread)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(trims) == 4 * per_thread // heap.TRIM_EVERY == 12


def test_without_malloc_trim_nothing_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    monkeypatch.setattr(heap, "_served", itertools.count(1))
    assert not any(heap.served() for _ in range(2 * heap.TRIM_EVERY))


@pytest.mark.parametrize(("release_rows", "counted"), [(100, 5), (1_000, 0)])
def test_indexed_searches_of_a_large_user_are_counted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    release_rows: int,
    counted: int,
) -> None:
    monkeypatch.setattr(cache, "HEAP_RELEASE_ROWS", release_rows)
    served: list[int] = []
    monkeypatch.setattr(heap, "served", lambda: served.append(1) or False)
    store = SQLiteStore(tmp_path / "t.db", ann_min_vectors=0, ann_background=False)
    memories = _memories(150)
    store.write(memories)
    assert store.wait_for_index(USER)
    served.clear()  # the index job's own searches, if any
    for memory in memories[:5]:
        assert store.search(USER, memory.embedding, 3)[0][0].id == memory.id
    store.close()
    assert len(served) == counted


def test_exact_searches_are_not_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "HEAP_RELEASE_ROWS", 10)
    served: list[int] = []
    monkeypatch.setattr(heap, "served", lambda: served.append(1) or False)
    store = SQLiteStore(tmp_path / "t.db")  # 150 rows: below the index's threshold
    memories = _memories(150)
    store.write(memories)
    assert not store.wait_for_index(USER)
    for memory in memories[:5]:
        assert store.search(USER, memory.embedding, 3)[0][0].id == memory.id
    store.close()
    assert served == []
