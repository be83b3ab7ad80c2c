"""``bench/ingest_stages.py``: a step's CPU includes the steps it calls on its own thread, its
own time does not, and every second of CPU is counted once in the own times."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ingest_stages  # noqa: E402


class Clock:
    """A thread CPU clock that moves only when told to: each thread's own, as
    ``time.thread_time`` is."""

    def __init__(self) -> None:
        self.spent: dict[int, float] = {}

    def __call__(self) -> float:
        return self.spent.get(threading.get_ident(), 0.0)

    def advance(self, seconds: float) -> None:
        key = threading.get_ident()
        self.spent[key] = self.spent.get(key, 0.0) + seconds

    def total(self) -> float:
        return sum(self.spent.values())


def test_a_nested_step_counts_in_its_callers_figure_but_not_in_its_own_time() -> None:
    clock = Clock()
    steps = ingest_stages.Steps(clock)

    def inner() -> None:
        clock.advance(3.0)

    timed_inner = steps.timed(inner, "inner")

    def outer() -> None:
        clock.advance(1.0)
        timed_inner()
        timed_inner()
        clock.advance(0.5)

    steps.timed(outer, "outer")()
    assert steps.cpu == {"inner": 6.0, "outer": 7.5}
    assert steps.own == {"inner": 6.0, "outer": 1.5}
    assert steps.calls == {"inner": 2, "outer": 1}
    assert sum(steps.own.values()) == clock.total()  # every second once


def test_a_step_on_another_thread_is_not_subtracted_from_the_caller() -> None:
    clock = Clock()
    steps = ingest_stages.Steps(clock)
    timed_run = steps.timed(lambda: clock.advance(4.0), "run")

    def call() -> None:
        clock.advance(2.0)
        worker = threading.Thread(target=timed_run)  # the model's runs: another thread
        worker.start()
        worker.join()

    steps.timed(call, "call")()
    assert steps.own["call"] == steps.cpu["call"] == 2.0
    assert steps.own["run"] == steps.cpu["run"] == 4.0
    assert sum(steps.own.values()) == clock.total()


def test_a_failing_step_is_still_counted_and_the_error_passes_through() -> None:
    clock = Clock()
    steps = ingest_stages.Steps(clock)

    def fails() -> None:
        clock.advance(1.0)
        raise ValueError("refused")

    try:
        steps.timed(fails, "fails")()
    except ValueError as exc:
        assert str(exc) == "refused"
    else:  # pragma: no cover - the wrapper swallowed the error
        raise AssertionError("the error did not pass through")
    assert steps.cpu["fails"] == steps.own["fails"] == 1.0
