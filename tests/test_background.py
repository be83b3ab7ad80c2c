"""The background worker: keyed jobs run once per burst, and a request that arrives while
its job runs is not lost."""

from __future__ import annotations

import threading

from engrain.background import Worker


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
