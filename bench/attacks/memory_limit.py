"""Attack: memory runs out at a random point (``RLIMIT_AS``), session 26 (h6).

Each round's child opens the SQLite store (hash embedder, ``ENGRAIN_ANN_MIN_VECTORS=0``:
every user's approximate index is built, patched and saved; every other round
``auto_compress`` on), loads the user's working set with a ``context()``, then a timer
thread sets the process's address-space limit to what it maps now plus a random 0–24 MB,
at a random moment 0–1.5 s later, inside whatever call runs then (an ingest, an index build
or save, a compression, a read). The child makes random public calls (remember,
ingest_conversation, import of three records, forget, pin, update, compress, context,
recall, export) until 12 failed or 60 were made; every third round closes the engine under
the limit. Then the limit is lifted and the same engine must remember, import and answer.

The rules (``file_limit.py``'s, for memory): every failed call raised an ``EngrainError``
(never ``MemoryError``, never a thread's death, never an abort) and left the user's
memories as they were; the child exits 0 within 300 s; once the limit is lifted the
engine writes and answers; after each round a new engine finds every acknowledged memory
and none forgotten, ``integrity_check`` ok, no session summarised twice or half compressed.

    PYTHONPATH=src .venv/bin/python bench/attacks/memory_limit.py [--rounds 9] [--seed 26] \\
        [--json bench/results/attack-memory-limit-s26-h6.json]
"""

from __future__ import annotations

import random
import resource
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import USER, limited_main

from engrain import Engine

SLACK = 24 * 2**20


def address_space() -> int:
    """What this process maps now (``VmSize``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def limit_memory(limit: int) -> None:
    """This process may map no more than ``limit`` bytes: an allocation past it fails."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def lift_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


class MemoryLimit:
    """What the process maps once its working set and index are loaded, plus the round's
    slack, set by a timer thread at a random moment 0-1.5 s into the calls: inside whatever
    call runs then. Lifted while what a failed call left is read (the read needs room)."""

    progress = True  # a child that hangs still tells what it acknowledged and forgot
    close_may_refuse = True

    def __init__(self, engine: Engine, db: Path, slack: int, rng: random.Random) -> None:
        engine.context("what was opened?", USER)  # the working set and its index, loaded
        self.limit = address_space() + slack
        self._timer = threading.Timer(rng.uniform(0.0, 1.5), limit_memory, (self.limit,))

    def start(self) -> None:
        self._timer.start()

    @contextmanager
    def lifted(self) -> Iterator[None]:
        self._timer.join()
        lift_limit()
        yield
        limit_memory(self.limit)

    def end(self) -> None:
        self._timer.cancel()
        self._timer.join()
        lift_limit()


def main() -> None:
    limited_main(__doc__, __file__, MemoryLimit, attack="memory_limit",
                 prefix="h6-memory-limit-", rounds=9, seed=26, slack=SLACK)  # fmt: skip


if __name__ == "__main__":
    main()
