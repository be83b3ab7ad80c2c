"""``/mcp`` on ``engrain serve``, built on its first request.

The MCP SDK and its protocol types are the largest import of the server (~30% of what
``engrain serve`` imports before it answers, ``docs/http-api.md``), and a deployment that
never speaks MCP never needs them. :class:`LaterMCP` stands at ``/mcp`` from the start;
the first request imports :mod:`engrain.mcp` in a worker thread (the event loop keeps
serving ``/v1`` meanwhile), builds the SDK's app and starts its session manager in the
task group the host's lifespan opened; that request and every later one are then served
by it. Concurrent first requests build it once (a lock); one whose build fails gets a 500
and the next request tries again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup, TaskStatus
from starlette.types import Receive, Scope, Send

from engrain.engine import Engine
from engrain.keys import KeyRing

if TYPE_CHECKING:
    from engrain.mcp import MCPApp


class LaterMCP:
    """The MCP endpoint over ``engine`` and ``keys``, built when first asked for: mount it
    with :func:`engrain.server.mounting.mount`, which enters :meth:`run` in the host's
    lifespan."""

    def __init__(self, engine: Engine, keys: KeyRing) -> None:
        self.engine = engine
        self.keys = keys
        self._app: MCPApp | None = None
        self._group: TaskGroup | None = None
        self._lock: anyio.Lock | None = None

    @property
    def started(self) -> bool:
        """Whether a request has built the SDK's app yet."""
        return self._app is not None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The task group the SDK's session manager will run in, for the host's life."""
        self._lock = anyio.Lock()
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()  # the session manager, if a request started it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with the SDK's app, building it first if no one has."""
        app = self._app if self._app is not None else await self._start()
        await app(scope, receive, send)

    async def _start(self) -> MCPApp:
        if self._lock is None or self._group is None:
            raise RuntimeError("LaterMCP serves inside its host's lifespan: mount() it")
        async with self._lock:
            if self._app is None:
                built = await anyio.to_thread.run_sync(self._build)
                await self._group.start(_serve, built)
                self._app = built
        return self._app

    def _build(self) -> MCPApp:
        from engrain.mcp import streamable_http_app

        return streamable_http_app(self.engine, self.keys)


async def _serve(app: MCPApp, *, task_status: TaskStatus[None]) -> None:
    """Run ``app``'s session manager until the host's lifespan cancels it."""
    async with app.run():
        task_status.started()
        await anyio.sleep_forever()
