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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

#: Serialises trims: two threads finishing loads at once trim once each, one after the other.
_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _malloc_trim() -> Any | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release() -> bool:
    """Return freed heap pages to the system; whether the C library could be asked."""
    trim = _malloc_trim()
    if trim is None:
        return False
    with _LOCK:
        trim(0)
    return True
