"""One engine shared by threads, and one ``AsyncEngine`` shared by concurrent tasks: no
exception of any kind (a NotFoundError for a memory another caller forgot is expected),
every memory reported stored is there at the end unless forgotten, and nothing forgotten
comes back.

Issue 11 measured 11,124 raw ``ValueError: operands could not be broadcast`` against 1,525
successes with four threads, after which every call for the user failed."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from pathlib import Path

import pytest

from tests.reliability import helpers
from tests.reliability.scale import scales
from tests.reliability.workload import Workload


def _judge(name: str, workload: Workload, engine: object, logged: helpers.LoggedErrors) -> None:
    summary = workload.verdict(engine)
    summary["background_errors"] = dict(logged.counts)
    print(f"\n{name}: {json.dumps(summary, default=str)}")
    assert summary["errors"] == 0, workload.tally.report()
    assert not logged.counts, dict(logged.counts)
    assert summary["lost"] == 0, summary["lost_examples"]
    assert summary["resurrected"] == 0
    assert summary["forget_missed"] == 0
    assert summary["unexpected_not_found"] == 0
    assert summary["stored"] > 0


@pytest.mark.parametrize("seconds", scales(3.0, 60.0))
def test_threads_share_one_engine(url: str, data_dir: Path, seconds: float) -> None:
    """Four threads run the mixed workload on one Engine."""
    engine = helpers.open_engine(url, data_dir)
    workload = Workload()
    deadline = time.monotonic() + seconds

    def loop(index: int) -> None:
        rng = random.Random(index)
        while time.monotonic() < deadline:
            call = workload.plan(rng)
            try:
                result = getattr(engine, call.op)(*call.args, **call.kwargs)
            except Exception as exc:  # judged: only a NotFound for a forgotten id is expected
                workload.failed(call, exc)
            else:
                workload.done(call, result)

    with helpers.LoggedErrors() as logged:
        threads = [threading.Thread(target=loop, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        engine.wait(timeout=60)
    try:
        _judge(f"threads x4 {seconds:g}s", workload, engine, logged)
    finally:
        engine.close()


@pytest.mark.parametrize("seconds", scales(3.0, 60.0))
def test_async_engine_with_16_tasks(url: str, data_dir: Path, seconds: float) -> None:
    """Sixteen tasks run the mixed workload on one AsyncEngine."""
    aengine = helpers.open_async_engine(url, data_dir)
    workload = Workload()

    async def task(index: int, deadline: float) -> None:
        rng = random.Random(100 + index)
        while time.monotonic() < deadline:
            call = workload.plan(rng)
            try:
                result = await getattr(aengine, call.op)(*call.args, **call.kwargs)
            except Exception as exc:  # judged as in the threads test
                workload.failed(call, exc)
            else:
                workload.done(call, result)

    async def run() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(task(i, deadline) for i in range(16)))
        await aengine.wait(timeout=60)

    with helpers.LoggedErrors() as logged:
        asyncio.run(run())
    try:
        _judge(f"AsyncEngine x16 {seconds:g}s", workload, aengine.sync, logged)
    finally:
        aengine.sync.close()
