"""Serving an ASGI app at one path of a Starlette (or FastAPI) app, its work running for
the life of the host: how ``/mcp`` is served, the SDK's app (:class:`engrain.mcp.MCPApp`)
or the one that builds it on its first request (:class:`engrain.server.mcp.LaterMCP`).

Imports Starlette only: :mod:`engrain.mcp` (and ``engrain mcp`` over stdio) use it without
loading FastAPI or the server's routes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send


class Mountable(Protocol):
    """An ASGI app with work to run while its host serves (a task group, a session
    manager): :meth:`run` is entered in the host's lifespan."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""

    def run(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The work to run for the life of the host."""


class ExactRoute(Route):
    """A plain route that names itself in the scope (``scope["route"]``), as FastAPI's own
    routes do, so the server's metrics and logs label its requests with its path rather
    than ``<unmatched>``."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Match as :class:`Route` does, naming the route in the child scope."""
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child = {**child, "route": self}
        return match, child


def mount(app: Starlette, mounted: Mountable, path: str = "/mcp") -> None:
    """Serve ``mounted`` at ``path`` and ``path/`` of ``app`` (exact routes: no redirect
    from one to the other, every method reaches it) and run it inside ``app``'s lifespan,
    after the lifespan ``app`` already has starts."""
    path = "/" + path.strip("/")
    app.router.routes.extend([ExactRoute(path, mounted), ExactRoute(path + "/", mounted)])
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(host: Any) -> AsyncIterator[Any]:
        async with inner(host) as state, mounted.run():
            yield state

    app.router.lifespan_context = lifespan
