"""The web inspector at ``/ui``: server-rendered pages over the engine, for people.

:func:`install` mounts one sub-application on the HTTP app: its pages (sign-in and the
memory pages here, "Try a message", tiers, conflicts and activity in their own modules),
its static files (CSS and one small script; every page works without it), its error pages
(HTML, not the API's JSON) and its security headers. It shares the app's engine and key
ring. ``docs/inspector.md`` describes the pages and the security model.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from engrain.errors import EngrainError
from engrain.keys import KeyRing
from engrain.server.middleware import SecurityHeaders
from engrain.server.ui import (
    pages_activity,
    pages_auth,
    pages_conflicts,
    pages_memories,
    pages_tiers,
    pages_try,
)
from engrain.server.ui.render import page
from engrain.server.ui.session import Signer, SignInRequired, UiSession, sign_in_url, signed_in

log = logging.getLogger("engrain.server.ui")

#: Where :func:`install` mounts the inspector.
UI_PATH = "/ui"
STATIC = Path(__file__).parent / "static"
#: Every page's router, in the navigation's order.
ROUTERS: tuple[APIRouter, ...] = (
    pages_auth.router, pages_memories.router, pages_try.router, pages_tiers.router,
    pages_conflicts.router, pages_activity.router,
)  # fmt: skip


def create_ui(app: FastAPI, keys: KeyRing, secret: str | bytes | None = None) -> FastAPI:
    """The inspector as an app of its own, sharing ``app``'s engine and ``keys``;
    ``secret`` signs its session cookies (default ``ENGRAIN_UI_SECRET``, else random)."""
    ui = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    ui.state.engine = app.state.engine
    ui.state.keys = keys
    ui.state.ui_signer = Signer(secret)
    for router in ROUTERS:
        ui.include_router(router)
    ui.mount("/static", StaticFiles(directory=STATIC), name="static")
    ui.add_exception_handler(SignInRequired, _sign_in)
    ui.add_exception_handler(EngrainError, _engrain_error)
    ui.add_exception_handler(RequestValidationError, _invalid)
    ui.add_exception_handler(HTTPException, _http_error)
    ui.add_exception_handler(Exception, _unexpected)
    ui.add_middleware(SecurityHeaders)
    return ui


def install(app: FastAPI, keys: KeyRing, secret: str | bytes | None = None) -> None:
    """Mount the inspector on ``app`` at :data:`UI_PATH`, and answer :data:`UI_PATH` itself
    (no slash) with a redirect to it (a route of its own, so the metrics name it)."""
    app.add_api_route(UI_PATH, _to_mount, include_in_schema=False)
    app.mount(UI_PATH, create_ui(app, keys, secret))


async def _to_mount(request: Request) -> Response:
    return RedirectResponse(request.url.replace(path=request.url.path + "/"), status_code=307)


async def _sign_in(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return RedirectResponse(sign_in_url(request, exc.next_path), status_code=303)


def _error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    """The error page, with the navigation when the browser is signed in."""
    try:
        session: UiSession | None = signed_in(request)
    except EngrainError:
        session = None
    return page(request, "error.html", session, status_code=status, title=title,
                message=message)  # fmt: skip


# Plain functions: Starlette runs them in its threadpool, where the session's key is read.
def _engrain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EngrainError)
    titles = {400: "Not accepted", 401: "Sign in", 403: "Not allowed", 404: "Not found"}
    title = titles.get(exc.http_status, "Something went wrong")
    return _error_page(request, exc.http_status, title, exc.message)


def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # each field with what it asks (pydantic's words, never the value sent), as the API says
    said = "; ".join(f"{e.get('loc', ('?',))[-1]}: {e.get('msg', 'not accepted')}"
                     for e in exc.errors())  # fmt: skip
    return _error_page(request, 422, "Not accepted", said or "check the form")


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _error_page(request, 404, "Not found", "There is no such page.")
    return _error_page(request, exc.status_code, "Not accepted", str(exc.detail))


def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return page(request, "error.html", None, status_code=500, title="Something went wrong",
                message="An internal error; the server log has the details.")  # fmt: skip
