"""Running spawned processes together: start them, wait until every one has opened its
engine, give one start signal, wait for the end."""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SPAWN = mp.get_context("spawn")


def run_together(
    jobs: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], timeout: float
) -> list[int | None]:
    """Run ``target(*args, ready, go)`` for each job in its own process; start them all
    at once when all are ready; their exit codes (None: killed after ``timeout``)."""
    go = SPAWN.Event()
    procs, readies = [], []
    for target, args in jobs:
        ready = SPAWN.Event()
        proc = SPAWN.Process(target=target, args=(*args, ready, go))
        proc.start()
        procs.append(proc)
        readies.append(ready)
    for ready, proc in zip(readies, procs, strict=True):
        while not ready.wait(timeout=1) and proc.is_alive():
            pass
    go.set()
    codes = []
    for proc in procs:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            codes.append(None)
        else:
            codes.append(proc.exitcode)
    return codes


def results(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The JSON each process left (a missing file reads as one error)."""
    out = []
    for path in paths:
        if path.exists():
            out.append(json.loads(path.read_text()))
        else:
            out.append({"ops": {}, "errors": {f"no result file {path.name}": 1}})
    return out
