"""The request id of the request being served, for error bodies and log lines.

A context variable: the middleware sets it per request, and it follows the request into
FastAPI's threadpool (Starlette copies the context into the worker thread)."""

from __future__ import annotations

import logging
from contextvars import ContextVar

REQUEST_ID: ContextVar[str] = ContextVar("engrain_request_id", default="-")


def current_request_id() -> str:
    """The id of the request this code is serving (``"-"`` outside a request)."""
    return REQUEST_ID.get()


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` to every log record, so a format can print
    ``%(request_id)s`` on every line (``engrain serve`` does)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record``; never drops it."""
        record.request_id = current_request_id()
        return True
