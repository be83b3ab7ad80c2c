"""Every error leaves the server as JSON in one shape (:class:`~.models.ErrorOut`)::

    {"error": "<code>", "message": "...", "status": 404, "request_id": "..."}

An :class:`EngrainError` keeps its own code and HTTP status (the error tree decides, not
the route). A body or query that does not fit the request model is 422 with the code the
engine gives the same value (``invalid_input``, ``empty_input`` or ``input_too_large``;
its message names the field); the engine's own refusals are 400 (413 too large).
Anything unexpected is logged with its traceback and answered 500 ``error`` without one:
no stack trace, path or driver message ever reaches a caller.

The OpenAI-compatible proxy's routes (``app.state.openai_paths``) answer the same errors in
OpenAI's shape, which the ``openai`` SDK reads its exception's text from::

    {"error": {"message": "...", "type": "<code>", "code": "<code>", "param": null},
     "status": 401, "request_id": "..."}
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Route

from engrain.errors import (
    SCHEMA_ERRORS,
    AuthenticationError,
    EmptyInputError,
    EngrainError,
    InputTooLargeError,
    ValidationError,
)
from engrain.server.context import current_request_id
from engrain.server.models import ID_PATTERN, PATTERN_MEANINGS, TEXT_PATTERN

log = logging.getLogger("engrain.server")


class RequestValidationFailed(ValidationError):
    """The body or query does not fit the route's request model (HTTP 422)."""

    http_status = 422


class EmptyValueRefused(RequestValidationFailed, EmptyInputError):
    """A 422 for a value the engine refuses as empty: code ``empty_input``."""


class TooLargeValueRefused(RequestValidationFailed, InputTooLargeError):
    """A 422 for a value the engine refuses as too large: code ``input_too_large``."""


_AS_422: Mapping[type[ValidationError], type[RequestValidationFailed]] = {
    EmptyInputError: EmptyValueRefused,
    InputTooLargeError: TooLargeValueRefused,
}


def _refusal(item: Mapping[str, Any]) -> tuple[type[RequestValidationFailed], str | None]:
    """The engine's refusal of the value one schema error names, as a 422 class (so its
    code is the one the engine gives the same value, ``validate.py``), and for a pattern
    the engine's words instead of the pattern (``None``: pydantic's message). The one
    place a schema error is mapped (by :data:`~engrain.errors.SCHEMA_ERRORS`, and an id
    of spaces or a text without a visible character is ``empty_input``)."""
    kind = str(item.get("type"))
    if kind != "string_pattern_mismatch":
        return _AS_422.get(SCHEMA_ERRORS.get(kind, ValidationError), RequestValidationFailed), None
    pattern = str((item.get("ctx") or {}).get("pattern"))
    value = item.get("input")
    if pattern == ID_PATTERN and isinstance(value, str) and not value.strip():
        return EmptyValueRefused, "is empty"  # validate.identifier: empty before control
    if pattern == TEXT_PATTERN:
        return EmptyValueRefused, PATTERN_MEANINGS[pattern]
    return RequestValidationFailed, PATTERN_MEANINGS.get(pattern)


def openai_shaped(app: Any, path: str) -> bool:
    """Whether ``path`` is one of the OpenAI-compatible routes ``app`` serves (the proxy's),
    whose errors are in OpenAI's shape."""
    return path in getattr(getattr(app, "state", None), "openai_paths", ())


def _body(code: str, message: str, status: int, *, openai: bool) -> dict[str, Any]:
    if openai:
        return {"error": {"message": message, "type": code, "code": code, "param": None},
                "status": status, "request_id": current_request_id()}  # fmt: skip
    return {"error": code, "message": message, "status": status,
            "request_id": current_request_id()}  # fmt: skip


def error_body(error: EngrainError, *, openai: bool = False) -> dict[str, Any]:
    """The JSON object of ``error``, with this request's id; ``openai``: in OpenAI's shape."""
    return _body(error.code, error.message, error.http_status, openai=openai)


def error_headers(error: EngrainError) -> dict[str, str]:
    """The headers an error response carries beyond the request id (which the middleware
    adds to every response): for a 401 the ``WWW-Authenticate: Bearer`` challenge."""
    headers: dict[str, str] = {}
    if isinstance(error, AuthenticationError):
        headers["WWW-Authenticate"] = "Bearer"
    return headers


def error_response(error: EngrainError, request: Request | None = None) -> JSONResponse:
    """``error`` as an HTTP response with its own status (in OpenAI's shape on the
    OpenAI-compatible routes of ``request``'s app)."""
    openai = request is not None and openai_shaped(request.app, request.url.path)
    return JSONResponse(error_body(error, openai=openai), error.http_status,
                        headers=error_headers(error))  # fmt: skip


def error_bytes(
    error: EngrainError, *, openai: bool = False
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """``error`` as raw ASGI parts (status, headers, body), for middleware answering before
    or instead of the app."""
    body = json.dumps(error_body(error, openai=openai)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error_headers(error).items()]
    headers.append((b"x-request-id", current_request_id().encode()))
    return error.http_status, headers, body


def _schema_error(errors: Any) -> RequestValidationFailed:
    """The 422 of a request that does not fit its schema: every wrong value named, and the
    code the engine gives the first (as the engine stops at the first value it refuses)."""
    parts = []
    first: type[RequestValidationFailed] | None = None
    for item in errors:
        refusal, meaning = _refusal(item)
        first = first or refusal
        if item.get("type") == "json_invalid":  # loc is ("body", <offset>): "0: JSON decode error"
            reason = (item.get("ctx") or {}).get("error")
            parts.append(f"body: invalid JSON ({reason})" if reason else "body: invalid JSON")
            continue
        where = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")  # pydantic's
        parts.append(f"{where}: {meaning or message}")
    message = "; ".join(parts) or "the request does not fit its schema"
    return (first or RequestValidationFailed)(message)


async def _engrain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, EngrainError)
    return error_response(exc, request)


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if _body_not_read(errors) and not _json_media(media):
        shown = repr(_shown(media, 80)) if media else "missing"
        return error_response(RequestValidationFailed(
            f"body: must be JSON sent with Content-Type: application/json (this request's "
            f"Content-Type is {shown})"), request)  # fmt: skip
    return error_response(_schema_error(errors), request)


def _body_not_read(errors: Any) -> bool:
    """Whether FastAPI refused the body as a whole for not being an object: what it says
    ("Input should be a valid dictionary") when it did not read a body sent as another
    media type (a form, text) as JSON at all."""
    return any(tuple(item.get("loc", ())) == ("body",)
               and item.get("type") in ("model_attributes_type", "dict_type")
               for item in errors)  # fmt: skip


def _json_media(media: str) -> bool:
    """Whether FastAPI reads a body of media type ``media`` as JSON."""
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


_HTTP_CODES: Mapping[int, str] = {404: "not_found", 405: "method_not_allowed",
                                  400: "invalid_input"}  # fmt: skip


def allowed_methods(request: Request) -> list[str]:
    """Every method the app answers at this request's path, from its OpenAPI paths (every
    API route) and its plain routes (``/docs``, ``/openapi.json``, a mounted ``/mcp``).
    Starlette's own 405 names only the first route matching the path, where
    ``GET /v1/memories`` and ``POST /v1/memories`` are two routes."""
    methods: set[str] = set()
    path = request.url.path
    for template, operations in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            methods |= {method.upper() for method in operations}
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.path == path and route.methods:
            methods |= route.methods
    return sorted(methods)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such route, wrong method, an unparsable body); a 405
    carries ``Allow`` with every method of the path."""
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    message = str(exc.detail)
    headers = dict(exc.headers or {})
    where = f"{request.method} {_shown(request.url.path)}"
    if exc.status_code == 404 and message == "Not Found":  # Starlette's: no route matched
        message = f"no route {where}; the API's routes start with /v1/ (/openapi.json lists them)"
    elif exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI read no JSON body
        message = f"body: {_unreadable(exc.__cause__)}"
    elif exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
        message = f"{where}: method not allowed; this path takes {headers['Allow']}"
    body = _body(code, message, exc.status_code,
                 openai=openai_shaped(request.app, request.url.path))  # fmt: skip
    return JSONResponse(body, exc.status_code, headers=headers)


def _unreadable(cause: BaseException) -> str:
    """Why FastAPI could not read a body as JSON, when its parser raised something other
    than a syntax error (which is a 422 ``invalid JSON``): its own message is "There was an
    error parsing the body" whatever the cause."""
    if isinstance(cause, RecursionError):
        return "JSON nested too deeply to read"
    if isinstance(cause, UnicodeDecodeError):  # as `engrain import` and POST /v1/import say
        byte = cause.object[cause.start : cause.start + 1].hex()
        return f"not valid UTF-8 (byte 0x{byte} at position {cause.start}): send JSON as UTF-8"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return "a number in the JSON has too many digits to read"
    return f"could not be read as JSON ({type(cause).__name__})"


def _shown(path: str, limit: int = 200) -> str:
    """A request path as an error message names it: printable, at most ``limit`` characters."""
    path = "".join(c if c.isprintable() else "?" for c in path)
    return path if len(path) <= limit else path[:limit] + "…"


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(EngrainError("internal error; the server log has the details"), request)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the one error shape."""
    app.add_exception_handler(EngrainError, _engrain_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
