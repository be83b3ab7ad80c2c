"""The proxy's routes: ``POST /v1/chat/completions`` and ``GET /v1/models``.

One chat request is: authenticate the engrain key and settle the user (one hop to the
threadpool, with the ``context()`` call), put the block into the request, forward it,
stream the reply back as it comes, then queue the exchange for recording. Memory never
stands between the caller and its answer: if ``context()`` fails, the request goes up
without memory (``X-Engrain-Memory: unavailable``) and the failure is logged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import Response, StreamingResponse

from engrain.engine import Engine
from engrain.errors import EngrainError, InputTooLargeError
from engrain.keys import ApiKey, KeyRing
from engrain.recall.results import Context
from engrain.server.auth import Scope
from engrain.server.lifespan import on_close
from engrain.server.proxy import inject
from engrain.server.proxy.config import ProxyConfig
from engrain.server.proxy.record import AnswerReader, Exchange, Recorder
from engrain.server.proxy.upstream import Upstream, reply_headers, request_headers
from engrain.tiers import registry

log = logging.getLogger("engrain.server.proxy")

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
#: Values of ``X-Engrain-Record`` that turn recording off for one request.
OFF = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class Prepared:
    """A request checked and looked up: who it acts for, what goes upstream."""

    user_id: str
    project: str | None
    authorization: str | None
    body: bytes
    memory: str  # X-Engrain-Memory: injected, empty, none, too_large, unavailable
    context_id: str | None = None


class Proxy:
    """The proxy of one app: its engine, keys, upstream client and recorder."""

    def __init__(self, engine: Engine, keys: KeyRing, config: ProxyConfig,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        self.engine = engine
        self.keys = keys
        self.config = config
        self.upstream = Upstream(config, transport)
        self.recorder = Recorder(engine)

    def authenticate(self, headers: Headers) -> tuple[ApiKey, str | None]:
        """The engrain key of the request and the ``Authorization`` to send upstream: with
        ``X-Engrain-Key`` the caller's own ``Authorization`` goes up; else the engrain key
        is the bearer token and the configured upstream key goes up."""
        own = headers.get("x-engrain-key")
        if own is not None:
            return self.keys.authenticate(_bearer(own) or own.strip()), headers.get("authorization")
        secret = _bearer(headers.get("authorization"))
        upstream = f"Bearer {self.config.upstream_key}" if self.config.upstream_key else None
        return self.keys.authenticate(secret), upstream

    def prepare(self, headers: Headers, chat: inject.ChatRequest) -> Prepared:
        """Authenticate (401), settle the user (403 when the key does not hold it), then
        look memory up; a memory failure is logged and the body goes up unchanged."""
        key, authorization = self.authenticate(headers)
        named = _text_header(headers, "x-engrain-user")
        if named is None and not (len(key.users) == 1 and not key.admin):
            named = chat.user  # a key for several users: the body's standard field names one
        project = _text_header(headers, "x-engrain-project")
        user, project = Scope(self.keys, key).resolve(named, project)
        if chat.body is None or chat.message is None:
            return Prepared(user, project, authorization, chat.raw, "none")
        try:
            context = self._context(chat, user, project)
        except InputTooLargeError:  # not a failure: a message the engine does not take
            log.info("the message is longer than max_text_chars: forwarded without memory")
            return Prepared(user, project, authorization, chat.raw, "too_large")
        except Exception as exc:  # memory is optional: the request goes up without it
            log.warning("memory unavailable, forwarding without it: %s: %s",
                        type(exc).__name__, getattr(exc, "message", exc))  # fmt: skip
            return Prepared(user, project, authorization, chat.raw, "unavailable")
        if not context.text:
            return Prepared(user, project, authorization, chat.raw, "empty")
        body = inject.with_memory(chat.body, context.text, self.config.inject)
        return Prepared(user, project, authorization, body, "injected", context.id)

    def _context(self, chat: inject.ChatRequest, user: str, project: str | None) -> Context:
        model = chat.model
        if model is not None:
            try:  # a model the registry lacks: the settings' tier, not an error
                registry.context_window(model, self.engine.settings.model_windows)
            except EngrainError:
                model = None
        assert chat.message is not None
        previous = chat.previous
        if previous is not None and len(previous) > self.engine.settings.max_text_chars:
            previous = None  # a turn too long to search with: the message alone, not an error
        return self.engine.context(chat.message, user, project=project, turn=chat.turn,
                                   model=model, previous=previous)  # fmt: skip

    def exchange(self, chat: inject.ChatRequest, prepared: Prepared, answer: str | None) -> None:
        """Queue the turn for recording, if it has both sides."""
        if answer and chat.message and chat.conversation:
            self.recorder.submit(Exchange(prepared.user_id, prepared.project, chat.conversation,
                                          chat.turn, chat.message, answer))  # fmt: skip

    def records(self, request: Request) -> bool:
        """Whether this request's exchange is recorded (the setting, and the opt-out)."""
        wanted = request.headers.get("x-engrain-record", "").strip().lower() not in OFF
        return self.config.record and wanted

    async def close(self) -> None:
        """Close the upstream connections and finish queued recordings."""
        await self.upstream.close()
        await run_in_threadpool(self.recorder.close)


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def proxy_of(request: Request) -> Proxy:
    """The app's proxy."""
    proxy: Proxy = request.app.state.proxy
    return proxy


async def chat_completions(request: Request) -> Response:
    """Forward a chat completion with the user's memory in it; the reply (streamed or
    not) comes back as the upstream sent it, with ``X-Engrain-Context-Id``."""
    proxy = proxy_of(request)
    chat = inject.parse(await request.body())
    prepared = await run_in_threadpool(proxy.prepare, request.headers, chat)
    headers = request_headers(request.headers.raw, prepared.authorization)
    reply = await proxy.upstream.open("POST", "chat/completions", headers, prepared.body,
                                      request.url.query)  # fmt: skip
    extra = {"x-engrain-memory": prepared.memory}
    if prepared.context_id is not None:
        extra["x-engrain-context-id"] = prepared.context_id
    # a message too large to look memory up with is too large to record: not queued
    record = (proxy.records(request) and reply.is_success and chat.message is not None
              and prepared.memory != "too_large")  # fmt: skip

    def done(answer: str | None) -> None:
        proxy.exchange(chat, prepared, answer)

    return _relay(reply, extra, done if record else None)


async def models(request: Request) -> Response:
    """The upstream's model list, as it answers it (an engrain key is needed all the same:
    the proxy is not an open relay for its upstream key)."""
    proxy = proxy_of(request)
    _, authorization = await run_in_threadpool(proxy.authenticate, request.headers)
    headers = request_headers(request.headers.raw, authorization)
    reply = await proxy.upstream.open("GET", "models", headers, b"", request.url.query)
    return _relay(reply, {}, None)


def _relay(reply: httpx.Response, extra: Mapping[str, str], done: Any) -> Response:
    """Stream ``reply`` to the caller as it arrives; when it has ended whole, hand the
    answer read from it to ``done``."""
    reader = AnswerReader(reply.headers.get("content-type", "")) if done else None

    async def body() -> AsyncIterator[bytes]:
        complete = False
        try:
            async for chunk in reply.aiter_bytes():
                if reader is not None:
                    reader.feed(chunk)
                yield chunk
            complete = True
        except httpx.HTTPError as exc:  # the status is sent already: the stream just ends
            log.warning("the upstream reply broke off: %s", type(exc).__name__)
        finally:
            await reply.aclose()
        if complete and reader is not None:
            done(reader.text())

    response = StreamingResponse(body(), status_code=reply.status_code)
    upstream_id = reply.headers.get("x-request-id")
    if upstream_id is not None:
        extra = {**extra, "x-upstream-request-id": upstream_id}
    response.raw_headers = reply_headers(reply.headers, extra)
    return response


def _text_header(headers: Headers, name: str) -> str | None:
    """A header naming a user or project, as its sender wrote it: UTF-8, which curl, Node
    and browsers send (``X-Engrain-User: José``), else Latin-1, Starlette's reading (a
    UTF-8 user id was read as ``'JosÃ©'``: 403 for a key holding ``José``)."""
    value = headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return value


def install(app: FastAPI, engine: Engine, keys: KeyRing, config: ProxyConfig,
            transport: httpx.AsyncBaseTransport | None = None) -> Proxy:  # fmt: skip
    """Add the proxy's routes to ``app``; the upstream client and the recorder close with
    the app (recordings still queued are finished first). ``transport`` replaces the
    network (tests)."""
    proxy = Proxy(engine, keys, config, transport)
    app.state.proxy = proxy
    app.state.openai_paths = frozenset({CHAT_PATH, MODELS_PATH})  # errors in OpenAI's shape
    app.add_api_route(CHAT_PATH, chat_completions, methods=["POST"], tags=["proxy"],
                      include_in_schema=False)  # fmt: skip
    app.add_api_route(MODELS_PATH, models, methods=["GET"], tags=["proxy"],
                      include_in_schema=False)  # fmt: skip
    on_close(app, proxy.close)
    return proxy
