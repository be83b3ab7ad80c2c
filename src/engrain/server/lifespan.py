"""Running something when an app starts and closing what it owns when it shuts down,
through its lifespan."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette


def on_close(app: Starlette, close: Callable[[], Awaitable[None] | None]) -> None:
    """Call ``close()`` (awaiting it when it returns an awaitable) when ``app``'s lifespan
    ends, after the lifespan it already has, and also when that one fails."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(host: Any) -> AsyncIterator[Any]:
        try:
            async with inner(host) as state:
                yield state
        finally:
            result = close()
            if inspect.isawaitable(result):
                await result

    app.router.lifespan_context = lifespan


def on_start(app: Starlette, start: Callable[[], object]) -> None:
    """Call ``start()`` when ``app``'s lifespan has started (after the lifespan it already
    has entered), before the server takes its first request."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(host: Any) -> AsyncIterator[Any]:
        async with inner(host) as state:
            start()
            yield state

    app.router.lifespan_context = lifespan
