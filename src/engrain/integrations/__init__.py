"""Adapters for the frameworks applications already run, each an optional extra:

- ``engrain.integrations.langchain`` (``pip install 'engrain[langchain]'``): a LangChain
  retriever, a LangGraph ``BaseStore`` for long-term memory and a helper that puts
  ``context()`` into a chat prompt;
- ``engrain.integrations.llamaindex`` (``pip install 'engrain[llamaindex]'``): a LlamaIndex
  retriever and a memory block.

Importing this package imports neither framework (``import engrain`` never does); importing
an adapter whose framework is missing raises ``ImportError`` naming the extra to install
(as ``engrain.client`` does without httpx). The adapters hold no memory logic: each call
is one call into the engine's public facade (or a :class:`~engrain.client.Client`'s, which
has the same methods), and what comes back is translated into the framework's types. This
module holds what both frameworks share: a memory's metadata as JSON-ready values, and the
conversation's turn before the message (``previous``) where a framework hands over the
chat history.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from engrain.errors import InputTooLargeError, ValidationError
from engrain.model import Memory, MemoryType
from engrain.recall.results import Context, RecallResult

__all__ = [
    "MemorySource",
    "context_for",
    "memory_metadata",
    "require",
    "scored_memories",
    "sync_engine",
    "turn_before",
]


@runtime_checkable
class MemorySource(Protocol):
    """What the retrievers call: :class:`~engrain.Engine` and
    :class:`~engrain.client.Client` both fit."""

    def recall(
        self,
        query: str,
        user_id: str,
        top_k: int | None = None,
        token_budget: int | None = None,
        memory_types: Sequence[MemoryType | str] | None = None,
        *,
        project: str | None = None,
        include_compressed: bool = False,
        now: datetime | None = None,
    ) -> RecallResult:
        """The memories to inject for ``query``."""
        ...

    def context(
        self,
        message: str,
        user_id: str,
        *,
        token_budget: int | None = None,
        top_k: int | None = None,
        project: str | None = None,
        previous: str | None = None,
    ) -> Context:
        """The memory block to inject for ``message`` (``previous``: the turn before)."""
        ...


def sync_engine(engine: Any) -> Any:
    """The engine to call from the frameworks' sync paths: an
    :class:`~engrain.AsyncEngine`'s own sync engine (its async methods run that engine in
    worker threads too), anything else as it is."""
    from engrain.aio import AsyncEngine  # here: engrain.aio imports the engine

    return engine.sync if isinstance(engine, AsyncEngine) else engine


def require(modules: Sequence[str], extra: str) -> None:
    """Import ``modules`` (the framework an adapter needs), or raise ``ImportError`` with
    the install command of ``extra``."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(
                f"engrain.integrations.{extra} needs {exc.name or name}: "
                f"pip install 'engrain[{extra}]'"
            ) from exc


def memory_metadata(memory: Memory, score: float | None = None) -> dict[str, Any]:
    """A memory's labels as JSON-ready values, the metadata of a retrieved document or node:
    ``id``, ``user_id``, ``project``, ``memory_type``, ``kind``, ``score``, the times
    (``created_at``, ``updated_at``, ``event_at``, ISO 8601), ``session_id``, ``domains``,
    ``pinned``, ``confidence``, ``importance`` and ``provenance`` (the ids of the turns it
    came from and the caller's metadata)."""
    return {
        "id": memory.id,
        "user_id": memory.user_id,
        "project": memory.project,
        "memory_type": memory.memory_type.value,
        "kind": memory.kind.value,
        "score": score,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "event_at": memory.event_at.isoformat() if memory.event_at else None,
        "session_id": memory.session_id,
        "domains": list(memory.domains),
        "pinned": memory.pinned,
        "confidence": memory.confidence,
        "importance": memory.importance,
        "provenance": memory.provenance.to_dict(),
        "source": "engrain",
    }


def turn_before(user_texts: Sequence[str | None]) -> str | None:
    """The user's turn before the latest, from the texts of a conversation's user messages
    in order (the latest last): the one before the latest, or ``None`` when there is none
    or it has no text. The user's turn, not the assistant's, as the proxy passes: it names
    what the user asked about in the user's words (``docs/decisions.md``, session 18)."""
    if len(user_texts) < 2:
        return None
    text = user_texts[-2]
    return text if text is not None and text.strip() else None


def context_for(
    source: MemorySource,
    message: str,
    user_id: str,
    *,
    previous: str | None,
    project: str | None = None,
    token_budget: int | None = None,
    top_k: int | None = None,
) -> Context:
    """``source.context(message, …, previous=previous)``. A turn before that the engine
    refuses as too long (``max_text_chars``: a pasted log the user sent earlier) is left
    out, as the proxy leaves it out, instead of failing the message: a refused call writes
    nothing, so the message is then answered alone (a message too long itself still
    raises)."""
    try:
        return source.context(message, user_id, project=project, token_budget=token_budget,
                              top_k=top_k, previous=previous)  # fmt: skip
    except InputTooLargeError:
        if previous is None:
            raise
    return source.context(message, user_id, project=project, token_budget=token_budget,
                          top_k=top_k)  # fmt: skip


def scored_memories(
    source: MemorySource,
    query: str,
    user_id: str,
    *,
    k: int,
    mode: str,
    project: str | None,
    token_budget: int | None,
    previous: str | None = None,
) -> list[tuple[Memory, float | None]]:
    """The memories a retriever returns for ``query``, best first, with their scores: one
    ``recall`` call (``mode="recall"``: the ``k`` nearest within the budget) or one
    ``context`` call (``mode="context"``: what the relevance gate would inject, at most
    ``k``, with the gate's scores; ``previous``, the conversation's turn before ``query``,
    lends a continuation its subject). ``recall`` takes no turn before: ``previous`` with
    ``mode="recall"`` raises :class:`ValidationError`."""
    if previous is not None and mode == "recall":
        raise ValidationError("previous: only mode='context' searches with the turn before")
    if mode == "recall":
        result = source.recall(query, user_id, top_k=k, token_budget=token_budget,
                               project=project)  # fmt: skip
        scores = {s.memory.id: float(s.score) for s in result.scored}
        return [(m, scores.get(m.id)) for m in result.memories]
    if mode == "context":
        block = context_for(source, query, user_id, previous=previous, project=project,
                            token_budget=token_budget, top_k=k)  # fmt: skip
        selected = block.gated.selected if block.gated is not None else []
        scores = {s.memory.id: float(s.score) for s in selected}
        return [(m, scores.get(m.id)) for m in block.memories]
    raise ValidationError(f"mode must be 'recall' or 'context', not {mode!r}")
