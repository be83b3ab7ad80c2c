"""``engrain.server.lifespan.on_close``: what an app owns is closed when it shuts down."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("fastapi")

from starlette.applications import Starlette
from starlette.testclient import TestClient

from engrain.server.lifespan import on_close


def test_sync_and_async_closers_run_at_shutdown_in_order() -> None:
    closed: list[str] = []

    async def close_async() -> None:
        closed.append("async")

    app = Starlette()
    on_close(app, lambda: closed.append("sync"))
    on_close(app, close_async)
    with TestClient(app):
        assert closed == []
    assert closed == ["sync", "async"]  # the lifespan already there ends first


def test_a_closer_runs_even_when_startup_fails() -> None:
    closed: list[str] = []

    @contextlib.asynccontextmanager
    async def failing(app: Any) -> AsyncIterator[None]:
        raise RuntimeError("the store is gone")
        yield  # pragma: no cover

    app = Starlette(lifespan=failing)
    on_close(app, lambda: closed.append("engine"))
    with pytest.raises(RuntimeError), TestClient(app):
        pass
    assert closed == ["engine"]
