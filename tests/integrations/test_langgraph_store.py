"""The LangGraph store over engrain.

Neither ``langgraph`` nor ``langchain-tests`` ships a standard suite for LangGraph's
``BaseStore`` (``langchain_tests.integration_tests.base_store`` tests LangChain's other
``BaseStore``, the ``mget``/``mset`` key-value interface, which ``EngrainStore`` is not).
So the reference here is LangGraph's own ``InMemoryStore``: random sequences of puts and
deletes run on both, and every read (``get``, ``search`` with filters and pages,
``list_namespaces`` with prefixes, suffixes, wildcards, depth and pages) must agree. Then
what only engrain does: semantic search through ``recall``, replacement keeping
``created_at``, items as the user's memories, async twins, errors that write nothing, and
the LangGraph agent example remembering across threads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from engrain import Engine
from engrain.aio import AsyncEngine
from engrain.embed import HashEmbedder
from engrain.errors import ValidationError
from engrain.integrations.langchain import EngrainStore
from engrain.integrations.langchain.store import METADATA_KEY, memory_id
from engrain.store import MemoryStore
from engrain.store.sqlite import SQLiteStore

from ..conftest import make_settings


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(settings=make_settings(tmp_path), store=SQLiteStore(tmp_path / "lg.db"),
                 embedder=HashEmbedder())  # fmt: skip
    yield eng
    eng.close()


@pytest.fixture
def store(engine: Engine) -> EngrainStore:
    return EngrainStore(engine)


# -- agreement with LangGraph's InMemoryStore ---------------------------------------------------

NAMESPACES = [("ada",), ("ada", "memories"), ("ada", "memories", "work"), ("ada", "notes"),
              ("bob", "memories"), ("bob", "memories", "work")]  # fmt: skip
KEYS = ["k1", "k2", "k3"]
VALUES = st.fixed_dictionaries(
    {"content": st.sampled_from(["tabs not spaces", "a cat named Biscuit", "tea, no sugar"]),
     "n": st.integers(0, 3), "tag": st.sampled_from(["a", "b"])}
)  # fmt: skip
WRITES = st.lists(
    st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KEYS), st.none() | VALUES),
    min_size=1, max_size=8,
)  # fmt: skip


LISTINGS: list[dict[str, Any]] = [
    {}, {"prefix": ("ada",)}, {"suffix": ("work",)}, {"prefix": ("*", "memories")},
    {"max_depth": 2}, {"prefix": ("ada",), "max_depth": 1}, {"limit": 2, "offset": 1},
]  # fmt: skip


def plain(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """Items without their times and scores (the two stores stamp their own), sorted."""
    return sorted((tuple(i.namespace), i.key, i.value) for i in items)


def agree(ours: BaseStore, reference: BaseStore) -> None:
    """Every read of ``ours`` gives what LangGraph's InMemoryStore gives."""
    for ns in NAMESPACES:
        for key in KEYS:
            mine, theirs = ours.get(ns, key), reference.get(ns, key)
            assert (mine and (mine.namespace, mine.key, mine.value)) == (
                theirs and (theirs.namespace, theirs.key, theirs.value)
            )
    for prefix in [("ada",), ("ada", "memories"), ("bob",), ("carol",)]:
        for flt in [None, {"tag": "a"}, {"n": {"$gte": 2}}, {"n": {"$ne": 1}, "tag": "b"}]:
            every = ours.search(prefix, filter=flt, limit=100)
            assert plain(every) == plain(reference.search(prefix, filter=flt, limit=100))
            pages = [ours.search(prefix, filter=flt, limit=2, offset=o) for o in (0, 2, 4, 6)]
            assert plain([i for page in pages for i in page]) == plain(every)
    # InMemoryStore lists a namespace still after its last item is deleted (or merely read:
    # a defaultdict); like LangGraph's PostgresStore, engrain lists namespaces holding items.
    # So namespaces are compared with a fresh InMemoryStore holding the same items.
    live = InMemoryStore()
    for item in reference.search((), limit=1000):
        live.put(item.namespace, item.key, item.value)
    for kwargs in LISTINGS:
        assert ours.list_namespaces(**kwargs) == live.list_namespaces(**kwargs)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(batches=st.lists(WRITES, min_size=1, max_size=3))
def test_reads_agree_with_langgraphs_in_memory_store(
    tmp_path: Path, batches: list[list[tuple[tuple[str, ...], str, dict[str, Any] | None]]]
) -> None:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    ours, reference = EngrainStore(engine), InMemoryStore()
    for batch in batches:  # one batch = one call: the last write of a key wins
        ops = [PutOp(ns, key, value) for ns, key, value in batch]
        assert ours.batch(ops) == reference.batch(ops)
        agree(ours, reference)


# -- what engrain adds ---------------------------------------------------------------------------


def test_query_search_ranks_by_recall_and_scores(store: EngrainStore) -> None:
    ns = ("ada", "memories")
    store.put(ns, "indent", {"content": "Ada indents Python code with tabs"})
    store.put(ns, "cat", {"content": "Ada's cat Biscuit sleeps on the keyboard"})
    store.put(ns, "quiet", {"content": "Biscuit the cat is secret"}, index=False)
    found = store.search(ns, query="where does the cat Biscuit sleep?")
    assert [i.key for i in found] == ["cat", "indent", "quiet"]  # muted: unranked, last
    scores = [i.score for i in found]
    assert scores[0] is not None and scores[1] is not None and scores[0] > scores[1]
    assert scores[2] is None
    assert [i.key for i in store.search(ns, query="where does the cat sleep?", limit=1)] == ["cat"]


def test_a_put_with_the_same_key_replaces_and_keeps_created_at(
    store: EngrainStore, engine: Engine
) -> None:
    ns = ("ada", "memories")
    store.put(ns, "seat", {"content": "Ada takes the aisle seat"})
    first = store.get(ns, "seat")
    store.put(ns, "seat", {"content": "Ada takes the window seat"})
    second = store.get(ns, "seat")
    assert first is not None and second is not None
    assert second.value == {"content": "Ada takes the window seat"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert [m.content for m in engine.list("ada")] == ["Ada takes the window seat"]


def test_same_text_under_two_keys_stays_two_items(store: EngrainStore, engine: Engine) -> None:
    ns = ("ada", "memories")
    store.put(ns, "a", {"content": "Ada likes tea"})
    store.put(ns, "b", {"content": "Ada likes tea"})  # remember() would merge these
    assert {i.key for i in store.search(ns)} == {"a", "b"} and len(engine.list("ada")) == 2


def test_items_are_the_users_memories(store: EngrainStore, engine: Engine) -> None:
    store.put(("ada", "travel"), "seat", {"content": "Ada always books a window seat"})
    memory = engine.get(memory_id(("ada", "travel"), "seat"), "ada")
    assert (memory.user_id, memory.project, memory.kind.value) == ("ada", "travel", "fact")
    assert memory.provenance.metadata[METADATA_KEY]["key"] == "seat"
    assert "window seat" in engine.context("Which seat should I book, window?", user_id="ada").text
    assert engine.context("Which seat should I book, window?", user_id="bob").text == ""
    assert store.search(("bob",), query="window seat") == []


def test_index_names_the_text_engrain_embeds(engine: Engine) -> None:
    store = EngrainStore(engine, index=["profile.summary"])
    value = {"profile": {"summary": "Ada writes Rust"}, "note": "ignored"}
    store.put(("ada",), "p", value)
    store.put(("ada",), "q", value, index=["note"])
    store.put(("ada",), "r", {"age": 36})
    texts = {k: engine.get(memory_id(("ada",), k), "ada").content for k in "pqr"}
    assert texts == {"p": "Ada writes Rust", "q": "ignored", "r": '{"age": 36}'}


def test_index_false_is_stored_muted_and_never_injected(
    store: EngrainStore, engine: Engine
) -> None:
    store.put(("ada",), "secret", {"content": "Ada's locker code is 4411"}, index=False)
    assert engine.get(memory_id(("ada",), "secret"), "ada").muted
    assert "4411" not in engine.context("What is Ada's locker code?", user_id="ada").text
    assert store.get(("ada",), "secret") is not None


def test_reads_in_a_batch_see_the_store_before_its_writes(store: EngrainStore) -> None:
    ns = ("ada",)
    results = store.batch([PutOp(ns, "k", {"content": "one"}), GetOp(ns, "k"),
                           PutOp(ns, "k", {"content": "two"}), SearchOp(ns)])  # fmt: skip
    assert results == [None, None, None, []]
    item = store.get(ns, "k")
    assert item is not None and item.value == {"content": "two"}


def test_delete_forgets_the_memory(store: EngrainStore, engine: Engine) -> None:
    store.put(("ada",), "k", {"content": "Ada likes tea"})
    store.delete(("ada",), "k")
    store.delete(("ada",), "never-there")
    assert store.get(("ada",), "k") is None and engine.list("ada") == []


def test_async_twins_give_what_sync_gives(store: EngrainStore) -> None:
    ns = ("ada", "memories")

    async def run() -> tuple[Any, ...]:
        await store.aput(ns, "tea", {"content": "Ada drinks green tea", "n": 2})
        await store.aput(ns, "cat", {"content": "Ada's cat is Biscuit", "n": 1})
        got = await store.aget(ns, "tea")
        found = await store.asearch(ns, query="green tea", filter={"n": {"$gt": 1}})
        names = await store.alist_namespaces(prefix=("ada",))
        await store.adelete(ns, "cat")
        return got, found, names, await store.aget(ns, "cat")

    got, found, names, gone = asyncio.run(run())
    assert got == store.get(ns, "tea")
    assert [(i.key, i.score) for i in found] == [
        (i.key, i.score) for i in store.search(ns, query="green tea", filter={"n": {"$gt": 1}})
    ]
    assert names == store.list_namespaces(prefix=("ada",)) == [ns] and gone is None


def test_an_async_engine_works_too(tmp_path: Path) -> None:
    aengine = AsyncEngine(settings=make_settings(tmp_path), store=MemoryStore(),
                          embedder=HashEmbedder())  # fmt: skip
    store = EngrainStore(aengine)
    asyncio.run(store.aput(("ada",), "k", {"content": "Ada likes tea"}))
    assert asyncio.run(aengine.list("ada"))[0].content == "Ada likes tea"


def test_bad_input_raises_and_writes_nothing(store: EngrainStore, engine: Engine) -> None:
    ns = ("ada",)
    with pytest.raises(ValidationError):
        store.batch([PutOp(ns, "ok", {"content": "fine"}), PutOp(ns, "bad", {"when": object()})])
    with pytest.raises(ValidationError):
        store.batch([PutOp(ns, "ok", {"content": "fine"}), PutOp(ns, "t", {"a": 1}, ttl=5.0)])
    with pytest.raises(ValidationError):
        store.search(ns, filter={"n": {"$regex": "x"}})
    with pytest.raises(NotImplementedError):  # LangGraph's own check: this store has no TTL
        store.put(ns, "t", {"a": 1}, ttl=5.0)
    with pytest.raises(ValidationError):
        EngrainStore(engine, index="content")  # type: ignore[arg-type]
    assert engine.list("ada") == []


# -- the example ---------------------------------------------------------------------------------


def test_the_langgraph_agent_remembers_across_threads(engine: Engine) -> None:
    from examples.langgraph_agent import PromptRecorder, build_agent, conversation, fake_model

    agent = build_agent(engine, fake_model(["Noted!", "A window seat.", "Hello again."]))
    recorder = PromptRecorder()
    said = ["Remember that I always take a window seat when I fly"]
    assert list(conversation(agent, "ada", "t1", said, recorder)) == ["Noted!"]
    asked = ["Which seat should I book for my flight to Lisbon?"]
    assert list(conversation(agent, "ada", "t2", asked, recorder)) == ["A window seat."]
    second = recorder.prompts[-1]
    assert [m.type for m in second] == ["system", "human"]  # a new thread: no old messages
    assert "I always take a window seat when I fly" in second[0].text
    list(conversation(agent, "bob", "t3", asked, recorder))
    assert recorder.prompts[-1][0].text == "You know nothing about the user yet."


def test_a_query_search_is_not_crowded_out_by_the_users_other_memories(
    store: EngrainStore, engine: Engine
) -> None:
    for i in range(30):  # the project also holds memories the store did not write
        engine.remember(f"Ada's cat Biscuit chased laser dot number {i}", user_id="ada",
                        project="memories")  # fmt: skip
    ns = ("ada", "memories", "agent")
    store.put(ns, "cat", {"content": "Ada's cat Biscuit sleeps on the keyboard"})
    store.put(ns, "tea", {"content": "Ada drinks green tea"})
    found = store.search(ns, query="cat Biscuit chased laser dot", limit=1)
    assert [i.key for i in found] == ["cat"] and found[0].score is not None
    found = store.search(ns, query="cat Biscuit chased laser dot", limit=2, offset=1)
    assert [i.key for i in found] == ["tea"] and found[0].score is not None


@pytest.mark.model
def test_the_example_runs_with_the_real_model(tmp_path: Path) -> None:
    from examples.langgraph_agent import run

    settings = make_settings(tmp_path, embedder="minilm")
    with Engine(f"sqlite:///{tmp_path / 'agent.db'}", settings=settings) as engine:
        system = run(engine)
    assert system == "What you know about the user:\n- I always take a window seat when I fly"


def test_a_bad_delete_in_a_batch_stops_its_puts_too(store: EngrainStore, engine: Engine) -> None:
    with pytest.raises(ValidationError):
        store.batch([PutOp(("ada",), "ok", {"content": "fine"}), PutOp(("x" * 300,), "k", None)])
    assert engine.list("ada") == []
