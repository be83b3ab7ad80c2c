"""The LlamaIndex retriever and memory block, with the real ``llama-index-core`` classes:
``retrieve``/``aretrieve``, a ``RetrieverQueryEngine`` over ``MockLLM`` (LlamaIndex's own
offline model), and ``llama_index.core.memory.Memory`` reading and flushing into the
block. ``llama-index-core`` ships no standard test suite for either interface."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import Memory
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ValidationError
from engrain.integrations.llamaindex import EngrainMemoryBlock, EngrainRetriever
from engrain.store.sqlite import SQLiteStore

from ..conftest import NOW, make_settings

FACTS = [
    "Ada deploys the invoicing service with Helm charts on Fridays",
    "Ada prefers PostgreSQL over MySQL for the invoicing database",
    "Ada's cat is called Biscuit and sleeps on the keyboard",
]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "li.db"),
                 embedder=HashEmbedder())  # fmt: skip
    for fact in FACTS:
        eng.remember(fact, user_id="ada", now=NOW)
    eng.remember("Bob's cat is called Pixel", user_id="bob", now=NOW)
    yield eng
    eng.close()


def test_retrieve_returns_scored_nodes_with_the_memorys_labels(engine: Engine) -> None:
    found = EngrainRetriever(engine, "ada", k=2).retrieve("what is the cat called? Biscuit")
    assert len(found) == 2 and all(isinstance(n, NodeWithScore) for n in found)
    best = found[0]
    assert best.node.get_content() == FACTS[2] and best.node.node_id == best.node.metadata["id"]
    assert best.score is not None and found[1].score is not None and best.score > found[1].score
    assert best.node.metadata["kind"] == "fact" and best.node.metadata["user_id"] == "ada"
    assert engine.get(best.node.node_id, "ada").content == FACTS[2]
    # an LLM reads the text with the memory's type, kind and dates, not its bookkeeping
    shown = best.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "kind: fact" in shown and "provenance" not in shown and "user_id" not in shown
    assert best.node.get_content(metadata_mode=MetadataMode.EMBED) == FACTS[2]


def test_async_retrieve_matches_sync(engine: Engine) -> None:
    retriever = EngrainRetriever(engine, "ada", k=3)
    sync = retriever.retrieve("invoicing database")
    both = asyncio.run(retriever.aretrieve("invoicing database"))
    assert [n.node.node_id for n in both] == [n.node.node_id for n in sync] and len(sync) == 3


def test_a_query_engine_answers_from_the_users_memories(engine: Engine) -> None:
    query_engine = RetrieverQueryEngine.from_args(EngrainRetriever(engine, "bob", k=3),
                                                  llm=MockLLM())  # fmt: skip
    response = query_engine.query("What is my cat called?")
    assert [n.node.get_content() for n in response.source_nodes] == ["Bob's cat is called Pixel"]


def test_context_mode_returns_what_the_gate_injects(engine: Engine) -> None:
    question = "Which database does Ada prefer for invoicing?"
    found = EngrainRetriever(engine, "ada", k=2, mode="context").retrieve(question)
    block = engine.context(question, user_id="ada", top_k=2)
    assert [n.node.node_id for n in found] == [m.id for m in block.memories] and found
    with pytest.raises(ValidationError):
        EngrainRetriever(engine, "ada", mode="both").retrieve(question)  # type: ignore[arg-type]


def test_the_memory_block_injects_context_for_the_latest_user_message(engine: Engine) -> None:
    block = EngrainMemoryBlock(engine=engine, user_id="ada", ingest=False)
    memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])
    memory.put(ChatMessage(role="user", content="Hi, I am Ada."))
    memory.put(ChatMessage(role="assistant", content="Hello Ada!"))
    question = "Which database should the invoicing service use?"
    messages = memory.get(input=question)
    expected = engine.context(question, user_id="ada").text
    assert "PostgreSQL" in expected
    assert messages[0].role.value == "system" and expected in (messages[0].content or "")
    assert [m.content for m in messages[1:]] == ["Hi, I am Ada.", "Hello Ada!"]
    assert asyncio.run(block.aget([ChatMessage(role="user", content="thanks!")])) == ""
    assert asyncio.run(block.aget([])) == ""


def test_flushed_messages_are_ingested_with_the_session(engine: Engine) -> None:
    block = EngrainMemoryBlock(engine=engine, user_id="carol")
    memory = Memory.from_defaults(session_id="trip", memory_blocks=[block], token_limit=80,
                                  chat_history_token_ratio=0.5, token_flush_size=30)  # fmt: skip
    said = [
        ("user", "I am planning a trip to Lisbon in May with my sister Maria"),
        ("assistant", "Lisbon in May sounds lovely; do you need hotel ideas?"),
        ("user", "Yes, we want a quiet hotel near the Alfama district please"),
        ("assistant", "Noted: a quiet hotel near Alfama for you and Maria."),
        ("user", "Also we are vegetarian, so restaurant tips should be vegetarian"),
        ("assistant", "Understood, vegetarian restaurants only."),
    ]
    for role, text in said:
        memory.put(ChatMessage(role=role, content=text))
    stored = engine.list("carol")
    assert stored and all(m.session_id == "trip" for m in stored)
    assert "Lisbon" in " ".join(m.content for m in stored)
    assert "Lisbon" in engine.context("Where am I travelling in May? Lisbon?", user_id="carol").text


def test_an_async_engine_is_used_through_its_sync_engine(tmp_path: Path) -> None:
    from engrain.aio import AsyncEngine

    aengine = AsyncEngine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "a.db"),
                          embedder=HashEmbedder())  # fmt: skip
    aengine.sync.remember("Ada's cat is called Biscuit", user_id="ada", now=NOW)
    found = asyncio.run(EngrainRetriever(aengine, "ada", k=1).aretrieve("cat Biscuit"))
    assert [n.node.get_content() for n in found] == ["Ada's cat is called Biscuit"]
    block = EngrainMemoryBlock(engine=aengine, user_id="ada")
    text = asyncio.run(block.aget([ChatMessage(role="user", content="What is my cat called?")]))
    assert "Biscuit" in text


def test_the_memory_block_passes_the_user_turn_before_the_latest(engine: Engine) -> None:
    earlier, follow_up = "Which database does Ada prefer for invoicing?", "and why is that?"
    expected = engine.context(follow_up, user_id="ada", previous=earlier).text
    assert "PostgreSQL" in expected and expected != engine.context(follow_up, user_id="ada").text
    block = EngrainMemoryBlock(engine=engine, user_id="ada", ingest=False)
    memory = Memory.from_defaults(session_id="s2", memory_blocks=[block])
    memory.put(ChatMessage(role="user", content=earlier))
    # the assistant's answer is not the turn before: the user's earlier message is
    memory.put(ChatMessage(role="assistant", content="Ada's cat is called Biscuit"))
    messages = memory.get(input=follow_up)
    assert messages[0].role.value == "system" and expected in (messages[0].content or "")
    said = [ChatMessage(role="user", content=earlier), ChatMessage(role="user", content=follow_up)]
    assert asyncio.run(block.aget(said)) == expected
