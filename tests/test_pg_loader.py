"""The background loader the PostgreSQL store's in-process learnings and working sets share
(``store/postgres/loader.py``): one load per key at a time, paced, failures logged."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from engrain.store.postgres import loader as loader_module
from engrain.store.postgres.loader import Answering, Load, Loader, four_times


class Jobs:
    """A job that records each load's key and thread, optionally waits for ``go``, marks
    loads light or fails when told."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []
        self.go = threading.Event()
        self.go.set()
        self.light: set[str] = set()
        self.fail = False

    def __call__(self, key: str, load: Load) -> None:
        self.ran.append((key, threading.current_thread().name))
        assert self.go.wait(30)
        if key in self.light:
            load.full = False
        if self.fail:
            raise RuntimeError("the database went away")


def _loader(
    jobs: Jobs, pause: float = 0.0, *, light_pause: float | None = None, **options: Any
) -> Loader[str]:
    def paced(took: float, full: bool) -> float:
        return pause if full or light_pause is None else light_pause

    return Loader(threading.Lock(), jobs, paced, what="the test rows", name="t-load", **options)


def _join(loader: Loader[str], key: str) -> Load:
    load = loader.get(key)
    assert load is not None
    if load.thread is not None:
        load.thread.join(30)
    return load


def test_one_load_per_key_at_a_time_other_keys_beside_it() -> None:
    jobs = Jobs()
    jobs.go.clear()
    loader = _loader(jobs)
    loader.start("alice")
    loader.start("alice")  # one runs: not started again
    loader.start("bob")  # another key: its own thread beside it
    running = loader.get("alice")
    assert running is not None and running.thread is not None
    jobs.go.set()
    _join(loader, "alice"), _join(loader, "bob")
    assert sorted(jobs.ran) == [("alice", "t-load"), ("bob", "t-load")]
    loader.start("alice")  # ended, no pause: starts again
    _join(loader, "alice")
    assert [k for k, _ in jobs.ran].count("alice") == 2


def test_many_threads_asking_at_once_start_one_load() -> None:
    jobs = Jobs()
    jobs.go.clear()
    loader = _loader(jobs)
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        loader.start("alice")

    askers = [threading.Thread(target=ask) for _ in range(8)]
    for thread in askers:
        thread.start()
    for thread in askers:
        thread.join(30)
    jobs.go.set()
    _join(loader, "alice")
    assert jobs.ran == [("alice", "t-load")]


def test_the_next_load_waits_for_the_pause_after_the_last() -> None:
    jobs = Jobs()
    loader = _loader(jobs, pause=3600.0)
    loader.start("alice")
    _join(loader, "alice")
    loader.start("alice")  # within the pause: not started
    assert len(jobs.ran) == 1
    load = _join(loader, "alice")
    assert load.not_before > 0 and load.full_not_before == 0.0
    load.not_before = 0.0  # the pause has passed
    loader.start("alice")
    _join(loader, "alice")
    assert len(jobs.ran) == 2


def test_with_light_loads_a_full_one_paces_only_full_ones() -> None:
    jobs = Jobs()
    loader = _loader(jobs, pause=3600.0, light_pause=0.0, light_loads=True)
    loader.start("alice")  # full: the next full one waits, a light one may start at once
    load = _join(loader, "alice")
    assert load.full and load.full_not_before > 0 and load.not_before == 0.0
    jobs.light.add("alice")
    loader.start("alice")  # starts (the job sees full_not_before and reads a delta)
    load = _join(loader, "alice")
    assert len(jobs.ran) == 2 and not load.full
    light = _loader(jobs, pause=0.0, light_pause=3600.0, light_loads=True)
    light.start("alice")
    assert _join(light, "alice").not_before > 0  # a light load's own pause


def test_the_pause_is_four_times_the_load_and_at_least_the_floor() -> None:
    assert four_times(0.1, 5.0) == 5.0
    assert four_times(10.0, 5.0) == 40.0
    assert four_times(0.1, 0.0) == pytest.approx(0.4)


def test_the_owner_decides_whether_a_load_is_wanted() -> None:
    jobs = Jobs()
    loader = _loader(jobs)
    loader.start("alice", lambda: False)
    assert loader.get("alice") is None and not jobs.ran
    loader.start("alice", lambda: True)
    _join(loader, "alice")
    assert len(jobs.ran) == 1


def test_a_failed_load_is_logged_paced_and_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = Jobs()
    jobs.fail = True
    loader = _loader(jobs, pause=3600.0)
    with caplog.at_level(logging.ERROR):
        loader.start("alice")
        load = _join(loader, "alice")
    assert "loading the test rows failed" in caplog.text and "went away" in caplog.text
    assert load.thread is None and load.not_before > 0  # paced like any other load


def test_after_close_no_load_starts_and_a_failure_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = Jobs()
    jobs.go.clear()
    jobs.fail = True
    loader = _loader(jobs)
    with caplog.at_level(logging.ERROR):
        loader.start("alice")
        loader.close()  # the store closes under the running load
        jobs.go.set()
        _join(loader, "alice")
        loader.start("bob")
    assert loader.get("bob") is None and [k for k, _ in jobs.ran] == ["alice"]
    # this loader's records only: caplog takes every thread's, and another test's thread
    # may log a failure of its own meanwhile
    assert not [r for r in caplog.records if r.name == loader_module.__name__]


def test_without_background_the_calling_thread_loads() -> None:
    jobs = Jobs()
    loader = _loader(jobs, background=False)
    loader.start("alice")
    assert jobs.ran == [("alice", threading.current_thread().name)]
    load = loader.get("alice")
    assert load is not None and load.thread is None


def test_a_load_asked_for_during_a_call_begins_once_the_call_has_answered() -> None:
    jobs, answering = Jobs(), Answering()
    loader = _loader(jobs, answering=answering)
    with answering.call():
        loader.start("alice")
        loader.start("alice")  # asked twice: one load
        assert loader.get("alice") is None and jobs.ran == []  # nothing begun beside the call
    _join(loader, "alice")
    assert jobs.ran == [("alice", "t-load")]
    loader.start("bob")  # outside any call: at once
    _join(loader, "bob")
    assert jobs.ran[-1] == ("bob", "t-load")


def test_with_calls_in_flight_the_first_to_answer_begins_the_loads() -> None:
    jobs, answering = Jobs(), Answering()
    loader = _loader(jobs, answering=answering, background=False)
    first, second = answering.call(), answering.call()
    first.__enter__()
    second.__enter__()
    loader.start("alice")  # asked during the second call
    assert jobs.ran == []
    first.__exit__(None, None, None)  # another call answered: the load begins
    assert jobs.ran == [("alice", threading.current_thread().name)]
    loader.start("bob")  # the second call still runs: held until it answers
    assert len(jobs.ran) == 1
    second.__exit__(None, None, None)
    assert jobs.ran[-1][0] == "bob"


def test_a_call_that_fails_still_begins_the_loads_it_asked_for() -> None:
    jobs, answering = Jobs(), Answering()
    loader = _loader(jobs, answering=answering, background=False)
    with pytest.raises(RuntimeError), answering.call():
        loader.start("alice")
        raise RuntimeError("the call failed")
    assert [key for key, _ in jobs.ran] == ["alice"]


def test_a_load_whose_thread_cannot_start_leaves_the_key_to_the_next_asking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of memory (or at the process's thread limit) a load's thread cannot start: the
    asking call is not failed by it, and the key is not left marked as loading for good
    (no load of it would ever start again in the process: every call served by SQL)."""
    jobs = Jobs()
    loader = _loader(jobs)
    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == "t-load":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    loader.start("alice")  # raises nothing into the caller
    monkeypatch.undo()
    load = loader.get("alice")
    assert load is not None and load.thread is None and jobs.ran == []
    loader.start("alice")  # memory is back: the next asking loads it
    _join(loader, "alice")
    assert jobs.ran == [("alice", "t-load")]
