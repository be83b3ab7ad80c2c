"""``threads.Pool``: the engine's pools, whose threads start bounded (``threads.booted``),
keep what ``ThreadPoolExecutor`` promised: work in order on at most N threads, a pool
nobody holds lets its threads end, and an open pool's work is finished at the
interpreter's exit."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

from engrain.threads import Pool


def test_work_runs_on_at_most_the_pools_threads_and_gives_its_results() -> None:
    pool = Pool(2, "engrain-test-pool")
    gate = threading.Event()
    names: set[str] = set()

    def job(i: int) -> int:
        names.add(threading.current_thread().name)
        assert gate.wait(60)
        return i * i

    futures = [pool.submit(job, i) for i in range(6)]
    gate.set()
    assert [f.result(60) for f in futures] == [i * i for i in range(6)]
    assert names <= {"engrain-test-pool_0", "engrain-test-pool_1"}
    failed = pool.submit(lambda: 1 // 0)
    assert isinstance(failed.exception(60), ZeroDivisionError)
    pool.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("engrain-test-pool")]


def test_a_pool_nobody_holds_lets_its_threads_end() -> None:
    pool = Pool(1, "engrain-test-dropped")
    assert pool.submit(lambda: 7).result(60) == 7
    (thread,) = [t for t in threading.enumerate() if t.name.startswith("engrain-test-dropped")]
    held = weakref.ref(pool)
    del pool
    gc.collect()
    assert held() is None
    thread.join(60)
    assert not thread.is_alive()


def test_an_open_pools_work_is_finished_at_the_interpreters_exit(tmp_path: Path) -> None:
    done = tmp_path / "done"
    script = (
        "import time\n"
        "from engrain.threads import Pool\n"
        "pool = Pool(1, 'engrain-test-exit')\n"
        "def job():\n"
        "    time.sleep(0.5)\n"
        f"    open({str(done)!r}, 'w').write('finished')\n"
        "pool.submit(job)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert done.read_text() == "finished"


def test_a_thread_whose_start_runs_out_of_memory_is_not_counted_as_the_pools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Thread.start()`` itself may raise ``MemoryError`` (its boot state cannot be
    allocated): the thread was already in the pool's list, so a pool of one counted it as
    its thread, queued every later job for it and never ran one (``Worker.wait`` and the
    engine's ``close()`` then waited for ever). ``ThreadPoolExecutor`` counted a thread only
    once it started."""
    pool = Pool(1, "engrain-test-nomem")
    start = threading.Thread.start

    def no_memory(self: threading.Thread) -> None:
        if self.name.startswith("engrain-test-nomem"):
            raise MemoryError
        start(self)

    monkeypatch.setattr(threading.Thread, "start", no_memory)
    with pytest.raises(MemoryError):
        pool.submit(lambda: 1)
    monkeypatch.undo()
    try:
        assert pool.submit(lambda: 7).result(60) == 7
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
