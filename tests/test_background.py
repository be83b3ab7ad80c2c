"""The background worker: keyed jobs run once per burst, and a request that arrives while
its job runs is not lost."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from engrain import Engine
from engrain.background import Worker
from engrain.embed.hashing import HashEmbedder
from engrain.store.memory import MemoryStore

from .conftest import make_settings


def test_a_burst_of_queued_requests_runs_once() -> None:
    worker = Worker()
    gate = threading.Event()
    runs: list[str] = []
    worker.submit("block", gate.wait)  # occupies the single thread
    futures = [worker.submit("job", lambda: runs.append("job")) for _ in range(5)]
    assert len({id(f) for f in futures}) == 1
    gate.set()
    worker.wait()
    assert runs == ["job"]
    worker.close()


def test_a_request_during_a_run_runs_it_once_more() -> None:
    worker = Worker()
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    data = [1]

    def job() -> None:
        snapshot = list(data)  # the job reads first …
        started.set()
        release.wait()
        seen.append(len(snapshot))  # … and acts on what it read

    worker.submit("compress", job)
    started.wait()
    data.append(2)  # a write the running job did not see
    worker.submit("compress", job)
    worker.submit("compress", job)  # several requests during one run: one re-run
    release.set()
    worker.wait()
    assert seen == [1, 2]
    worker.close()


def test_a_failed_job_is_logged_and_the_worker_goes_on(caplog) -> None:  # type: ignore[no-untyped-def]
    worker = Worker()

    def boom() -> None:
        raise RuntimeError("disk full")

    worker.submit("bad", boom)
    worker.wait()
    assert "background job 'bad' failed" in caplog.text
    done: list[bool] = []
    worker.submit("good", lambda: done.append(True))
    worker.close()
    assert done == [True]


def test_a_finished_job_is_not_kept() -> None:
    """One job per key ever asked for stayed in the worker with its result (a tier set
    holding its memories, per user served: session 23 h2, ``bench/attacks/many_users.py``)."""
    worker = Worker()
    futures = [worker.submit(("tiers", f"user{n}"), lambda n=n: n) for n in range(50)]
    worker.wait()
    assert [f.result() for f in futures] == list(range(50))
    assert worker._pending == {}
    again = worker.submit(("tiers", "user3"), lambda: "again")  # a key asked again runs again
    assert again.result() == "again"
    worker.close()


def test_a_closed_worker_runs_nothing_and_starts_no_thread() -> None:
    """A call that outlived its engine's ``close()`` (``lifecycle.py``) asks for a job:
    nothing runs and the worker's thread is not started again."""
    worker = Worker("engrain-closed-test")
    worker.submit("job", lambda: None).result()
    worker.close()
    runs: list[str] = []
    future = worker.submit("late", lambda: runs.append("late"))
    assert future.cancelled()
    worker.wait()
    assert runs == []
    assert not [t for t in threading.enumerate() if t.name.startswith("engrain-closed-test")]


def _waited(wait: Callable[[], object]) -> list[object]:
    """``wait()`` run on a thread of its own; what it returned (empty if it has not): the
    test's thread is never the one held by a wait that does not end."""
    out: list[object] = []
    waiter = threading.Thread(target=lambda: out.append(wait()), daemon=True)
    waiter.start()
    waiter.join(60.0)  # a bound for the test only: the wait's own is 0.05 s
    return out


def test_a_wait_with_a_timeout_ends_while_jobs_still_run() -> None:
    """``wait(timeout)`` waited again for as long as a job ran: a job slower than the
    timeout held it until the job ended (its ``TimeoutError`` was taken for a failed job
    and the wait started over), and with several jobs each one had the whole timeout."""
    worker = Worker()
    release = threading.Event()
    try:
        for key in ("one", "two", "three"):
            worker.submit(key, release.wait)
        assert _waited(lambda: worker.wait(0.05)) == [False]
    finally:
        release.set()
    assert worker.wait(60.0) is True
    worker.close()


def test_an_engines_wait_says_whether_the_background_work_is_done(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    release = threading.Event()
    try:
        engine.worker.submit(("slow",), release.wait)
        assert _waited(lambda: engine.wait(0.05)) == [False]
    finally:
        release.set()
    assert engine.wait() is True
    engine.close()


def test_a_jobs_own_timeout_error_is_its_failure_not_the_waits() -> None:
    worker = Worker()

    def times_out() -> None:
        raise TimeoutError("the LLM did not answer")

    worker.submit("tiers", times_out)
    assert worker.wait(60.0) is True
    worker.close()
