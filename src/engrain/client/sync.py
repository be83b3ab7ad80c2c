""":class:`Client`: an :class:`~engrain.engine.Engine` on an engrain server, over HTTP
(httpx). Each method is a remote call of :mod:`engrain.client.calls` driven by
:meth:`Client._run`; ``tests/test_client_parity.py`` keeps it a twin of the engine."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import httpx

from engrain.client import calls
from engrain.client import http as h
from engrain.client.calls import Op, Req
from engrain.errors import ConfigError, StoreError

P = ParamSpec("P")
R = TypeVar("R")


def remote(build: Callable[P, Op[R]]) -> Callable[Concatenate[Client, P], R]:
    """The :class:`Client` method of a remote call: its arguments, its docstring, its
    result; the client only sends the requests the call yields."""

    def run(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(build(*args, **kwargs))

    return cast("Callable[Concatenate[Client, P], R]", with_self(run, build))


def with_self(method: Any, build: Callable[..., Any]) -> Any:
    """``method`` named and documented as ``build``, with ``build``'s signature after
    ``self`` (so ``help()`` and ``inspect`` show the engine's arguments)."""
    functools.update_wrapper(method, build)
    sig = inspect.signature(build)
    params = list(sig.parameters.values())
    # ``self`` is positional-only where keywords are open-ended (``update(**changes)``)
    kinds = inspect.Parameter
    open_ended = any(p.kind is kinds.VAR_KEYWORD for p in params)
    kind = kinds.POSITIONAL_ONLY if open_ended else kinds.POSITIONAL_OR_KEYWORD
    this = inspect.Parameter("self", kind)
    method.__signature__ = sig.replace(parameters=[this, *params],
                                       return_annotation=inspect.Signature.empty)  # fmt: skip
    del method.__wrapped__  # the signature above is the method's, not the bare call's
    return method


class Client:
    """An :class:`~engrain.engine.Engine` on an engrain server (``engrain serve``): the same
    methods, arguments and result types, over HTTP.

    >>> memory = Client("http://127.0.0.1:8420", api_key="egk_...")
    >>> memory.remember("I prefer tabs over spaces", user_id="ada", kind="preference")
    >>> print(memory.context("How should I indent this file?", user_id="ada").text)

    ``timeout`` is in seconds (``None``: wait forever); ``transport`` is an httpx
    transport (retries, a proxy, a Unix socket). Errors are :class:`EngrainError` classes,
    transport failures included (``docs/client.md``). Not here: ``compress`` and ``wait``
    (the server runs its own background work) and ``options=`` on ``context``/``explain``.
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float | None = h.DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = h.base_url(url)
        self.timeout = h.timeout(timeout)
        self._http = httpx.Client(base_url=self.url, headers=h.headers(h.api_key(api_key)),
                                  timeout=self.timeout, transport=transport)  # fmt: skip

    def __repr__(self) -> str:
        return f"Client({h.redacted(self.url)!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections to the server (the server and its memory stay up)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the exchange ------------------------------------------------------------------------

    def _run(self, op: Op[R]) -> R:
        """Drive a remote call: send each request it yields, hand it the answer."""
        try:
            req = next(op)
            while True:
                req = op.send(self._send(req))
        except StopIteration as done:
            return cast(R, done.value)

    def _send(self, req: Req) -> Any:
        with self._exchange(req):
            if req.lines is not None:
                response = self._http.request(
                    req.method, req.path, params=req.params, content=iter(req.lines),
                    headers={"Content-Type": calls.NDJSON},
                )  # fmt: skip
            else:
                response = self._http.request(req.method, req.path, params=req.params,
                                              json=req.json)  # fmt: skip
        return h.answer(response)

    def _exchange(self, req: Req) -> _Exchange:
        return _Exchange(self, req)

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

    def export_records(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every memory (of one user, or of every user the key holds; an admin key: every
        user) as lossless records, embedding and learned state included, oldest first
        (``GET /v1/export``). The request is made now (a refused one raises here); the
        records are read lazily from the NDJSON stream as they are iterated. Iterate to
        the end, or ``close()`` the iterator, to free the connection."""
        req = calls.export_request(user_id)
        with self._exchange(req):
            request = self._http.build_request(req.method, req.path, params=req.params)
            response = self._http.send(request, stream=True)
        if response.status_code >= 400:
            with self._exchange(req):
                response.read()
            response.close()
            raise h.error_of(response)
        return Records(response, self._exchange(req))


class _Exchange:
    """Turns httpx's failures during one exchange into engrain's errors."""

    def __init__(self, client: Client, req: Req) -> None:
        self.client = client
        self.req = req

    def __enter__(self) -> None:
        h.check_open(self.client._http)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, httpx.HTTPError):
            raise h.transport_error(exc, self.req, self.client.url, self.client.timeout) from exc
        if isinstance(exc, httpx.StreamError):
            raise StoreError(f"{self.req.method} {self.req.path}: {exc}") from exc


class Records(Iterator[dict[str, Any]]):
    """The records of an export, read from the NDJSON stream as they are iterated; the
    connection is freed at the end, on :meth:`close` or when the iterator is dropped."""

    def __init__(self, response: httpx.Response, exchange: _Exchange) -> None:
        self._response = response
        self._exchange = exchange
        self._lines = response.iter_lines()

    def __iter__(self) -> Records:
        return self

    def __next__(self) -> dict[str, Any]:
        with self._exchange:
            try:
                line = next(self._lines)
                while not line.strip():
                    line = next(self._lines)
            except BaseException:
                self.close()
                raise
        try:
            return calls.record_of(line)
        except ValueError as exc:
            self.close()
            raise ConfigError(f"GET /v1/export: a line is not a JSON record: {exc}") from exc

    def close(self) -> None:
        """Stop reading and free the connection."""
        self._response.close()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._response.close()


__all__ = ["Client", "Records"]
