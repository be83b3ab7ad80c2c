"""``engrain serve`` keeps what its process holds once started out of the garbage
collector's passes (``server/collector.py``): garbage of the start is collected first, what
is alive then is skipped by every later pass, and both ways of serving (one process; a
worker of ``--workers N``) do it as the app starts, not before."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

uvicorn = pytest.importorskip("uvicorn")

from click.testing import CliRunner  # noqa: E402

from engrain.cli.app import cli  # noqa: E402
from engrain.server.app import from_environment  # noqa: E402
from engrain.server.collector import settle  # noqa: E402

from .aio import run_async  # noqa: E402


class _Node:
    def __init__(self) -> None:
        self.other: Any = None


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    """Every test starts and ends with nothing frozen (other tests' collections see all)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def _tracked(held: object) -> bool:
    return any(o is held for o in gc.get_objects())


def test_settle_collects_the_garbage_then_keeps_the_living_out_of_the_passes() -> None:
    living = [_Node()]
    cycle = _Node()
    cycle.other = _Node()
    cycle.other.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert _tracked(living)
    frozen = settle()
    assert gone() is None  # the cycle made before was collected, not frozen
    # the count is not compared with a later one: another thread of the test process may
    # freeze more, and a frozen object whose last reference goes leaves the count
    assert frozen > 0 and gc.get_freeze_count() > 0
    assert not _tracked(living)  # no generation holds it: no pass walks it
    made_after = [_Node()]
    assert _tracked(made_after)
    gc.unfreeze()
    assert _tracked(living)


def _started(app: Any) -> dict[str, int]:
    """The freeze count before the app's lifespan starts and while it runs."""
    seen = {"before": gc.get_freeze_count()}

    async def run() -> None:
        async with app.router.lifespan_context(app):
            seen["started"] = gc.get_freeze_count()

    run_async(run())
    return seen


def test_serve_settles_its_process_as_the_app_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen.update(_started(app))
        app.state.engine.close()

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setenv("ENGRAIN_EMBEDDER", "hash")
    result = CliRunner().invoke(
        cli, ["serve", "--url", f"sqlite:///{tmp_path / 'serve.db'}"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert seen["before"] == 0
    assert seen["started"] > 0


def test_a_worker_settles_its_process_as_its_app_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGRAIN_URL", f"sqlite:///{tmp_path / 'worker.db'}")
    monkeypatch.setenv("ENGRAIN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAIN_EMBEDDER", "hash")
    seen = _started(from_environment())  # its lifespan's end closes the engine
    assert seen["before"] == 0
    assert seen["started"] > 0
