""":class:`AsyncClient`: an :class:`~engrain.aio.AsyncEngine` on an engrain server, over HTTP
(httpx's ``AsyncClient``). The same remote calls as :class:`~engrain.client.Client`
(:mod:`engrain.client.calls`), driven with ``await``; ``tests/test_client_parity.py`` keeps
the two twins."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import httpx

from engrain.client import calls
from engrain.client import http as h
from engrain.client.calls import Op, Req
from engrain.client.sync import with_self
from engrain.errors import ConfigError, StoreError

P = ParamSpec("P")
R = TypeVar("R")


def remote(build: Callable[P, Op[R]]) -> Callable[Concatenate[AsyncClient, P], Awaitable[R]]:
    """The :class:`AsyncClient` method of a remote call: its arguments, its docstring,
    awaitable."""

    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(build(*args, **kwargs))

    return cast("Callable[Concatenate[AsyncClient, P], Awaitable[R]]", with_self(run, build))


async def _aiter(lines: Iterable[bytes]) -> AsyncIterator[bytes]:
    for line in lines:
        yield line


class AsyncClient:
    """An :class:`~engrain.aio.AsyncEngine` on an engrain server: the same methods,
    arguments and result types as :class:`Client` and the engine, awaitable.

    >>> async with AsyncClient("http://127.0.0.1:8420", api_key="egk_...") as memory:
    ...     ctx = await memory.context("How should I indent this file?", user_id="ada")

    ``export_records`` returns a list, as :meth:`AsyncEngine.export_records
    <engrain.aio.AsyncEngine.export_records>` does."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float | None = h.DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = h.base_url(url)
        self.timeout = h.timeout(timeout)
        self._http = httpx.AsyncClient(base_url=self.url, headers=h.headers(h.api_key(api_key)),
                                       timeout=self.timeout, transport=transport)  # fmt: skip

    def __repr__(self) -> str:
        return f"AsyncClient({h.redacted(self.url)!r})"

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connections to the server (the server and its memory stay up)."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the exchange ------------------------------------------------------------------------

    async def _run(self, op: Op[R]) -> R:
        """Drive a remote call: send each request it yields, hand it the answer."""
        try:
            req = next(op)
            while True:
                req = op.send(await self._send(req))
        except StopIteration as done:
            return cast(R, done.value)

    async def _send(self, req: Req) -> Any:
        h.check_open(self._http)
        try:
            if req.lines is not None:
                response = await self._http.request(
                    req.method, req.path, params=req.params, content=_aiter(req.lines),
                    headers={"Content-Type": calls.NDJSON},
                )  # fmt: skip
            else:
                response = await self._http.request(req.method, req.path, params=req.params,
                                                    json=req.json)  # fmt: skip
        except httpx.HTTPError as exc:
            raise h.transport_error(exc, req, self.url, self.timeout) from exc
        return h.answer(response)

    # -- the engine's methods ----------------------------------------------------------------

    ingest = remote(calls.ingest)
    ingest_conversation = remote(calls.ingest_conversation)
    remember = remote(calls.remember)
    recall = remote(calls.recall)
    context = remote(calls.context)
    explain = remote(calls.explain)
    feedback = remote(calls.feedback)
    tiers = remote(calls.tiers)
    get = remote(calls.get)
    list = remote(calls.list)
    update = remote(calls.update)
    pin = remote(calls.pin)
    mute = remote(calls.mute)
    forget = remote(calls.forget)
    browse = remote(calls.browse)
    relations = remote(calls.relations)
    review = remote(calls.review)
    resolve = remote(calls.resolve)
    contexts = remote(calls.contexts)
    preview = remote(calls.preview)
    users = remote(calls.users)
    import_records = remote(calls.import_records)

    async def export_records(self, user_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every memory (of one user, or of every user the key holds; an admin key: every
        user) as lossless records, embedding and learned state included, oldest first
        (``GET /v1/export``), read from the NDJSON stream into a list."""
        req = calls.export_request(user_id)
        h.check_open(self._http)
        records: builtins.list[dict[str, Any]] = []
        try:
            async with self._http.stream(req.method, req.path, params=req.params) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise h.error_of(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        records.append(calls.record_of(line))
        except httpx.HTTPError as exc:
            raise h.transport_error(exc, req, self.url, self.timeout) from exc
        except httpx.StreamError as exc:
            raise StoreError(f"{req.method} {req.path}: {exc}") from exc
        except ValueError as exc:
            raise ConfigError(f"GET /v1/export: a line is not a JSON record: {exc}") from exc
        return records


__all__ = ["AsyncClient"]
