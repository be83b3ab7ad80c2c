"""Signing in and out, and choosing the user viewed.

``GET /signin`` shows the form; ``POST /signin`` checks the key with
:meth:`KeyRing.authenticate` and starts the session (:mod:`.session`); ``POST /signout``
ends it; ``POST /user`` switches the user viewed to another the key holds (any user for an
admin key). The last two are changes, so they carry the CSRF token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engrain import validate
from engrain.errors import AuthenticationError, PermissionDeniedError
from engrain.keys import KeyRing
from engrain.server.ui import session as sessions
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep, check_csrf, root, safe_next

router = APIRouter()


def _keys(request: Request) -> KeyRing:
    keys: KeyRing = request.app.state.keys
    return keys


@router.get("/", include_in_schema=False)
def home(request: Request) -> Response:
    """The inspector's front door: the memories page (which asks to sign in first)."""
    return RedirectResponse(root(request) + "/memories", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: str | None = None) -> HTMLResponse:
    """The sign-in form."""
    return page(request, "signin.html", None, next=safe_next(request, next), error=None)


@router.post("/signin", response_class=HTMLResponse)
def signin(
    request: Request,
    key: Annotated[str, Form()] = "",
    next: Annotated[str | None, Form()] = None,
) -> Response:
    """Check the API key and start a session viewing the key's first user (an admin key:
    the first user with memories); the form again, with the reason, when the key is
    refused."""
    sessions.refuse_cross_site(request)
    target = safe_next(request, next)
    secret = key.strip()
    try:
        api_key = _keys(request).authenticate(secret)
    except AuthenticationError as exc:
        message = "Enter an API key." if not secret else f"Not signed in: {exc.message}."
        return page(request, "signin.html", None, status_code=401, next=target, error=message)
    user = sessions.default_user(api_key, engine_of(request).store.users())
    if user is None:
        return page(request, "signin.html", None, status_code=400, next=target,
                    error="This admin key works, but the store has no users yet.")  # fmt: skip
    response = RedirectResponse(target, status_code=303)
    sessions.start(request, response, api_key, secret, user)
    return response


@router.post("/signout")
def signout(
    request: Request, session: SessionDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    """End the session: the cookie is cleared and the browser sent to the sign-in page."""
    check_csrf(request, session, csrf)
    response = RedirectResponse(root(request) + "/signin", status_code=303)
    sessions.end(request, response)
    return response


@router.post("/user")
def choose_user(
    request: Request,
    session: SessionDep,
    user_id: Annotated[str, Form()],
    csrf: Annotated[str | None, Form()] = None,
    next: Annotated[str | None, Form()] = None,
) -> Response:
    """View another user the key holds (403 page if it does not)."""
    check_csrf(request, session, csrf)
    user = validate.user_id(user_id)
    if not (session.key.admin or user in session.key.users):
        raise PermissionDeniedError(f"API key {session.key.id} may not act for user {user!r}")
    response = RedirectResponse(_same_page(request, next), status_code=303)
    sessions.switch_user(request, response, session, user)
    return response


def _same_page(request: Request, next: str | None) -> str:
    """Where to go after switching user: the same view, without its memory id or cursor
    (they belonged to the other user)."""
    target = safe_next(request, next).split("?", 1)[0]
    parts = target[len(root(request)) :].strip("/").split("/")
    return f"{root(request)}/{parts[0] or 'memories'}"
