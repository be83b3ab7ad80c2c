"""glibc's mapping threshold fixed before a large user's load (``store/heap.py``, issue 18):
a load's transients are mapped and unmapped on their own instead of leaving holes in the
heap, a call's arrays still come from the heap."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engrain.store import columns, heap
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _memories

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


class _Mallopt:
    """A stand-in for glibc's ``mallopt`` recording its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


@pytest.fixture
def mallopt(monkeypatch: pytest.MonkeyPatch) -> _Mallopt:
    fake = _Mallopt()
    monkeypatch.setattr(heap, "_mallopt", lambda: fake)
    monkeypatch.setattr(heap, "_fixed", 0)
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    return fake


def test_the_threshold_is_above_a_calls_largest_array_within_glibcs_bounds() -> None:
    assert heap.threshold_for(5_000) == heap.MMAP_MIN == 4 << 20
    assert heap.threshold_for(100_000) == heap.MMAP_MIN  # blocks of 1-4 MiB a call
    assert heap.threshold_for(200_000) == 8_000_000
    assert heap.threshold_for(1_000_000) == heap.MMAP_MAX == 32 << 20


def test_the_threshold_is_fixed_once_and_only_raised(mallopt: _Mallopt) -> None:
    assert heap.map_large_blocks(100_000) == heap.MMAP_MIN
    assert mallopt.calls == [(-3, heap.MMAP_MIN), (-1, 2 * heap.MMAP_MIN)]
    assert heap.map_large_blocks(20_000) == heap.MMAP_MIN  # a smaller user: unchanged
    assert heap.map_large_blocks(100_000) == heap.MMAP_MIN
    assert len(mallopt.calls) == 2
    big = heap.threshold_for(300_000)
    assert heap.map_large_blocks(300_000) == big > heap.MMAP_MIN
    assert mallopt.calls[2:] == [(-3, big), (-1, 2 * big)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MALLOC_MMAP_THRESHOLD_", "262144"),
        ("MALLOC_TRIM_THRESHOLD_", "1048576"),
        ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=262144"),
    ],
)
def test_thresholds_set_by_the_environment_are_left_alone(
    mallopt: _Mallopt, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert heap.map_large_blocks(100_000) == 0
    assert mallopt.calls == []


def test_without_mallopt_nothing_is_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_mallopt", lambda: None)
    monkeypatch.setattr(heap, "_fixed", 0)
    assert heap.map_large_blocks(100_000) == 0


_CHILD = """
import ctypes, json, sys
from engrain.store import heap
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
        "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    heap.map_large_blocks(100_000)
mapped = []
# transients larger than any free space of the heap, a call's block, a transient again
for size in (12 << 20, 12 << 20, 2 << 20, 12 << 20):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    mapped.append(libc.mallinfo2().hblks - before)
    libc.free(block)
print(json.dumps(mapped))
"""


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_a_fixed_threshold_maps_every_large_block_and_keeps_small_ones_in_the_heap() -> None:
    def mapped(mode: str) -> list[int]:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True
        )
        return list(json.loads(done.stdout))

    # glibc's own rule: the first freed mapped block raises its threshold, so the next
    # one grows the heap (where it leaves room that blocks kept for good fill in)
    assert mapped("dynamic")[1:] == [0, 0, 0]
    assert mapped("fixed") == [1, 1, 0, 1]


def test_a_large_users_load_fixes_the_threshold_a_small_ones_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 100)
    asked: list[int] = []

    def record(rows: int) -> int:
        asked.append(rows)
        return 0

    monkeypatch.setattr(heap, "map_large_blocks", record)
    path = tmp_path / "t.db"
    store = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    store.write(_memories(150))
    store.write([replace(m, user_id="small") for m in _memories(20, seed=9)])
    store.close()
    again = SQLiteStore(path, ann_min_vectors=0, ann_background=False)
    assert again.count(USER) == 150 and again.count("small") == 20
    again.close()
    assert asked == [150]
