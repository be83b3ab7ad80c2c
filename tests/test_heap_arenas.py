"""One malloc arena for a process serving a store (``store/heap.py``, issue 18, sessions
24 and 25): threads that allocate share the process's arena instead of each keeping its own
freed pages, whichever store the process opened."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# Threads that each allocate and free, then glibc's own account of its arenas
# (``malloc_info``: one ``<heap nr=…>`` element an arena).
_CHILD = """
import ctypes, json, os, sys, tempfile, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
if sys.argv[1] == "store":
    from engrain.store.postgres import PostgresStore
    PostgresStore(sys.argv[2], pool_size=2).close()
elif sys.argv[1] == "sqlite":
    from engrain.store.sqlite import SQLiteStore
    SQLiteStore(sys.argv[2]).close()
elif sys.argv[1] == "called":
    from engrain.store import heap
    print(json.dumps(heap.share_one_arena()), file=sys.stderr)
held = threading.Barrier(6)
def work():
    blocks = [libc.malloc(4096) for _ in range(64)]
    held.wait()  # every thread allocated before any frees
    for block in blocks:
        libc.free(block)
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
path = tempfile.mktemp()
out = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
text = open(path).read()
os.unlink(path)
print(json.dumps(text.count("<heap nr=")))
"""


def _arenas(*args: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return int(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_threads_share_one_arena_once_it_is_asked_for_and_not_before() -> None:
    # glibc's own rule: a thread that allocates gets an arena of its own
    assert _arenas("none") > 2
    assert _arenas("called") == 1
    assert _arenas("called", env={"MALLOC_ARENA_MAX": ""}) == 1  # blank: unset


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_a_limit_set_by_the_environment_is_left_alone() -> None:
    # an operator's own limit (glibc reads it at start): share_one_arena changes nothing
    assert _arenas("called", env={"MALLOC_ARENA_MAX": "3"}) == 3


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_opening_a_postgresql_store_shares_one_arena(pg_url: str) -> None:
    assert _arenas("store", pg_url) == 1


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_opening_a_sqlite_store_shares_one_arena(tmp_path: Path) -> None:
    # the store's own threads (the checkpointer, loaders, saves) and the caller's share it
    assert _arenas("sqlite", str(tmp_path / "engrain.db")) == 1


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_an_operators_limit_holds_over_a_sqlite_store(tmp_path: Path) -> None:
    env = {"MALLOC_ARENA_MAX": "3"}
    assert _arenas("sqlite", str(tmp_path / "engrain.db"), env=env) == 3
