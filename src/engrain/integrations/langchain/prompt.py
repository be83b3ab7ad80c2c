"""Put ``context()`` into a chat prompt: the memory block for the latest human message,
as a system message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableConfig, RunnableLambda

from engrain.errors import ValidationError
from engrain.integrations import MemorySource, context_for, turn_before

__all__ = ["memory_injector", "with_memory"]


def with_memory(
    messages: Sequence[BaseMessage] | PromptValue,
    engine: MemorySource,
    user_id: str,
    *,
    project: str | None = None,
    token_budget: int | None = None,
) -> list[BaseMessage]:
    """``messages`` with engrain's memory block for the latest human message: appended to
    a leading system message (many chat APIs take only one, first), else as a new system
    message in front. One ``context()`` call, with the human message before the latest as
    ``previous`` (so "and the refresh ones?" is searched with what it continues; a turn
    before too long for the engine is left out); when it injects nothing (a "thanks!",
    nothing relevant) or there is no human message, the messages come back unchanged (a
    new list).

    >>> with_memory([HumanMessage("How should I indent this?")], engine, "ada")
    """
    listed = messages.to_messages() if isinstance(messages, PromptValue) else list(messages)
    humans = [m.text for m in listed if isinstance(m, HumanMessage)]
    if not humans or not humans[-1].strip():
        return listed
    block = context_for(engine, humans[-1], user_id, previous=turn_before(humans),
                        project=project, token_budget=token_budget)  # fmt: skip
    if not block.text:
        return listed
    first = listed[0] if listed else None
    if isinstance(first, SystemMessage) and isinstance(first.content, str):
        merged = f"{first.content}\n\n{block.text}" if first.content else block.text
        return [first.model_copy(update={"content": merged}), *listed[1:]]
    return [SystemMessage(content=block.text), *listed]


def memory_injector(
    engine: MemorySource,
    user_id: str | None = None,
    *,
    project: str | None = None,
    token_budget: int | None = None,
) -> RunnableLambda[Any, list[BaseMessage]]:
    """:func:`with_memory` as a Runnable, to chain between a prompt and a chat model::

        chain = prompt | memory_injector(engine) | model
        chain.invoke({...}, config={"configurable": {"user_id": "ada"}})

    Without ``user_id`` the user is read from the run's ``configurable["user_id"]`` (a
    run naming none raises :class:`ValidationError`); ``project`` likewise falls back to
    ``configurable["project"]``."""

    def inject(
        messages: Sequence[BaseMessage] | PromptValue, config: RunnableConfig
    ) -> list[BaseMessage]:
        configurable = config.get("configurable") or {}
        user = user_id if user_id is not None else configurable.get("user_id")
        if user is None:
            raise ValidationError("user_id: give one to memory_injector or in "
                                  "config['configurable']['user_id']")  # fmt: skip
        scope = project if project is not None else configurable.get("project")
        return with_memory(messages, engine, user, project=scope, token_budget=token_budget)

    return RunnableLambda(inject, name="engrain_memory")
