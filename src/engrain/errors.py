"""The one exception tree of engrain.

Every error carries a stable ``code`` and the ``http_status`` a server maps it to::

    EngrainError                      code "error",            500
    ├── ValidationError               code "invalid_input",    400
    │   ├── EmptyInputError           code "empty_input",      400
    │   ├── InputTooLargeError        code "input_too_large",  413
    │   └── UnknownValueError         code "unknown_value",    400
    ├── NotFoundError                 code "not_found",        404
    ├── AuthenticationError           code "unauthenticated",  401
    ├── PermissionDeniedError         code "forbidden",        403
    ├── ConfigError                   code "config_error",     500
    ├── EmbeddingError                code "embedding_error",  503
    ├── LLMError                      code "llm_error",        502
    │   └── UpstreamError             code "upstream_unavailable", 502
    ├── RequestTimeoutError           code "timeout",          503
    │   └── UpstreamTimeoutError      code "upstream_timeout", 504
    ├── OutOfMemoryError              code "out_of_memory",    503
    └── StoreError                    code "store_error",      503
        ├── MigrationError            code "migration_error",  500
        └── WriteOutcomeUnknownError  code "write_outcome_unknown", 503

Driver errors (sqlite3, onnxruntime, …) are translated at the boundary with
``raise StoreError(...) from exc`` so callers only ever catch ``EngrainError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class EngrainError(Exception):
    """Base of every error engrain raises on purpose."""

    code: ClassVar[str] = "error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str | int]:
        """A JSON-ready description, the shape the CLI's ``--json`` and the server use."""
        return {"error": self.code, "status": self.http_status, "message": self.message}


class ValidationError(EngrainError):
    """The caller passed something engrain cannot accept; nothing was written."""

    code = "invalid_input"
    http_status = 400


class EmptyInputError(ValidationError):
    """Text or an identifier was empty or only whitespace."""

    code = "empty_input"


class InputTooLargeError(ValidationError):
    """Text above the documented size limit (``Settings.max_text_chars``)."""

    code = "input_too_large"
    http_status = 413


class UnknownValueError(ValidationError):
    """A memory type, kind or other enumerated value that engrain does not know."""

    code = "unknown_value"


class NotFoundError(EngrainError):
    """No memory with that id for that user."""

    code = "not_found"
    http_status = 404


class AuthenticationError(EngrainError):
    """No API key, or a key engrain does not know (or one that was revoked)."""

    code = "unauthenticated"
    http_status = 401


class PermissionDeniedError(EngrainError):
    """A valid API key used for a user or project it does not hold."""

    code = "forbidden"
    http_status = 403


class ConfigError(EngrainError):
    """A setting is missing, malformed or points at something that cannot be used."""

    code = "config_error"


class LLMError(EngrainError):
    """The configured LLM endpoint failed, timed out or replied with something unusable.
    Callers of the optional LLM catch it and fall back to the rule-based path."""

    code = "llm_error"
    http_status = 502


class EmbeddingError(EngrainError):
    """The embedding model could not be loaded or failed on an input."""

    code = "embedding_error"
    http_status = 503


class RequestTimeoutError(EngrainError):
    """A server request ran past its time limit (``create_app(request_timeout=)``) before
    its response started; the work may still complete in the background."""

    code = "timeout"
    http_status = 503


class UpstreamError(LLMError):
    """The proxy's upstream chat endpoint could not be reached or broke the connection."""

    code = "upstream_unavailable"


class UpstreamTimeoutError(RequestTimeoutError):
    """The proxy's upstream did not answer within its timeout."""

    code = "upstream_timeout"
    http_status = 504


class OutOfMemoryError(EngrainError):
    """The process ran out of memory (or could not start a thread) during the call, which
    wrote nothing: ``MemoryError`` translated where every public call ends
    (``lifecycle.admitted``). A write that had committed before memory ran out succeeds
    instead (its in-process caches are dropped and read again). Send it again once memory
    is free."""

    code = "out_of_memory"
    http_status = 503


class StoreError(EngrainError):
    """The storage backend failed; the write it was doing was rolled back."""

    code = "store_error"
    http_status = 503


class MigrationError(StoreError):
    """A schema migration failed or the store was written by a newer engrain."""

    code = "migration_error"
    http_status = 500


class KeyChangedError(StoreError):
    """Another engine (a process, or an engine of its own in this one) changed the live
    memory under a procedural key, or a memory the call names (a correction's target, a
    pair being resolved), between this call's plan and its write transaction; the write
    was rolled back. The engine plans such a call again (``Engine.remember``, the ingest
    calls, ``Engine.resolve``): this reaches a caller only when the key kept changing, or
    from an import (planned once: its ``on_record`` reports each record as planned).
    Sending the call again is safe."""

    code = "key_changed"


class WriteOutcomeUnknownError(StoreError):
    """The connection to the store broke while a write was committing and the store could
    not be asked afterwards whether it committed: the write may or may not be stored (the
    one exception to "raises and writes nothing"). Read it back before writing it again."""

    code = "write_outcome_unknown"
    http_status = 503


#: The engine's error for a value a request schema refuses, by pydantic's error type: an
#: empty string or list is what the engine calls empty, a string over its length what it
#: calls too large; any other type is :class:`ValidationError`. The one mapping the HTTP
#: server's 422 (``server/errors.py``) and MCP's refused arguments (``mcp/tools.py``) use,
#: so a value carries the same code on every surface.
SCHEMA_ERRORS: Mapping[str, type[ValidationError]] = {
    "string_too_short": EmptyInputError,
    "too_short": EmptyInputError,
    "string_too_long": InputTooLargeError,
}
