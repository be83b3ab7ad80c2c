"""Giving freed heap memory back to the operating system after a large user's load (issue 18).

Loading a working set of 100,000 memories allocates far more than it keeps (the rows'
blobs, a float32 matrix checked against the index and dropped, the saved index's bytes
beside the restored index: a tracemalloc peak of ~640 MB for ~170 MB kept). glibc returns
a freed block to the system only when it lies at the top of its heap or was mapped on its
own; after a large ``free`` it also raises its mapping threshold, so later arrays come from
the heap too. What is left is freed memory that still counts as resident: ~45 MB after a
load at 100,000 (``bench/resident.py``). :func:`release` asks glibc to hand back every
freed page (``malloc_trim(0)``: all arenas, free pages inside the heap included).

It is called after the rare large events only (a working set loaded from the file, an
approximate index loaded, built or patched), never per call: trimming walks the heap (a
few milliseconds). Elsewhere than glibc (macOS, musl) it does nothing.

A trim cannot hand back a page that still holds a live block. glibc maps a block on its
own only when its free heap cannot hold it and the block is above its threshold, and each
freed mapped block raises that threshold to its size (up to 32 MiB): after a large
user's load has freed its first transients (the image's bytes, the index's saved copy,
1–30 MB each at 100,000 memories) the next ones grow the heap instead, and the blocks
kept for good fill in around them. Half the processes measured then kept ~45 MB more
than the others after their load, trimmed or not (``bench/resident.py``, docs/scale.md
"Session 13"). :func:`map_large_blocks` fixes the threshold before a large user's load:
a block larger than a call's largest (:data:`ROW_BYTES` a row of the largest user
loaded, at least 4 MiB) that the free heap cannot hold is mapped and unmapped when
freed, whatever was freed before; a call's blocks still come from the heap (few page
faults per call).

**One arena** (:func:`share_one_arena`, issue 18, session 24). glibc gives each thread that
allocates its own arena, up to eight per core, and keeps each arena's freed pages apart:
memory a thread freed is reused by that thread's arena only, and an arena's heap shrinks
only from its top. A process serving a store runs many threads that each allocate a
little now and then (the pool's connections and workers, the two searches of
``search_many``, the background loaders, the model's threads): each arena grows to its
own high-water mark and keeps it. CPython allocates only while a thread holds the
interpreter lock, so those threads seldom allocate at the same moment and the arenas buy
them almost no parallelism. With one arena the process keeps one pool of freed pages,
reused by whichever thread allocates next: a process serving a 100,000-memory
PostgreSQL user with the held graph holds ~20 MB less after 200 calls
(``bench/pg_graph_rss.py``, docs/postgres.md "Session 24 … (h7)"). The limit applies to
arenas glibc creates after it is set; a store sets it when it opens, before its own
threads start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

#: Serialises trims: two threads finishing loads at once trim once each, one after the other.
_LOCK = threading.Lock()
#: Bytes a row of the working set the largest blocks of a call's work take: at 100,000
#: rows a call allocates blocks of 1-4 MiB (several int64 or float64 arrays of the rows
#: at once); a threshold of 1 MiB mapped them anew every call (~400 page faults a call
#: against ~160-240 with glibc's own threshold), 4 MiB left ~26 (docs/scale.md
#: "Session 13"). Blocks up to this many bytes a row stay in the heap.
ROW_BYTES = 40
#: The fixed threshold's floor (4 MiB: what 100,000 rows measured) and glibc's own
#: ceiling for it (``HEAP_MAX_SIZE / 2`` on 64-bit systems).
MMAP_MIN = 4 << 20
MMAP_MAX = 32 << 20
#: ``mallopt``'s parameter numbers (glibc's ``malloc.h``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: The arenas a process keeps once :func:`share_one_arena` ran (the module docstring).
ARENAS = 1
#: Whether this process limited its arenas (set once).
_shared = False
#: The threshold this process fixed (0: none yet); only ever raised.
_fixed = 0


def _libc(name: str, argtypes: list[Any], restype: Any) -> Any | None:
    """The C library's function ``name`` typed as given, or ``None`` where the C library has
    none (not glibc)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


@lru_cache(maxsize=1)
def _malloc_trim() -> Any | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    return _libc("malloc_trim", [ctypes.c_size_t], ctypes.c_int)


@lru_cache(maxsize=1)
def _mallopt() -> Any | None:
    """glibc's ``mallopt``, or ``None`` where the C library has none."""
    return _libc("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)


def _tuned_by_user() -> bool:
    """Whether the environment sets glibc's thresholds itself (then they are left alone)."""
    return any(
        name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    ) or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")


def _arenas_by_user() -> bool:
    """Whether the environment sets glibc's arena limit itself (then it is left alone)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return bool(os.environ.get("MALLOC_ARENA_MAX")) or "arena_max" in tunables


def share_one_arena() -> bool:
    """Limit glibc to :data:`ARENAS` malloc arena (the module docstring), once per process,
    unless the environment sets the limit or the C library has no ``mallopt``; whether
    this process's limit is now set by this module."""
    global _shared
    with _LOCK:
        if _shared:
            return True
        mallopt = _mallopt()
        if mallopt is None or _arenas_by_user():
            return False
        _shared = bool(mallopt(_M_ARENA_MAX, ARENAS))
        return _shared


def threshold_for(rows: int) -> int:
    """The mapping threshold for a working set of ``rows`` rows: :data:`ROW_BYTES` a row
    (a call's largest blocks), within [:data:`MMAP_MIN`, :data:`MMAP_MAX`]."""
    return min(MMAP_MAX, max(MMAP_MIN, ROW_BYTES * rows))


def map_large_blocks(rows: int) -> int:
    """Before loading a working set of ``rows`` rows: fix glibc's mapping threshold at
    :func:`threshold_for` ``rows`` (and its trim threshold at twice that, as glibc pairs
    them), unless this process fixed a higher one, the environment sets them, or the C
    library has no ``mallopt``. The threshold now in force by this module (0: none)."""
    global _fixed
    with _LOCK:
        want = threshold_for(rows)
        if want <= _fixed:
            return _fixed
        mallopt = _mallopt()
        if mallopt is None or _tuned_by_user():
            return _fixed
        if mallopt(_M_MMAP_THRESHOLD, want) and mallopt(_M_TRIM_THRESHOLD, 2 * want):
            _fixed = want
        else:  # pragma: no cover - glibc refused a value within its bounds
            log.warning("glibc refused a mapping threshold of %d bytes", want)
        return _fixed


def release() -> bool:
    """Return freed heap pages to the system; whether the C library could be asked."""
    trim = _malloc_trim()
    if trim is None:
        return False
    with _LOCK:
        trim(0)
    return True
