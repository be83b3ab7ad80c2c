"""The LangChain retriever and prompt helper: LangChain's own standard retriever suite
(``langchain_tests.integration_tests.RetrieversIntegrationTests``, every test of it, none
skipped) against the real class over a SQLite engine, then what the documents carry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_tests.integration_tests import RetrieversIntegrationTests

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import InputTooLargeError, ValidationError
from engrain.integrations.langchain import EngrainRetriever, memory_injector, with_memory
from engrain.store.sqlite import SQLiteStore

from ..conftest import NOW, make_settings

# LangChain's async standard test is a bare ``async def``: pytest-asyncio runs it (strict
# mode needs the mark; on the module's sync tests it only warns, hence the filter)
pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.filterwarnings("ignore:The test <Function .* marked with '@pytest.mark.asyncio'"),
]

FACTS = [
    "Ada deploys the invoicing service with Helm charts on Fridays",
    "Ada's team writes the billing backend in Python with FastAPI",
    "Ada prefers PostgreSQL over MySQL for the invoicing database",
    "Ada's cat is called Biscuit and sleeps on the keyboard",
    "The invoicing service sends reminders seven days before a due date",
]


def sqlite_engine(tmp_path: Path) -> Engine:
    """A SQLite engine with the deterministic test embedder and Ada's facts."""
    engine = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "lc.db"),
                    embedder=HashEmbedder())  # fmt: skip
    for fact in FACTS:
        engine.remember(fact, user_id="ada", now=NOW)
    engine.remember("Bob deploys the invoicing service by hand", user_id="bob", now=NOW)
    engine.remember("Ada keeps the invoicing runbook in the ops wiki", user_id="ada",
                    project="ops", now=NOW)  # fmt: skip
    return engine


class TestEngrainRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's standard retriever tests: ``k`` in the constructor and per call, sync
    and async invoke returning documents."""

    @pytest.fixture(autouse=True)
    def _engine(self, tmp_path: Path) -> Iterator[None]:
        self.engine = sqlite_engine(tmp_path)
        yield
        self.engine.close()

    @property
    def retriever_constructor(self) -> type[EngrainRetriever]:
        return EngrainRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"engine": self.engine, "user_id": "ada"}

    @property
    def retriever_query_example(self) -> str:
        return "How does Ada deploy the invoicing service?"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = sqlite_engine(tmp_path)
    yield eng
    eng.close()


def test_documents_carry_the_memory_and_its_labels(engine: Engine) -> None:
    docs = EngrainRetriever(engine=engine, user_id="ada", k=2).invoke("Helm charts on Fridays")
    assert docs[0].page_content == FACTS[0]
    memory = engine.get(docs[0].id or "", "ada")
    meta = docs[0].metadata
    assert meta["id"] == memory.id and meta["user_id"] == "ada"
    assert (meta["memory_type"], meta["kind"]) == ("semantic", "fact")
    assert meta["created_at"] == NOW.isoformat() and meta["event_at"] is None
    assert meta["provenance"] == {"turn_ids": [], "metadata": {}}
    assert meta["score"] > docs[1].metadata["score"]


def test_recall_is_scoped_to_the_user_and_project(engine: Engine) -> None:
    ada = EngrainRetriever(engine=engine, user_id="ada", k=10).invoke("deploys by hand")
    assert "Bob deploys the invoicing service by hand" not in {d.page_content for d in ada}
    ops = EngrainRetriever(engine=engine, user_id="ada", project="ops", k=10).invoke("runbook")
    assert [d.page_content for d in ops] == ["Ada keeps the invoicing runbook in the ops wiki"]


def test_context_mode_returns_what_the_gate_injects(engine: Engine) -> None:
    retriever = EngrainRetriever(engine=engine, user_id="ada", mode="context", k=3)
    docs = retriever.invoke("How does Ada deploy the invoicing service?")
    block = engine.context("How does Ada deploy the invoicing service?", user_id="ada", top_k=3)
    assert [d.id for d in docs] == [m.id for m in block.memories]
    assert docs and all(d.metadata["score"] is not None for d in docs)
    assert retriever.invoke("thanks!") == []  # a trivial message injects nothing


def test_async_invoke_matches_sync(engine: Engine) -> None:
    retriever = EngrainRetriever(engine=engine, user_id="ada", k=3)
    sync = retriever.invoke("Which database does Ada prefer?")
    both = asyncio.run(retriever.ainvoke("Which database does Ada prefer?"))
    assert [d.id for d in both] == [d.id for d in sync] and len(sync) == 3


def test_bad_arguments_raise_validation_errors(engine: Engine) -> None:
    with pytest.raises(ValidationError):
        EngrainRetriever(engine=engine, user_id="ada", k=0).invoke("deploy")
    with pytest.raises(ValidationError):
        EngrainRetriever(engine=engine, user_id="", k=2).invoke("deploy")


def test_with_memory_adds_the_block_as_a_system_message(engine: Engine) -> None:
    question = "Which database should the invoicing service use?"
    block = engine.context(question, user_id="ada").text
    assert "PostgreSQL" in block
    plain = with_memory([AIMessage("hi"), HumanMessage(question)], engine, "ada")
    assert plain == [SystemMessage(block), AIMessage("hi"), HumanMessage(question)]
    merged = with_memory([SystemMessage("Be brief."), HumanMessage(question)], engine, "ada")
    assert merged[0].content == f"Be brief.\n\n{block}" and len(merged) == 2
    untouched = [SystemMessage("Be brief."), HumanMessage("thanks!")]
    assert with_memory(untouched, engine, "ada") == untouched


def test_memory_injector_reads_the_user_from_the_run(engine: Engine) -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])
    chain = prompt | memory_injector(engine)
    out = chain.invoke({"q": "Which database does Ada prefer?"},
                       config={"configurable": {"user_id": "ada"}})  # fmt: skip
    assert "PostgreSQL" in out[0].content and out[0].content.startswith("Be brief.")
    assert out[-1] == HumanMessage("Which database does Ada prefer?")
    with pytest.raises(ValidationError):
        chain.invoke({"q": "Which database does Ada prefer?"})


def test_documents_are_langchain_documents(engine: Engine) -> None:
    docs = EngrainRetriever(engine=engine, user_id="ada").invoke("invoicing")
    assert len(docs) == 4 and all(isinstance(d, Document) for d in docs)


def test_importing_engrain_imports_no_framework() -> None:
    code = ("import sys, engrain, engrain.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('langchain_core', 'langgraph', 'llama_index')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("engrain.integrations.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(ImportError, match=r"pip install 'engrain\[langchain\]'"):
        import engrain.integrations.langchain
    monkeypatch.setitem(sys.modules, "llama_index.core", None)
    with pytest.raises(ImportError, match=r"pip install 'engrain\[llamaindex\]'"):
        import engrain.integrations.llamaindex  # noqa: F401


def test_a_client_of_an_engrain_server_retrieves_the_same(tmp_path: Path) -> None:
    from ..test_client import Served

    served = Served(tmp_path)
    try:
        for fact in FACTS:
            served.engine.remember(fact, user_id="alice", now=NOW)
        query = "Which database does Ada prefer for invoicing?"
        local = EngrainRetriever(engine=served.engine, user_id="alice", k=3).invoke(query)
        with served.client() as client:
            remote = EngrainRetriever(engine=client, user_id="alice", k=3).invoke(query)
        assert [(d.id, d.page_content) for d in remote] == [(d.id, d.page_content) for d in local]
        assert [d.metadata["kind"] for d in remote] == ["fact"] * 3
    finally:
        served.close()


def test_an_async_engine_is_used_through_its_sync_engine(tmp_path: Path) -> None:
    from engrain.aio import AsyncEngine

    aengine = AsyncEngine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "a.db"),
                          embedder=HashEmbedder())  # fmt: skip
    aengine.sync.remember(FACTS[3], user_id="ada", now=NOW)
    retriever = EngrainRetriever(engine=aengine, user_id="ada", k=1)
    assert retriever.engine is aengine.sync
    assert [d.page_content for d in asyncio.run(retriever.ainvoke("cat Biscuit"))] == [FACTS[3]]


def test_with_memory_leaves_a_prompt_without_human_text_alone(engine: Engine) -> None:
    for messages in ([SystemMessage("Be brief.")], [HumanMessage("   ")], []):
        assert with_memory(messages, engine, "ada") == messages


#: A continuation that names no subject, and the turn before that gives it one.
EARLIER, FOLLOW_UP = "Which database does Ada prefer for invoicing?", "and why is that?"


def test_context_mode_searches_a_continuation_with_the_turn_before(engine: Engine) -> None:
    retriever = EngrainRetriever(engine=engine, user_id="ada", mode="context", k=3)
    with_turn = engine.context(FOLLOW_UP, user_id="ada", top_k=3, previous=EARLIER).memories
    alone = engine.context(FOLLOW_UP, user_id="ada", top_k=3).memories
    assert [m.content for m in with_turn] == [FACTS[2]] and [m.id for m in alone] != [
        m.id for m in with_turn
    ]
    docs = retriever.invoke(FOLLOW_UP, previous=EARLIER)
    assert [d.id for d in docs] == [m.id for m in with_turn]
    both = asyncio.run(retriever.ainvoke(FOLLOW_UP, previous=EARLIER))
    assert [d.id for d in both] == [m.id for m in with_turn]
    assert [d.id for d in retriever.invoke(FOLLOW_UP)] == [m.id for m in alone]
    with pytest.raises(ValidationError, match="previous"):  # recall takes no turn before
        EngrainRetriever(engine=engine, user_id="ada").invoke(FOLLOW_UP, previous=EARLIER)


def test_with_memory_passes_the_human_turn_before_the_latest(engine: Engine) -> None:
    block = engine.context(FOLLOW_UP, user_id="ada", previous=EARLIER).text
    assert block != engine.context(FOLLOW_UP, user_id="ada").text and "PostgreSQL" in block
    chat = [HumanMessage(EARLIER), AIMessage("PostgreSQL, for invoicing."), HumanMessage(FOLLOW_UP)]
    assert with_memory(chat, engine, "ada") == [SystemMessage(block), *chat]
    # the assistant's answer is not the turn before: the user's earlier message is
    answered = [HumanMessage(EARLIER), AIMessage("Ada's cat is called Biscuit"), chat[-1]]
    assert with_memory(answered, engine, "ada")[0] == SystemMessage(block)


def test_with_memory_leaves_out_a_turn_before_too_long_to_search(tmp_path: Path) -> None:
    eng = Engine(settings=make_settings(tmp_path, max_text_chars=200),
                 store=SQLiteStore(tmp_path / "long.db"), embedder=HashEmbedder())  # fmt: skip
    try:
        for fact in FACTS:
            eng.remember(fact, user_id="ada", now=NOW)
        alone = eng.context(FOLLOW_UP, user_id="ada").text
        assert alone  # the message alone injects something, which the call must return
        chat = [HumanMessage(EARLIER + " " + "x" * 300), HumanMessage(FOLLOW_UP)]
        assert with_memory(chat, eng, "ada") == [SystemMessage(alone), *chat]
        with pytest.raises(InputTooLargeError):  # the message itself too long still fails
            with_memory([HumanMessage(EARLIER), HumanMessage("y" * 300)], eng, "ada")
    finally:
        eng.close()


def test_a_client_passes_the_turn_before_too(tmp_path: Path) -> None:
    from ..test_client import Served

    served = Served(tmp_path)
    try:
        for fact in FACTS:
            served.engine.remember(fact, user_id="alice", now=NOW)
        local = served.engine.context(FOLLOW_UP, user_id="alice", previous=EARLIER).text
        assert local != served.engine.context(FOLLOW_UP, user_id="alice").text
        chat = [HumanMessage(EARLIER), HumanMessage(FOLLOW_UP)]
        with served.client() as client:
            assert with_memory(chat, client, "alice") == [SystemMessage(local), *chat]
            docs = EngrainRetriever(engine=client, user_id="alice", mode="context").invoke(
                FOLLOW_UP, previous=EARLIER
            )
        assert [d.page_content for d in docs] == [FACTS[2]]
    finally:
        served.close()
