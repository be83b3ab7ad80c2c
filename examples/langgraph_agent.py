"""A LangGraph agent that remembers a user across threads, with engrain as its store.

``python examples/langgraph_agent.py`` (needs ``pip install 'engrain[langchain]'``) runs an
agent twice for the same user in two threads: in the first thread the user asks it to
remember something, in the second (a new conversation: no shared messages) the agent's
prompt already holds it. The chat model is LangChain's ``GenericFakeChatModel`` (canned
replies, no API key), so what the example shows is the prompt: the script prints the system
message the model received in the second thread.

The wiring is LangGraph's own: the graph is compiled with ``store=EngrainStore(engine)``
and its node gets the store injected. Memories live under the namespace
``(user_id, "memories")``: user ``user_id``, project ``memories`` in engrain, so
``engine.context(..., user_id=...)`` sees them too. The thread's messages stay in
LangGraph's checkpointer (``InMemorySaver``), per thread.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from engrain import Engine
from engrain.integrations.langchain import EngrainStore

#: What the user says starts with this when they want it remembered.
REMEMBER = "remember that "


def call_model(
    state: MessagesState, config: RunnableConfig, *, store: BaseStore, model: BaseChatModel
) -> dict[str, list[BaseMessage]]:
    """The agent's one node: store what the user asks to remember, look up what is known
    about the user for the latest message, answer with it in the system prompt."""
    user_id = config["configurable"]["user_id"]
    namespace = (user_id, "memories")
    latest = state["messages"][-1]
    text = latest.text
    if text.lower().startswith(REMEMBER):
        store.put(namespace, str(uuid.uuid4()), {"content": text[len(REMEMBER) :]})
    known = store.search(namespace, query=text, limit=3)
    facts = "\n".join(f"- {item.value['content']}" for item in known)
    system = SystemMessage("What you know about the user:\n" + facts if facts
                           else "You know nothing about the user yet.")  # fmt: skip
    return {"messages": [model.invoke([system, *state["messages"]])]}


def build_agent(
    engine: Engine, model: BaseChatModel
) -> CompiledStateGraph[MessagesState, Any, MessagesState, MessagesState]:
    """The agent's graph: one node, engrain as the long-term store, LangGraph's in-memory
    checkpointer for each thread's messages."""

    def agent(
        state: MessagesState, config: RunnableConfig, *, store: BaseStore
    ) -> dict[str, list[BaseMessage]]:
        return call_model(state, config, store=store, model=model)

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile(checkpointer=InMemorySaver(), store=EngrainStore(engine))


def fake_model(replies: Sequence[str]) -> GenericFakeChatModel:
    """LangChain's fake chat model, answering ``replies`` in turn."""
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


class PromptRecorder(BaseCallbackHandler):
    """Keeps the messages of every chat model call, to show what the model was told."""

    def __init__(self) -> None:
        self.prompts: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        """Record the prompt of a chat model call."""
        self.prompts.extend(messages)


def conversation(
    agent: CompiledStateGraph[MessagesState, Any, MessagesState, MessagesState],
    user_id: str,
    thread_id: str,
    messages: Sequence[str],
    recorder: PromptRecorder,
) -> Iterator[str]:
    """Say ``messages`` to the agent in one thread; yields its replies."""
    config: RunnableConfig = {"configurable": {"user_id": user_id, "thread_id": thread_id},
                              "callbacks": [recorder]}  # fmt: skip
    for text in messages:
        state = agent.invoke({"messages": [HumanMessage(text)]}, config)
        yield state["messages"][-1].text


def run(engine: Engine) -> str:
    """The two threads of user ``ada``; returns the second thread's system prompt."""
    agent = build_agent(engine, fake_model(["Noted!", "Try a window seat on the left side."]))
    recorder = PromptRecorder()
    first = ["Remember that I always take a window seat when I fly"]
    second = ["Which seat should I book for my flight to Lisbon?"]
    for reply in conversation(agent, "ada", "thread-1", first, recorder):
        print(f"thread-1 agent: {reply}")
    for reply in conversation(agent, "ada", "thread-2", second, recorder):
        print(f"thread-2 agent: {reply}")
    return recorder.prompts[-1][0].text


def main(argv: Sequence[str] | None = None) -> None:
    """Run the example on a SQLite file (a temporary one unless ``--db``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="SQLite file (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, \
            Engine(f"sqlite:///{args.db or Path(tmp) / 'agent.db'}") as engine:  # fmt: skip
        system = run(engine)
    print(f"\nthe model's system prompt in thread-2:\n{system}")


if __name__ == "__main__":
    main()
