"""What the sync and async clients share about HTTP: checking the URL and the key, turning
an answer into JSON or into the :class:`EngrainError` the engine would have raised, and
turning a transport failure into one too.

Error mapping (``docs/client.md``):

* an engrain error body (``{"error": code, "message": ...}``) becomes the class of that
  code (:func:`engrain.wire.load_error`), so ``404`` is :class:`NotFoundError`, ``401``
  :class:`AuthenticationError`, ``400`` the :class:`ValidationError` subclass named;
* any other error answer (a proxy's HTML page) becomes the class of its status;
* a 2xx answer that is not JSON means the URL is not an engrain server:
  :class:`ConfigError`, like a malformed URL;
* no answer at all (connection refused, reset, timeout) is :class:`StoreError`: to a
  client the server *is* its store, and this is the error an embedded engine raises when
  its store cannot be reached. After a timeout the call may still have taken effect;
* a call on a closed client is the :class:`StoreError` a closed engine raises (httpx's
  own ``RuntimeError`` is not an engrain error), with nothing sent.

The API key is sent in one header and never appears in a repr, a message or a log line.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from engrain import wire
from engrain.client.calls import Req
from engrain.errors import ConfigError, EngrainError, StoreError
from engrain.lifecycle import closed_error

#: Seconds to wait for the server to accept and answer a request (``timeout=``).
DEFAULT_TIMEOUT = 30.0
INSTALL = "pip install 'engrain[client]'"


def base_url(url: object) -> httpx.URL:
    """The server's base URL, ``http`` or ``https`` with a host, else :class:`ConfigError`."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("url must be the server's address, such as http://127.0.0.1:8420")
    try:
        parsed = httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        raise ConfigError(f"url {url!r} is not a valid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"url {url!r} must be http:// or https:// with a host, such as "
                          "http://127.0.0.1:8420")  # fmt: skip
    if parsed.password:
        raise ConfigError("url must not carry a password: pass the API key as api_key")
    return parsed


def api_key(secret: object) -> str:
    """The API key, checked without ever echoing it: a non-empty string of visible ASCII
    characters (what ``engrain keys create`` prints)."""
    if not isinstance(secret, str) or not secret:
        raise ConfigError("api_key must be a non-empty string (engrain keys create --user ID)")
    if not all(33 <= ord(c) < 127 for c in secret):
        raise ConfigError("api_key contains spaces or characters an API key never has")
    return secret


def timeout(value: object) -> float | None:
    """Seconds (a positive number), or ``None`` to wait forever."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"timeout must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"timeout must be a positive number of seconds, not {value!r}")
    return float(value)


def headers(secret: str) -> dict[str, str]:
    """The headers of every request."""
    return {"Authorization": f"Bearer {secret}", "Accept": "application/json"}


def redacted(url: httpx.URL) -> str:
    """The URL for reprs and messages (no user name)."""
    return str(url.copy_with(username=None, password=None))


def error_of(response: httpx.Response) -> EngrainError:
    """The :class:`EngrainError` an error answer stands for (read the body first)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return wire.load_error(body, status)
    where = redacted(response.request.url.copy_with(query=None))
    note = {"message": f"HTTP {status} from {where}, not an engrain error (is the URL right?)"}
    return wire.load_error(note, status)


def answer(response: httpx.Response) -> Any:
    """The decoded JSON of a successful answer; the error it stands for otherwise."""
    if response.status_code >= 400:
        raise error_of(response)
    try:
        return response.json()
    except ValueError as exc:
        where = redacted(response.request.url.copy_with(query=None))
        raise ConfigError(f"{where} answered HTTP {response.status_code} with something "
                          "that is not engrain's JSON: is the URL right?") from exc  # fmt: skip


def check_open(http: httpx.Client | httpx.AsyncClient) -> None:
    """Refuse a call on a closed client as a closed :class:`~engrain.engine.Engine` refuses
    one: :class:`StoreError`, nothing sent."""
    if http.is_closed:
        raise closed_error("client")


def transport_error(exc: httpx.HTTPError, req: Req, base: httpx.URL,
                    seconds: float | None) -> EngrainError:  # fmt: skip
    """What a failed exchange means to the caller (see the module's mapping)."""
    call = f"{req.method} {req.path}"
    if isinstance(exc, httpx.TimeoutException):
        return StoreError(f"{call}: no answer from {redacted(base)} within {seconds} s; the "
                          "call may still have taken effect on the server")  # fmt: skip
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return ConfigError(f"{call}: {exc}")
    kind = type(exc).__name__
    return StoreError(f"{call}: cannot reach the engrain server at {redacted(base)} "
                      f"({kind}: {exc})")  # fmt: skip
