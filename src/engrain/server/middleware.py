"""One ASGI middleware around the whole app: the request id, the body size limit, the time
limit, the access log line and the metrics. Pure ASGI (no ``BaseHTTPMiddleware``), so a
streamed body or response passes through untouched.

* **Request id**: the caller's ``X-Request-ID`` when it is short and plain
  (``[A-Za-z0-9._-]``, at most 128 characters), else a new one; echoed in every response
  and set for every log line of the request (:mod:`.context`).
* **Size limit**: a declared ``Content-Length`` above the limit is refused before the app
  runs; a chunked body is counted as it is read and the app's answer is replaced by the
  413 once the count passes the limit. ``POST /v1/import`` has its own, larger limit,
  and so has any path of ``body_limits`` (the proxy's chat route).
* **Time limit**: a request that has not started its response after ``request_timeout``
  seconds is answered 503 ``timeout`` (the engine call finishes in its thread and its
  answer is dropped). The streaming routes (import, export) are exempt: their length is
  the caller's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engrain.errors import EngrainError, InputTooLargeError, RequestTimeoutError
from engrain.server.context import REQUEST_ID
from engrain.server.errors import error_bytes, openai_shaped
from engrain.server.metrics import Metrics, route_template

log = logging.getLogger("engrain.server.access")

_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def request_id(scope: Scope) -> str:
    """The caller's ``X-Request-ID`` if plain enough to log, else a fresh one."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = bytes(value).decode("latin-1")
            if _PLAIN_ID.fullmatch(given):
                return given
    return uuid.uuid4().hex


class ServiceMiddleware:
    """Request id, size and time limits, access log and metrics for every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        max_import_bytes: int,
        request_timeout: float | None,
        import_path: str = "/v1/import",
        untimed_paths: Collection[str] = ("/v1/import", "/v1/export"),
        body_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.max_import_bytes = max_import_bytes
        self.request_timeout = request_timeout
        self.import_path = import_path
        self.untimed_paths = frozenset(untimed_paths)
        self.body_limits = dict(body_limits or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (other scopes, lifespan and websockets, pass through)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = REQUEST_ID.set(request_id(scope))
        try:
            await _Exchange(self, scope, receive, send).run()
        finally:
            REQUEST_ID.reset(token)


class _Exchange:
    """One request and its response, as the middleware sees them."""

    def __init__(self, mw: ServiceMiddleware, scope: Scope, receive: Receive, send: Send):
        self.mw, self.scope, self._receive, self._send = mw, scope, receive, send
        path = scope.get("path", "")
        self.limit = mw.max_import_bytes if path == mw.import_path else mw.max_body_bytes
        self.limit = mw.body_limits.get(path, self.limit)
        self.timeout = None if path in mw.untimed_paths else mw.request_timeout
        self.received = 0
        self.too_large = False
        self.started = False
        self.abandoned = False  # answered by the middleware: drop the app's messages
        self.status = 500
        self.root_path = str(scope.get("root_path", ""))  # mounts the request passes add to it
        self.routes = getattr(scope.get("app"), "routes", ())  # the app's, for the metrics

    async def run(self) -> None:
        begin = time.perf_counter()
        self.mw.metrics.started()
        try:
            declared = self._declared_length()
            if declared is not None and declared > self.limit:
                await self._answer(self._too_large())
            elif self.timeout is None:
                await self.mw.app(self.scope, self.receive, self.send)
            else:
                await self._timed()
        finally:
            seconds = time.perf_counter() - begin
            template = route_template(self.scope, self.root_path, self.routes)
            self.mw.metrics.finished(self.scope["method"], template, self.status, seconds)
            log.info('%s %s %d %.1fms', self.scope["method"], self.scope.get("path", ""),
                     self.status, seconds * 1000)  # fmt: skip

    async def _timed(self) -> None:
        task = asyncio.ensure_future(self.mw.app(self.scope, self.receive, self.send))
        done, _ = await asyncio.wait({task}, timeout=self.timeout)
        if task in done:
            task.result()
            return
        if self.started:  # too late to replace the answer: let it finish
            await task
            return
        self.abandoned = True
        task.add_done_callback(_swallow)  # the engine call completes in its thread
        task.cancel()
        await self._answer(RequestTimeoutError(
            f"the request took longer than the server's limit of {self.timeout:g} s"))  # fmt: skip

    def _declared_length(self) -> int | None:
        for name, value in self.scope.get("headers", ()):
            if name == b"content-length":
                with contextlib.suppress(ValueError):
                    return int(value)
        return None

    def _too_large(self) -> EngrainError:
        return InputTooLargeError(f"the request body is larger than {self.limit} bytes")

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.too_large = True  # whatever the app answers is replaced by the 413
                raise self._too_large()  # a half-read import must not be written
        return message

    async def send(self, message: Message) -> None:
        if self.abandoned:
            return
        if message["type"] == "http.response.start":
            if self.too_large:
                self.abandoned = True
                await self._answer(self._too_large())
                return
            self.started = True
            self.status = int(message["status"])
            tagged = [*message.get("headers", ()), (b"x-request-id", REQUEST_ID.get().encode())]
            message = {**message, "headers": tagged}
        await self._send(message)

    async def _answer(self, error: EngrainError) -> None:
        openai = openai_shaped(self.scope.get("app"), self.scope.get("path", ""))
        status, headers, body = error_bytes(error, openai=openai)
        self.status = status
        self.started = True
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})


def _swallow(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


#: The inspector's headers: scripts and styles only from the UI itself (no inline script,
#: so markup that slipped through escaping still could not run), no framing, no referrer
#: leaving the site, no sniffing, and no caching of pages that show a user's memories.
UI_HEADERS = (
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
)  # fmt: skip


class SecurityHeaders:
    """Adds :data:`UI_HEADERS` to every response of the app it wraps (the inspector)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request, adding the headers to its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {bytes(k).lower() for k, _ in message.get("headers", ())}
                extra = [(k, v) for k, v in UI_HEADERS if k not in names]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
