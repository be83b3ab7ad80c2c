"""The inspector's sign-in session: a signed, HTTP-only cookie naming an API key, the user
being viewed and a CSRF token.

The cookie holds the SHA-256 digest of the key's secret (what the store keeps, never the
secret itself), the user id, a random CSRF token and the time of sign-in, signed with an
HMAC under the UI secret (``ENGRAIN_UI_SECRET``, else a random secret of this process: a
restart signs everyone out, and workers of one ``engrain serve --workers N`` need the
variable set to share sessions). Nothing else is kept on the server.

Every request re-reads the key from the store by its digest (like the API's bearer check),
so a revoked key stops working on its next request, and re-checks that the key still holds
the user viewed. Every change is a POST carrying the token (form field ``csrf`` or the
``X-CSRF-Token`` header), compared in constant time with the cookie's; the cookie is
``SameSite=Strict`` besides, and ``Secure`` when the request came over https.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request
from starlette.responses import Response

from engrain.errors import AuthenticationError, PermissionDeniedError
from engrain.keys import ApiKey, KeyRing
from engrain.store.base import KeyRecord

#: The session cookie's name.
COOKIE = "engrain_ui"
#: How long a session lasts after sign-in (seconds): a working day.
MAX_AGE = 12 * 3600
#: The environment variable holding the UI secret shared by every worker.
SECRET_ENV = "ENGRAIN_UI_SECRET"


class SignInRequired(AuthenticationError):
    """No valid session: the UI answers with a redirect to the sign-in page (``next`` is
    where to come back to)."""

    def __init__(self, message: str, next_path: str) -> None:
        super().__init__(message)
        self.next_path = next_path


class CsrfError(PermissionDeniedError):
    """A change without the session's CSRF token (or from another site)."""


@dataclass(frozen=True)
class UiSession:
    """One signed-in browser: its key, the user it is viewing and its CSRF token."""

    key: ApiKey
    #: the user currently viewed (a non-admin key: one of ``key.users``; admin: chosen)
    user_id: str
    #: the CSRF token every form carries as the hidden field ``csrf``
    csrf: str


@dataclass(frozen=True)
class _Cookie:
    digest: str
    user_id: str
    csrf: str
    issued: int


class Signer:
    """Signs and checks session cookies with one secret."""

    def __init__(self, secret: str | bytes | None = None) -> None:
        if secret is None:
            secret = os.environ.get(SECRET_ENV) or secrets.token_bytes(32)
        raw = secret.encode("utf-8") if isinstance(secret, str) else secret
        # a derived key: the same secret used elsewhere never signs a cookie
        self._key = hashlib.sha256(b"engrain-ui-session\x00" + raw).digest()

    def dumps(self, value: _Cookie) -> str:
        """The cookie text of ``value``: base64url JSON, a dot, its HMAC."""
        body = json.dumps([value.digest, value.user_id, value.csrf, value.issued])
        payload = base64.urlsafe_b64encode(body.encode("utf-8")).decode("ascii").rstrip("=")
        return f"{payload}.{self._mac(payload)}"

    def loads(self, text: str | None, now: float) -> _Cookie | None:
        """The cookie ``text`` signed by this secret and not expired, else ``None``."""
        if not text or text.count(".") != 1:
            return None
        payload, mac = text.split(".")
        if not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
            digest, user_id, csrf, issued = json.loads(raw)
        except (ValueError, TypeError):
            return None
        if not all(isinstance(v, str) for v in (digest, user_id, csrf)):
            return None
        if not isinstance(issued, int) or not 0 <= now - issued <= MAX_AGE:
            return None
        return _Cookie(digest, user_id, csrf, issued)

    def _mac(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")


def _signer(request: Request) -> Signer:
    signer: Signer = request.app.state.ui_signer
    return signer


def _keys(request: Request) -> KeyRing:
    keys: KeyRing = request.app.state.keys
    return keys


def root(request: Request) -> str:
    """Where the UI is mounted (``/ui`` behind no proxy prefix)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def safe_next(request: Request, target: str | None) -> str:
    """``target`` when it is a path inside the UI (so a crafted sign-in link cannot send
    the browser to another site), else the memories page."""
    base = root(request)
    if (
        target
        and target.startswith(base + "/")
        and not target.startswith("//")
        and "\\" not in target
        and not any(ord(c) < 32 for c in target)
    ):
        return target
    return base + "/memories"


def full_path(request: Request) -> str:
    """This request's path from the server's root (a mounted app's ``scope["path"]`` holds
    it whole in current Starlette; older versions left the mount's prefix out)."""
    path = str(request.scope.get("path", ""))
    base = str(request.scope.get("root_path", ""))
    return path if path.startswith(base) else base + path


def local_path(request: Request) -> str:
    """This request's path inside the UI (``/memories/…``)."""
    return full_path(request)[len(root(request)) :] or "/"


def _here(request: Request) -> str:
    query = request.url.query
    return full_path(request) + ("?" + query if query else "")


def _stored_key(keys: KeyRing, digest: str) -> ApiKey | None:
    """The key with this digest, revoked or not, straight from the store (no cache)."""
    record: KeyRecord | None = keys.store.key_record(digest)
    if record is None or not hmac.compare_digest(record.digest, digest):
        return None
    return ApiKey.from_record(record)


def signed_in(request: Request) -> UiSession:
    """The session of this request (a FastAPI dependency). Without a valid cookie, or when
    its key was revoked or no longer holds the user, :class:`SignInRequired`: the UI
    redirects (303) to ``/ui/signin?next=<this page>``."""
    cookie = _signer(request).loads(request.cookies.get(COOKIE), time.time())
    next_path = _here(request)
    if cookie is None:
        raise SignInRequired("sign in with an API key", next_path)
    key = _stored_key(_keys(request), cookie.digest)
    if key is None or key.revoked:
        raise SignInRequired("this API key was revoked: sign in with another one", next_path)
    if not key.admin and cookie.user_id not in key.users:
        raise SignInRequired("this API key no longer holds that user", next_path)
    return UiSession(key=key, user_id=cookie.user_id, csrf=cookie.csrf)


SessionDep = Annotated[UiSession, Depends(signed_in)]


def check_csrf(request: Request, session: UiSession, token: str | None) -> None:
    """Pass when ``token`` (the form's ``csrf`` field; else the ``X-CSRF-Token`` header) is
    this session's and the request does not come from another site; else
    :class:`CsrfError` (a 403 page, nothing changed)."""
    refuse_cross_site(request)
    given = token if token is not None else request.headers.get("x-csrf-token")
    if not given or not hmac.compare_digest(given.encode(), session.csrf.encode()):
        raise CsrfError("the form's security token is missing or stale: reload the page")


def refuse_cross_site(request: Request) -> None:
    """:class:`CsrfError` for a request the browser says another site sent
    (``Sec-Fetch-Site: cross-site``): the sign-in form too, so no other site can sign a
    browser in with a key of its choosing."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise CsrfError("a form sent from another site was refused")


def default_user(key: ApiKey, known_users: list[str]) -> str | None:
    """The user a new session views: a key's first user; for an admin key the first user
    with memories (``None``: the store is empty)."""
    if key.users:
        return key.users[0]
    return known_users[0] if known_users else None


def start(request: Request, response: Response, key: ApiKey, secret: str, user_id: str) -> None:
    """Set the session cookie of ``key`` (signed in with ``secret``) viewing ``user_id``
    on ``response``, with a new CSRF token."""
    digest = hashlib.sha256(secret.encode("utf-8")).hexdigest()
    _set(request, response, _Cookie(digest, user_id, secrets.token_urlsafe(32), int(time.time())))


def switch_user(request: Request, response: Response, session: UiSession, user_id: str) -> None:
    """Keep the session of ``request`` but view ``user_id`` (the caller checked that the key
    holds it); the CSRF token and the sign-in time stay."""
    cookie = _signer(request).loads(request.cookies.get(COOKIE), time.time())
    if cookie is None:
        raise SignInRequired("sign in with an API key", root(request) + "/memories")
    _set(request, response, _Cookie(cookie.digest, user_id, session.csrf, cookie.issued))


def end(request: Request, response: Response) -> None:
    """Clear the session cookie."""
    response.delete_cookie(COOKIE, path=root(request) + "/", secure=_https(request),
                           httponly=True, samesite="strict")  # fmt: skip


def sign_in_url(request: Request, next_path: str) -> str:
    """The sign-in page that comes back to ``next_path``."""
    return f"{root(request)}/signin?next={quote(next_path, safe='/')}"


def _set(request: Request, response: Response, cookie: _Cookie) -> None:
    response.set_cookie(
        COOKIE, _signer(request).dumps(cookie), max_age=MAX_AGE, path=root(request) + "/",
        secure=_https(request), httponly=True, samesite="strict",
    )  # fmt: skip


def _https(request: Request) -> bool:
    return request.url.scheme == "https"
