"""Closing what an app owns when it shuts down, through its lifespan."""

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
