"""``bench/wait_split.py``'s own machinery: the calling thread's CPU, run-queue wait and
context switches read from ``/proc``, and the summary of a run's calls (deep ones apart)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import wait_split  # noqa: E402

pytestmark = pytest.mark.skipif(
    not Path("/proc/thread-self/schedstat").is_file(), reason="Linux schedstat only"
)


def test_sched_reads_this_threads_cpu_and_switches() -> None:
    before = wait_split._sched()
    thread = time.thread_time()
    total = 0
    while time.thread_time() - thread < 0.05:  # 50 ms of this thread's CPU
        total += sum(range(1000))
    time.sleep(0.01)  # a voluntary switch
    after = wait_split._sched()
    spent = (time.thread_time() - thread) * 1000.0
    # the kernel's count of this thread's time on a core agrees with thread_time
    assert after[0] - before[0] == pytest.approx(spent, rel=0.2)
    assert after[1] >= before[1]  # run-queue time only grows
    assert after[2] >= before[2] + 1  # the sleep gave the core up
    assert after[3] >= before[3]


def _call(wall: float, thread: float, budget: int) -> dict[str, object]:
    return {"wall": wall, "thread": thread, "process": thread + 1.0, "waited": wall - thread,
            "queued": wall - thread - 0.5, "blocked": 0.5, "voluntary": 1, "involuntary": 2,
            "budget": budget, "laps": {"embed": wall / 2}}  # fmt: skip


def test_summary_takes_each_measure_and_the_deep_calls_apart() -> None:
    calls = [_call(10.0 + i, 5.0, 3000 if i % 4 == 0 else 500) for i in range(20)]
    out = wait_split.summarize(calls)
    assert out["all_calls"] == 20 and out["deep_calls"] == 5
    assert out["all_wall_p50"] == 20.0  # the middle of 10..29 (index round(0.5 * 19) = 10)
    assert out["all_wall_p95"] == 28.0
    assert out["deep_wall_p50"] == 18.0  # deep: 10, 14, 18, 22, 26
    assert out["all_blocked_p50"] == 0.5 and out["all_involuntary_p95"] == 2
    assert out["lap_embed_p50"] == 10.0
