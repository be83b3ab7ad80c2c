"""The HTTP app: :func:`create_app` wires one :class:`Engine` (shared by every request),
the API keys, the routes, the error handlers and the service middleware.

Routes are plain ``def`` functions: FastAPI runs them in its threadpool, where each makes
one blocking engine call (``docs/http-api.md`` says why this and not ``AsyncEngine``).
The streaming import is the one ``async`` route: it reads the body on the event loop and
runs the engine in a worker thread.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from engrain.config import load_settings
from engrain.engine import Engine
from engrain.keys import KeyRing
from engrain.server import errors
from engrain.server.collector import settle
from engrain.server.lifespan import on_close, on_start
from engrain.server.mcp import LaterMCP
from engrain.server.metrics import Metrics
from engrain.server.middleware import ServiceMiddleware
from engrain.server.mounting import mount
from engrain.server.proxy import ProxyConfig
from engrain.server.proxy import install as install_proxy
from engrain.server.proxy.routes import CHAT_PATH
from engrain.server.query import single_values
from engrain.server.routes_health import router as health
from engrain.server.routes_inspect import router as inspect
from engrain.server.routes_memories import router as memories
from engrain.server.routes_recall import router as recall
from engrain.server.routes_transfer import router as transfer
from engrain.server.ui import install as install_ui

#: Largest JSON body: a remember or context call is a few KB; 1 MiB leaves room for a
#: long conversation while refusing a runaway client early.
MAX_BODY_BYTES = 1 << 20
#: Largest import body: a whole export (embeddings included) of a large user.
MAX_IMPORT_BYTES = 1 << 30
#: Longest time before a response starts (seconds); streaming import/export are exempt.
REQUEST_TIMEOUT = 30.0
#: Where :func:`serve_app` mounts the MCP server's streamable HTTP app.
MCP_PATH = "/mcp"

DESCRIPTION = """\
engrain's memory engine over HTTP. Every `/v1` route needs `Authorization: Bearer <key>`
(create one with `engrain keys create --user ID`); a key acts only for the users it holds.
Errors are JSON: `{"error": code, "message": ..., "status": ..., "request_id": ...}`.
"""


def create_app(
    engine: Engine,
    keys: KeyRing | None = None,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_import_bytes: int = MAX_IMPORT_BYTES,
    request_timeout: float | None = REQUEST_TIMEOUT,
    proxy: ProxyConfig | None = None,
    ui: bool = True,
    ui_secret: str | bytes | None = None,
) -> FastAPI:
    """The ASGI app serving ``engine`` (one engine for every request; the caller closes it).

    ``keys`` defaults to the key ring of the engine's own store. The HTTP API only: for
    the MCP server at :data:`MCP_PATH` as well, use :func:`serve_app`, or add it to this
    app with :func:`engrain.mcp.mount` (exact routes at ``/mcp`` and ``/mcp/``, no
    redirect, and the SDK's session manager run inside the app's lifespan; a plain
    Starlette ``app.mount`` would do neither).

    With ``proxy``, the app also serves the OpenAI-compatible proxy (``POST
    /v1/chat/completions``, ``GET /v1/models``, ``docs/proxy.md``); its replies are bounded
    by the proxy's own upstream timeout, not ``request_timeout``.

    With ``ui`` (the default), the web inspector is served at ``/ui`` (``docs/inspector.md``);
    ``ui_secret`` signs its session cookies (default ``ENGRAIN_UI_SECRET``, else a random
    secret of this process)."""
    app = FastAPI(
        title="engrain",
        version=_version(),
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.keys = keys if keys is not None else KeyRing(engine.store)
    app.state.metrics = Metrics()
    errors.install(app)
    for router in (memories, recall, inspect, transfer):
        app.include_router(router, dependencies=[Depends(single_values)])
    app.include_router(health)
    untimed = ["/v1/import", "/v1/export"]
    body_limits = {}
    if proxy is not None:
        install_proxy(app, engine, app.state.keys, proxy)
        untimed.append(CHAT_PATH)  # a streamed completion lasts as long as the model writes
        body_limits[CHAT_PATH] = proxy.max_body_bytes  # the upstream judges a request's size
    if ui:
        install_ui(app, app.state.keys, ui_secret)
    app.add_middleware(
        ServiceMiddleware,
        metrics=app.state.metrics,
        max_body_bytes=max_body_bytes,
        max_import_bytes=max_import_bytes,
        request_timeout=request_timeout,
        untimed_paths=untimed,
        body_limits=body_limits,
    )
    return app


def serve_app(
    engine: Engine,
    keys: KeyRing | None = None,
    *,
    proxy: ProxyConfig | None = None,
    **limits: Any,
) -> FastAPI:
    """The app ``engrain serve`` runs: :func:`create_app` with the MCP server's streamable
    HTTP endpoint at :data:`MCP_PATH` (the same keys and scopes, ``engrain.mcp``), and the
    OpenAI-compatible proxy when ``proxy`` is given. The MCP SDK is imported by the first
    request to :data:`MCP_PATH`, not before the server answers (``server/mcp.py``)."""
    keys = keys if keys is not None else KeyRing(engine.store)
    app = create_app(engine, keys, proxy=proxy, **limits)
    mount(app, LaterMCP(engine, keys), MCP_PATH)
    return app


def from_environment() -> FastAPI:
    """The app of one worker process of ``engrain serve --workers N`` (uvicorn's factory
    mode): its own :class:`Engine` from the settings (``ENGRAIN_URL``,
    ``ENGRAIN_DATA_DIR``, the config file, ``ENGRAIN_PROXY_*`` for the proxy), closed when
    the worker shuts down; the worker's long-lived objects kept out of the garbage
    collector's passes once it has started (``server/collector.py``)."""
    engine = Engine(settings=load_settings({}))
    app = serve_app(engine, proxy=ProxyConfig.from_settings(engine.settings))
    on_close(app, engine.close)
    on_start(app, settle)
    return app


def _version() -> str:
    from engrain import __version__

    return __version__
