"""engrain: long-term memory for LLM applications.

Remember what users and projects teach an assistant and, for each new message, inject
exactly the memory that makes the answer better::

    from engrain import Engine
    engine = Engine()                       # SQLite file in the data directory, local model
    engine.remember("I prefer tabs over spaces", user_id="ada", kind="preference")
    print(engine.context("How should I indent this?", user_id="ada").text)
"""

from typing import TYPE_CHECKING, Any

from engrain.config import Settings, load_settings
from engrain.engine import Engine, ImportResult
from engrain.errors import (
    ConfigError,
    EmbeddingError,
    EmptyInputError,
    EngrainError,
    InputTooLargeError,
    LLMError,
    MigrationError,
    NotFoundError,
    StoreError,
    UnknownValueError,
    ValidationError,
    WriteOutcomeUnknownError,
)
from engrain.model import IngestReport, Kind, Memory, MemoryType, Outcome, Provenance, Turn
from engrain.recall.results import Context, RecallResult, ScoredMemory

if TYPE_CHECKING:
    from engrain.aio import AsyncEngine

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``AsyncEngine``, imported when first asked for: ``asyncio`` (with ``ssl``) is ~1.6 MB
    of every process's memory and ~0.1 s of its start, and a synchronous caller never
    needs it (issue 18)."""
    if name == "AsyncEngine":
        from engrain.aio import AsyncEngine

        return AsyncEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncEngine",
    "ConfigError",
    "Context",
    "EmbeddingError",
    "EmptyInputError",
    "Engine",
    "EngrainError",
    "ImportResult",
    "IngestReport",
    "InputTooLargeError",
    "Kind",
    "LLMError",
    "Memory",
    "MemoryType",
    "MigrationError",
    "NotFoundError",
    "Outcome",
    "Provenance",
    "RecallResult",
    "ScoredMemory",
    "Settings",
    "StoreError",
    "Turn",
    "UnknownValueError",
    "ValidationError",
    "WriteOutcomeUnknownError",
    "load_settings",
]
