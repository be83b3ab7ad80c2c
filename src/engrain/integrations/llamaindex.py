"""engrain in LlamaIndex (``pip install 'engrain[llamaindex]'``):

- :class:`EngrainRetriever`, a ``BaseRetriever`` over ``Engine.recall`` (or ``context``)
  returning ``NodeWithScore``\\ s whose nodes carry the memory's metadata;
- :class:`EngrainMemoryBlock`, a memory block for ``llama_index.core.memory.Memory``: it
  injects ``context()`` for the latest user message, and stores the messages the short-term
  memory flushes with ``Engine.ingest_conversation``.

``docs/integrations.md`` shows both with an example.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from engrain.integrations import (
    MemorySource,
    context_for,
    memory_metadata,
    require,
    scored_memories,
    sync_engine,
    turn_before,
)

require(["llama_index.core"], "llamaindex")

from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.bridge.pydantic import Field, field_validator  # noqa: E402
from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.memory import BaseMemoryBlock  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from engrain.aio import AsyncEngine  # noqa: E402
from engrain.engine import Engine  # noqa: E402
from engrain.model import Memory, Turn  # noqa: E402

__all__ = ["EngrainMemoryBlock", "EngrainRetriever"]


class EngrainRetriever(BaseRetriever):
    """The user's memories for a query, as ``NodeWithScore``\\ s.

    >>> retriever = EngrainRetriever(Engine(), user_id="ada", k=4)
    >>> retriever.retrieve("How should I indent this file?")

    ``engine`` is an :class:`~engrain.Engine` (or an :class:`~engrain.AsyncEngine`) or a
    :class:`~engrain.client.Client`. ``mode="recall"`` (the default) returns the ``k``
    nearest memories within ``token_budget`` (``Engine.recall``); ``mode="context"`` what
    the relevance gate would inject (``Engine.context``), at most ``k``. Each node's text is
    the memory's, its id the memory's id, its metadata the memory's labels
    (:func:`engrain.integrations.memory_metadata`), its score recall's (or the gate's).
    """

    def __init__(
        self,
        engine: MemorySource | AsyncEngine,
        user_id: str,
        *,
        project: str | None = None,
        k: int = 4,
        mode: Literal["recall", "context"] = "recall",
        token_budget: int | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        super().__init__(callback_manager=callback_manager)
        self.engine: MemorySource = sync_engine(engine)
        self.user_id = user_id
        self.project = project
        self.k = k
        self.mode = mode
        self.token_budget = token_budget

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = scored_memories(
            self.engine, query_bundle.query_str, self.user_id, k=self.k, mode=self.mode,
            project=self.project, token_budget=self.token_budget,
        )  # fmt: skip
        return [NodeWithScore(node=_node(m, score), score=score) for m, score in found]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the engine's calls block (embedding, store I/O): a worker thread keeps the loop free
        return await asyncio.to_thread(self._retrieve, query_bundle)


#: The metadata an LLM reads beside a node's text (the rest is for the application).
SHOWN_TO_LLM = frozenset({"memory_type", "kind", "event_at", "updated_at"})


def _node(memory: Memory, score: float | None) -> TextNode:
    """A memory as a node: its text, id and labels; none of the labels is embedded again,
    and an LLM sees only its type, kind and dates."""
    metadata = memory_metadata(memory, score)
    return TextNode(
        text=memory.content, id_=memory.id, metadata=metadata,
        excluded_embed_metadata_keys=list(metadata),
        excluded_llm_metadata_keys=[k for k in metadata if k not in SHOWN_TO_LLM],
    )  # fmt: skip


class EngrainMemoryBlock(BaseMemoryBlock[str]):
    """A long-term memory block for LlamaIndex's ``Memory``.

    >>> block = EngrainMemoryBlock(engine=Engine(), user_id="ada")
    >>> memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])

    On every read the block is engrain's memory block for the latest user message (one
    ``Engine.context`` call, with the user message before it as ``previous`` so a
    continuation is searched with what it continues; empty when nothing is worth
    injecting). When the short-term
    memory flushes old messages into its blocks, this block stores the user and assistant
    turns with ``Engine.ingest_conversation`` (``ingest=False`` turns that off), tagged
    with the memory's ``session_id``.
    """

    name: str = Field(default="engrain", description="The name of the memory block.")
    engine: Engine = Field(description="The engrain engine the block reads and writes.")
    user_id: str = Field(description="Whose memory this is.")
    project: str | None = Field(default=None, description="The project to scope to.")
    token_budget: int | None = Field(
        default=None, description="The block's token budget (else engrain chooses one)."
    )
    ingest: bool = Field(
        default=True, description="Store the messages flushed from short-term memory."
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _sync_engine(cls, engine: Any) -> Any:
        return sync_engine(engine)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        said = [m.content for m in messages or [] if m.role is MessageRole.USER and m.content]
        latest = said[-1] if said else None
        if latest is None:
            return ""
        block = await asyncio.to_thread(
            context_for, self.engine, latest, self.user_id, previous=turn_before(said),
            project=self.project, token_budget=self.token_budget,
        )  # fmt: skip
        return block.text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if not self.ingest:
            return
        turns = [Turn(speaker=m.role.value, text=m.content) for m in messages
                 if m.role in (MessageRole.USER, MessageRole.ASSISTANT)
                 and m.content and m.content.strip()]  # fmt: skip
        if not turns:
            return
        session = next((str(m.additional_kwargs["session_id"]) for m in messages
                        if m.additional_kwargs.get("session_id")), None)  # fmt: skip
        await asyncio.to_thread(self.engine.ingest_conversation, turns, self.user_id,
                                session, project=self.project)  # fmt: skip
