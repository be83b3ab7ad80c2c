"""A LangChain retriever over engrain: one ``recall`` (or ``context``) call per query."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, field_validator

from engrain.integrations import MemorySource, memory_metadata, scored_memories, sync_engine

__all__ = ["EngrainRetriever"]


class EngrainRetriever(BaseRetriever):
    """The user's memories for a query, as ``Document``\\ s.

    >>> retriever = EngrainRetriever(engine=Engine(), user_id="ada", k=4)
    >>> retriever.invoke("How should I indent this file?")

    ``engine`` is an :class:`~engrain.Engine` (or an :class:`~engrain.AsyncEngine`) or a
    :class:`~engrain.client.Client`.
    ``mode="recall"`` (the default) returns the ``k`` nearest memories within
    ``token_budget`` (``Engine.recall``); ``mode="context"`` returns what the relevance
    gate would inject for the message (``Engine.context``), at most ``k``, possibly none.
    ``k`` can also be given per call: ``retriever.invoke(query, k=2)``, and in context
    mode the conversation's turn before the query, which a retriever is not handed by
    LangChain: ``retriever.invoke("and the refresh ones?", previous="How long do access
    tokens live?")`` searches a continuation with its subject (``Engine.context``'s
    ``previous``; a turn too long is left out). Each document's
    ``page_content`` is the memory's text, its ``id`` the memory's id and its metadata the
    memory's labels (:func:`engrain.integrations.memory_metadata`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: MemorySource
    user_id: str
    project: str | None = None
    k: int = 4
    mode: Literal["recall", "context"] = "recall"
    token_budget: int | None = None

    @field_validator("engine", mode="before")
    @classmethod
    def _sync_engine(cls, engine: Any) -> Any:
        return sync_engine(engine)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        previous: str | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        found = scored_memories(
            self.engine, query, self.user_id, k=self.k if k is None else k, mode=self.mode,
            project=self.project, token_budget=self.token_budget, previous=previous,
        )  # fmt: skip
        return [Document(page_content=m.content, id=m.id, metadata=memory_metadata(m, score))
                for m, score in found]  # fmt: skip

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        previous: str | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        # the engine's calls block (embedding, store I/O): a worker thread keeps the loop free
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync(), k=k,
            previous=previous,
        )  # fmt: skip
