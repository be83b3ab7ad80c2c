"""The MCP server over streamable HTTP, for mounting at ``/mcp`` on ``engrain serve``.

Every request must carry ``Authorization: Bearer <key>``: the key is checked
(:meth:`KeyRing.authenticate`) before the request reaches the SDK, a missing or unknown
key answers 401 with the error tree's JSON, and the key travels in the request's ASGI
scope to the tool, which resolves the user from it (:func:`key_user`): the key's only
user, or the tool's ``user_id`` argument checked with :meth:`KeyRing.authorize` (403).
The user is resolved from the request that carries each call, never from a session, so
no key can reach a memory another key opened.

The transport is stateless and answers JSON: no session lives in one process, so any of
``engrain serve --workers N`` answers any request. Host and Origin checks (the SDK's DNS
rebinding protection, on by default for a server on loopback) are off: a page that
rebinds a name to this server still has no key, and the checks refused clients that
reach the server by another name.

Mounting (FastAPI or Starlette)::

    mcp_app = streamable_http_app(engine, KeyRing(engine.store))
    mount(app, mcp_app)            # routes /mcp and /mcp/, runs the SDK in the lifespan
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping

import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from engrain.engine import Engine
from engrain.errors import AuthenticationError, EngrainError, ValidationError
from engrain.keys import ApiKey, KeyRing
from engrain.mcp.tools import Resolver, build_server
from engrain.server.mounting import mount

__all__ = ["MCPApp", "key_user", "mount", "request_key", "streamable_http_app"]

#: Where :class:`MCPApp` leaves the authenticated :class:`ApiKey` in the ASGI scope.
SCOPE_KEY = "engrain.api_key"


def request_key(ctx: Context) -> ApiKey:
    """The API key the request carrying this call authenticated with, or
    :class:`AuthenticationError` (a call that did not come through :class:`MCPApp`)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    key = scope.get(SCOPE_KEY) if isinstance(scope, Mapping) else None
    if not isinstance(key, ApiKey):
        raise AuthenticationError("no API key: send 'Authorization: Bearer <key>'")
    return key


def key_user(keys: KeyRing) -> Resolver:
    """Resolve the user of a call from its request's API key: the ``user_id`` argument,
    which the key must hold (:class:`PermissionDeniedError` otherwise), or without one the
    key's only user (:class:`ValidationError` for a key of several users or an admin
    key, which must name the user)."""

    def resolve(ctx: Context, user_id: str | None, project: str | None) -> str:
        key = request_key(ctx)
        if user_id is None:
            if len(key.users) != 1:
                raise ValidationError(
                    f"user_id: API key {key.id} may act for several users, name one"
                )
            user_id = key.users[0]
        keys.authorize(key, user_id, project)
        return user_id

    return resolve


def bearer_secret(scope: Scope) -> str | None:
    """The secret of the request's ``Authorization: Bearer`` header, if it has one."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() if scheme.lower() == "bearer" else None
    return None


#: The answer to any method but POST: the transport is stateless, so there is no
#: server-initiated stream to GET (the SDK would hold such a GET open, idle, forever)
#: and no session to DELETE.
METHOD_NOT_ALLOWED = {
    "error": "method_not_allowed",
    "status": 405,
    "message": "the MCP endpoint takes POST only (stateless streamable HTTP)",
}


async def _send_json(
    send: Send, status: int, body: Mapping[str, object], headers: list[tuple[bytes, bytes]]
) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(data)).encode()), *headers]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class MCPApp:
    """An ASGI app serving the MCP endpoint at whatever path it is routed to: POST carries
    the messages; any other method answers 405 (the protocol lets a server without a
    server-initiated stream refuse GET). Its :meth:`run` must be entered in the host's
    lifespan (:func:`mount` does it); served alone, it runs it from the ASGI lifespan
    protocol itself."""

    def __init__(self, manager: StreamableHTTPSessionManager, keys: KeyRing) -> None:
        self.manager = manager
        self.keys = keys

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run the SDK's request handling (a task group) for the life of the host app."""
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate, then hand the request to the SDK."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            secret = bearer_secret(scope)
            key = await anyio.to_thread.run_sync(self.keys.authenticate, secret)
        except EngrainError as error:
            challenge = [(b"www-authenticate", b'Bearer realm="engrain"')]
            await _send_json(send, error.http_status, error.to_dict(),
                             challenge if error.http_status == 401 else [])  # fmt: skip
            return
        if scope["method"] != "POST":
            await _send_json(send, 405, METHOD_NOT_ALLOWED, [(b"allow", b"POST")])
            return
        await self.manager.handle_request({**scope, SCOPE_KEY: key}, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.run():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


def streamable_http_app(
    engine: Engine, keys: KeyRing, *, max_request_bytes: int = 4 * 1024 * 1024
) -> MCPApp:
    """The MCP server over ``engine`` as an ASGI app authenticating every request with
    ``keys``; mount it with :func:`mount`."""
    server = build_server(engine, key_user(keys))
    server.streamable_http_app(  # builds the session manager; its Starlette app is unused
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_request_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return MCPApp(server.session_manager, keys)
