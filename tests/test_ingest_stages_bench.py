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


def test_a_steps_wall_time_includes_its_wait_and_its_nested_steps() -> None:
    clock, now = Clock(), [0.0]
    steps = ingest_stages.Steps(clock, wall_clock=lambda: now[0])

    def commit() -> None:  # a durable commit: a little CPU, then waiting on the disk
        clock.advance(0.25)
        now[0] += 4.0

    timed_commit = steps.timed(commit, "commit")

    def write() -> None:
        clock.advance(1.0)
        now[0] += 1.0
        timed_commit()

    steps.timed(write, "write")()
    assert steps.wall == {"commit": 4.0, "write": 5.0}
    assert steps.cpu == {"commit": 0.25, "write": 1.25}


def test_medians_per_side_leave_out_a_step_one_run_lacks() -> None:
    def run(cpu: float, steps: dict[str, float]) -> dict[str, object]:
        return {"process_cpu_s": cpu, "calling_thread_cpu_s": cpu / 10, "wall_s": cpu / 2,
                "rest_cpu_s": 1.0,
                "steps": {k: {"cpu_s": v, "wall_s": 2 * v} for k, v in steps.items()}}  # fmt: skip

    rows = [run(30.0, {"write": 0.3, "model": 27.0}), run(32.0, {"write": 0.5}),
            run(31.0, {"write": 0.4, "model": 28.0})]  # fmt: skip
    out = ingest_stages.medians(rows)  # type: ignore[arg-type]
    assert out["process_cpu_s"] == 31.0
    assert out["steps"] == {"write": {"cpu_s": 0.4, "wall_s": 0.8}}
