"""The upstream side: one :class:`httpx.AsyncClient` per app, the headers that go up and
come back, and upstream failures in the error tree.

The reply is streamed through as it arrives (never read whole): a streamed completion
reaches the caller chunk by chunk. The timeout bounds the connection, the wait for the
reply to start and every gap between two chunks; a reply that never starts is a 504, one
that stalls mid-stream is cut off (its status has already been sent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import httpx

from engrain.errors import UpstreamError, UpstreamTimeoutError
from engrain.server.proxy.config import ProxyConfig

#: Headers of one hop only (RFC 9110 §7.6.1), never forwarded either way; ``host``,
#: ``content-length`` and the encodings are set anew for the next hop.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
    "content-encoding",
})  # fmt: skip
#: The caller's headers for engrain itself, never sent upstream.
ENGRAIN_PREFIX = "x-engrain-"
#: The upstream's response headers that must not reach the caller: the middleware sets
#: its own request id, and the response's framing is the proxy's.
DROPPED_REPLY = HOP_BY_HOP | {"x-request-id"}


class Upstream:
    """The client of one upstream, opened on first use (inside the server's event loop)
    and closed with the app."""

    def __init__(self, config: ProxyConfig, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared client (keep-alive connections to the upstream)."""
        if self._client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout),
                                             limits=limits, transport=self._transport)  # fmt: skip
        return self._client

    async def open(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[bytes, bytes]],
        content: bytes,
        query: str = "",
    ) -> httpx.Response:
        """Send one request and return the response with its body not yet read (the
        caller streams it and closes it). Failures before the reply starts raise
        :class:`UpstreamTimeoutError` or :class:`UpstreamError`, without the URL's
        credentials or the key."""
        url = self.config.url(path) + (f"?{query}" if query else "")
        request = self.client.build_request(method, url, headers=list(headers), content=content)
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeoutError(
                f"the upstream did not answer within {self.config.timeout:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            reason = type(exc).__name__  # not its text: that may hold the URL
            raise UpstreamError(f"the upstream could not be reached ({reason})") from exc

    async def close(self) -> None:
        """Close the client's connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def request_headers(
    caller: Iterable[tuple[bytes, bytes]], authorization: str | None
) -> list[tuple[bytes, bytes]]:
    """The headers sent upstream: the caller's (as the bytes it sent: a value beyond ASCII,
    an app name in UTF-8, goes up unchanged rather than failing the request), less
    hop-by-hop ones, engrain's own and its ``Authorization``, with ``authorization`` (the
    upstream key, or the caller's own header in the ``X-Engrain-Key`` mode) instead."""
    kept = [(k, v) for k, v in caller if not _dropped_request(k.decode("latin-1").lower())]
    kept.append((b"accept-encoding", b"identity"))  # bytes pass through as they come
    if authorization is not None:
        kept.append((b"authorization", authorization.encode("latin-1")))
    return kept


def reply_headers(upstream: httpx.Headers, extra: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers for the caller, names lower-cased and values as the
    bytes it sent (any encoding), plus ``extra`` (engrain's own)."""
    kept = [(k.lower(), v) for k, v in upstream.raw
            if k.decode("latin-1").lower() not in DROPPED_REPLY]  # fmt: skip
    return kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]


def _dropped_request(name: str) -> bool:
    return name in HOP_BY_HOP or name == "authorization" or name.startswith(ENGRAIN_PREFIX)
