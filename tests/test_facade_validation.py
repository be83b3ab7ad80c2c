"""Every public Engine method validates all its arguments before any read or write: a bad
argument is a ValidationError naming the field, and the store is left as it was."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engrain import AsyncEngine, Engine
from engrain import engine as engine_module
from engrain.embed import Embedder, HashEmbedder
from engrain.errors import (
    ConfigError,
    EmbeddingError,
    EngrainError,
    NotFoundError,
    StoreError,
    ValidationError,
)
from engrain.store import MemoryStore, Store, open_store

from .conftest import NOW, make_settings


def _seeded(engine: Engine) -> str:
    return engine.remember("Ada deploys with Kubernetes on Fridays", "ada", now=NOW).memory_id or ""


def _snapshot(engine: Engine) -> list[dict[str, Any]]:
    return [m.to_dict() for m in engine.store.query("ada")]


BAD_CALLS = [
    ("top_k", lambda e, i: e.context("how do I deploy?", "ada", top_k=-1)),
    ("top_k", lambda e, i: e.context("how do I deploy?", "ada", top_k=0)),
    ("top_k", lambda e, i: e.recall("how do I deploy?", "ada", top_k=-1)),
    ("token_budget", lambda e, i: e.context("how do I deploy?", "ada", token_budget=1.5)),
    ("token_budget", lambda e, i: e.context("how do I deploy?", "ada", token_budget="100")),
    ("token_budget", lambda e, i: e.recall("how do I deploy?", "ada", token_budget=-1)),
    ("turn", lambda e, i: e.context("how do I deploy?", "ada", turn=-1)),
    ("memory_ids", lambda e, i: e.forget(None, "ada")),
    ("session_id", lambda e, i: e.remember("a new fact here", "ada", session_id=["s1"])),
    ("session_id", lambda e, i: e.list("ada", session_id=["s1"])),
    ("event_at", lambda e, i: e.remember("a new fact here", "ada", event_at="2024-01-01")),
    ("event_at", lambda e, i: e.update(i, "ada", event_at="2024-01-01")),
    ("domains", lambda e, i: e.ingest("a new fact about ports", "ada", domains=123)),
    ("user_id", lambda e, i: e.remember("a new fact here", "ada\ud800")),
    ("content", lambda e, i: e.remember("\x00\u200b\x07", "ada")),
    ("pinned", lambda e, i: e.pin(i, "ada", pinned="no")),
    ("muted", lambda e, i: e.update(i, "ada", muted=1)),
    ("importance", lambda e, i: e.update(i, "ada", importance=7)),
    ("now", lambda e, i: e.context("how do I deploy?", "ada", now="2024-01-01")),
    ("turns[0].at", lambda e, i: e.ingest_conversation([{"text": "hi", "at": 123}], "ada")),
    ("turns[0].at", lambda e, i: e.ingest_conversation([{"text": "hi", "at": "junk"}], "ada")),
    ("score", lambda e, i: e.feedback("ada", memory_ids=[i], score=2)),
    ("limit", lambda e, i: e.list("ada", limit=-1)),
    ("force", lambda e, i: e.compress("ada", force="yes")),
    # one integer bound on every surface (validate.MAX_INT; HTTP's schema says the same)
    ("token_budget", lambda e, i: e.context("how do I deploy?", "ada", token_budget=2**31)),
    ("top_k", lambda e, i: e.context("how do I deploy?", "ada", top_k=10**30)),
    ("context_window", lambda e, i: e.context("how do I deploy?", "ada", context_window=2**31)),
    ("turn", lambda e, i: e.context("how do I deploy?", "ada", turn=2**31)),
    ("top_k", lambda e, i: e.recall("how do I deploy?", "ada", top_k=2**31)),
    ("token_budget", lambda e, i: e.recall("how do I deploy?", "ada", token_budget=2**63)),
    ("limit", lambda e, i: e.list("ada", limit=2**63)),
    ("offset", lambda e, i: e.list("ada", offset=2**63)),
    ("limit", lambda e, i: e.browse("ada", limit=2**31)),
    ("limit", lambda e, i: e.contexts("ada", limit=2**31)),
    # metadata: a JSON object within max_text_chars, 64 deep, string keys, said where
    ("metadata", lambda e, i: e.remember("a new fact here", "ada", metadata={"x": "a" * 200_001})),
    ("metadata", lambda e, i: e.ingest("a new fact about ports", "ada", metadata=_deep(65))),
    ("metadata", lambda e, i: e.remember("a new fact here", "ada", metadata={1: "one"})),
    (
        "metadata.a[1]",
        lambda e, i: e.remember("a new fact here", "ada", metadata={"a": [1, float("nan")]}),
    ),
    (
        "metadata.b",
        lambda e, i: e.ingest_conversation([{"text": "hi there"}], "ada", metadata={"b": b"bytes"}),
    ),
    ("metadata", lambda e, i: e.update(i, "ada", metadata={"x": "a" * 200_001})),
    ("metadata", lambda e, i: e.update(i, "ada", metadata={"k": {True: 1}})),
    ("domains[0]", lambda e, i: e.remember("a new fact here", "ada", domains=["d" * 257])),
    # a number in [0, 1] given as an int too large for a float: OverflowError before (s24 h3)
    ("usefulness", lambda e, i: e.update(i, "ada", usefulness=10**400)),
    ("importance", lambda e, i: e.remember("a new fact here", "ada", importance=10**400)),
    ("confidence", lambda e, i: e.remember("a new fact here", "ada", confidence=-(10**400))),
    ("score", lambda e, i: e.feedback("ada", memory_ids=[i], score=10**400)),
]


def _deep(levels: int) -> dict[str, Any]:
    """A mapping nested ``levels`` deep: ``{"a": {"a": … {}}}``."""
    nested: dict[str, Any] = {}
    for _ in range(levels - 1):
        nested = {"a": nested}
    return nested


@pytest.mark.parametrize(("field", "call"), BAD_CALLS)
def test_bad_argument_names_its_field_and_writes_nothing(engine: Engine, field, call) -> None:  # type: ignore[no-untyped-def]
    memory_id = _seeded(engine)
    before = _snapshot(engine)
    with pytest.raises(ValidationError) as info:
        call(engine, memory_id)
    assert field in info.value.message
    assert _snapshot(engine) == before


def test_bad_import_record_is_named_and_nothing_is_written(mem_engine: Engine) -> None:
    good = {"type": "text", "user_id": "bob", "text": "Bob runs the billing service"}
    records = [
        good,
        {"type": "memory", "user_id": None, "content": None, "memory_type": "semantic",
         "kind": "fact", "created_at": NOW.isoformat()},
    ]  # fmt: skip
    with pytest.raises(ValidationError) as info:
        mem_engine.import_records(records)
    assert info.value.message.startswith("record 2:")
    assert mem_engine.store.users() == []


@pytest.mark.parametrize(
    ("field", "change"),
    [("pinned", {"pinned": "no"}), ("importance", {"importance": 7}),
     ("importance", {"importance": 10**400}), ("embedding", {"embedding": [10**400] * 8}),
     ("access_count", {"access_count": -5}), ("domains", {"domains": "abc"}),
     ("content", {"content": 42})],
)  # fmt: skip
def test_corrupt_memory_records_are_refused(mem_engine: Engine, field, change) -> None:  # type: ignore[no-untyped-def]
    memory_id = _seeded(mem_engine)
    record = next(mem_engine.export_records("ada"))
    mem_engine.forget(memory_id, "ada")
    with pytest.raises(ValidationError) as info:
        mem_engine.import_records([{**record, **change}])
    assert field in info.value.message
    with pytest.raises(NotFoundError):
        mem_engine.get(memory_id, "ada")


# -- every public method, any bad argument (hypothesis) ------------------------------------
#
# One call per example: a valid call of one public method (``GOOD``) with one argument
# replaced by a generated bad value (a wrong type, None, an empty, blank, huge, NUL or lone
# surrogate string, NaN, an infinity, a negative or huge number, a naive, far-future or
# extreme datetime, an unknown enum name, an id of another user, a list with one bad
# element). The call must succeed or raise an EngrainError, a ValidationError naming the
# argument; a refused call leaves the whole store's export as it was, and no call made
# for ada changes bob's memories. Sync and async alike (session 24, h3).

ADA_TEXT = "Ada deploys the billing service with Kubernetes on Fridays"
BOB_TEXT = "Bob keeps his notes in org-mode"


@dataclass
class Seeded:
    """An engine with memories of ada and bob, a recorded context of ada's, the ids."""

    engine: Engine
    ada: str
    ada2: str
    bob: str
    context_id: str


def _seed(tmp: Path) -> Seeded:
    settings = make_settings(tmp, auto_compress=False, max_text_chars=2_000)
    engine = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
    ada = engine.remember(ADA_TEXT, "ada", "decision", project="billing", now=NOW).memory_id
    ada2 = engine.remember("Ada prefers tabs over spaces", "ada", "preference", now=NOW).memory_id
    bob = engine.remember(BOB_TEXT, "bob", "preference", now=NOW).memory_id
    block = engine.context("how does Ada deploy billing?", "ada", now=NOW)
    engine.wait()
    assert ada and ada2 and bob and block.context_id
    return Seeded(engine, ada, ada2, bob, block.context_id)


def _good_calls(s: Seeded) -> dict[str, dict[str, Any]]:
    """A valid call of every public method: its arguments by name (``**changes`` of
    ``update`` as ``content``)."""
    turns = [{"speaker": "ada", "text": "We ship on Fridays", "turn_id": "t1", "at": NOW}]
    return {
        "ingest": {"text": "Ada's pager rota changes on Mondays", "user_id": "ada",
                   "session_id": "s1", "memory_type_hint": "semantic", "project": "billing",
                   "domains": ["ops"], "event_at": NOW, "metadata": {"source": "test"},
                   "now": NOW},
        "ingest_conversation": {"turns": turns, "user_id": "ada", "session_id": "s2",
                                "project": "billing", "domains": ["ops"],
                                "memory_type_hint": "episodic", "metadata": {"a": 1},
                                "now": NOW},
        "ingest_conversations": {"sessions": [{"turns": turns, "user_id": "ada",
                                               "session_id": "s3"}]},
        "remember": {"content": "Ada's staging database is called mercury", "user_id": "ada",
                     "kind": "fact", "memory_type": "semantic", "project": "billing",
                     "domains": ["db"], "key": None, "confidence": 0.9, "importance": 0.8,
                     "pinned": False, "muted": False, "access_count": 0, "session_id": "s1",
                     "event_at": NOW, "corrects": None, "metadata": {"k": "v"}, "now": NOW},
        "compress": {"user_id": "ada", "force": False, "now": NOW},
        "feedback": {"user_id": "ada", "context_id": s.context_id, "memory_ids": None,
                     "helpful": True, "score": None},
        "recall": {"query": "how does Ada deploy?", "user_id": "ada", "top_k": 3,
                   "token_budget": 500, "memory_types": ["semantic"], "project": "billing",
                   "include_compressed": False, "now": NOW},
        "context": {"message": "how does Ada deploy billing?", "user_id": "ada",
                    "token_budget": 500, "top_k": 5, "memory_types": ["semantic"],
                    "project": "billing", "include_compressed": False, "turn": 0,
                    "model": None, "context_window": None, "now": NOW,
                    "previous": "we talked about billing"},
        "explain": {"message": "how does Ada deploy billing?", "user_id": "ada",
                    "token_budget": 500, "project": "billing", "now": NOW},
        "preview": {"message": "how does Ada deploy billing?", "user_id": "ada",
                    "token_budget": 500, "project": "billing", "now": NOW},
        "tiers": {"user_id": "ada", "project": "billing", "rebuild": False},
        "get": {"memory_id": s.ada, "user_id": "ada"},
        "list": {"user_id": "ada", "project": "billing", "memory_type": "semantic",
                 "kind": "decision", "session_id": None, "include_compressed": True,
                 "limit": 10, "offset": 0},
        "update": {"memory_id": s.ada, "user_id": "ada", "now": NOW,
                   "content": "Ada deploys billing with Kubernetes on Thursdays"},
        "pin": {"memory_id": s.ada, "user_id": "ada", "pinned": True, "now": NOW},
        "mute": {"memory_id": s.ada, "user_id": "ada", "muted": False, "now": NOW},
        "forget": {"memory_ids": [s.ada2], "user_id": "ada"},
        "browse": {"user_id": "ada", "text": "deploy", "memory_types": ["semantic"],
                   "kinds": ["decision"], "domain": None, "project": "billing",
                   "pinned": None, "muted": None, "superseded": None, "conflicting": None,
                   "sort": "relevance", "limit": 10, "cursor": None, "projects": None},
        "relations": {"memory_id": s.ada, "user_id": "ada"},
        "review": {"user_id": "ada", "project": None, "limit": 10},
        "resolve": {"memory_id": s.ada, "other_id": s.ada2, "user_id": "ada",
                    "resolution": "both", "now": NOW},
        "contexts": {"user_id": "ada", "project": None, "limit": 5},
        "export_records": {"user_id": "ada"},
        "import_records": {"records": [{"type": "text", "user_id": "ada",
                                        "text": "Ada's laptop is a ThinkPad"}], "now": NOW},
    }  # fmt: skip


#: ``update``'s ``**changes``: each field a bad value may land in (and a misspelt one).
UPDATE_FIELDS = ("content", "kind", "memory_type", "domains", "importance", "confidence",
                 "usefulness", "pinned", "muted", "event_at", "key", "project", "metadata",
                 "pinnned")  # fmt: skip

_HUGE = "x" * 2_001  # past the engine's max_text_chars (2,000 here)
bad_scalars = st.sampled_from([
    None, 0, -1, 1.5, -0.5, 2**31, 2**63, 10**5_000, True, False,
    float("nan"), float("inf"), float("-inf"),
    "", "   ", "\u200b", _HUGE, "\x00", "a\x00b", "\ud800", "a\udfff", "bogus", "FACT", " fact",
    "d" * 300, b"bytes", bytearray(b"x"), object(), {"a": 1}, [], [None], ["ok", None],
    ["ok", ""], ["ok", "\ud800"], ["fact", "bogus"], [1, 2], {"text": "x"}, ("a",),
    {1: "one"}, {"k": float("nan")}, {"k": {"k": {"k": b"x"}}}, iter(["x"]),
    datetime(2026, 1, 1), datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
    datetime.max, datetime.min, datetime(1, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00",
])  # fmt: skip


def _bad_value(draw: st.DrawFn, s: Seeded, good: object) -> object:
    """A bad value: a junk scalar, an id of another user, or a good list with one bad
    element."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return s.bob  # a memory id of another user (or a user id that has no memories)
    if choice == 1 and isinstance(good, list) and good:
        position = draw(st.integers(0, len(good)))
        return [*good[:position], draw(bad_scalars), *good[position:]]
    return draw(bad_scalars)


def _export(engine: Engine) -> str:
    return json.dumps(list(engine.export_records()), sort_keys=True, default=str)


def _bob(engine: Engine) -> str:
    return json.dumps(list(engine.export_records("bob")), sort_keys=True, default=str)


def _names_the_argument(message: str, argument: str) -> bool:
    """Whether a refusal names the argument it is about: its name (``memory_ids[1]``,
    ``sessions[0].turns``, ``record 1``'s field), or for ``**changes`` the field."""
    names = {argument, "record", "sessions", "turns", "changes", "field"}
    return any(name in message for name in names)


def _call(engine: Engine, mode: str, method: str, kwargs: dict[str, Any]) -> object:
    if mode == "sync":
        result = getattr(engine, method)(**kwargs)
        return list(result) if method == "export_records" else result
    runner = AsyncEngine.__new__(AsyncEngine)  # the twin over the same engine
    runner.sync = engine
    return asyncio.run(getattr(runner, method)(**kwargs))


#: Every public method of Engine (and so of AsyncEngine) but ``close``, ``wait`` and
#: ``users``, which take no argument to get wrong.
METHODS = sorted(
    name for name in dir(Engine)
    if not name.startswith("_") and callable(getattr(Engine, name))
    and name not in ("close", "wait", "users")
)  # fmt: skip


def test_the_sweep_calls_every_public_method(tmp_path: Path) -> None:
    """The templates name every public method, and each is a valid call."""
    for method in METHODS:
        s = _seed(tmp_path / method)
        assert sorted(_good_calls(s)) == METHODS
        _call(s.engine, "sync", method, _good_calls(s)[method])
        s.engine.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("method", METHODS)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_bad_argument_of_any_method_is_refused_cleanly(
    mode: str, method: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    s = _seed(tmp_path_factory.mktemp("bad"))
    kwargs = dict(_good_calls(s)[method])
    arguments = sorted({*kwargs, *(UPDATE_FIELDS if method == "update" else ())})
    argument = data.draw(st.sampled_from(arguments), label="argument")
    kwargs[argument] = data.draw(st.composite(_bad_value)(s, kwargs.get(argument)), label="value")
    before, bobs = _export(s.engine), _bob(s.engine)
    try:
        _call(s.engine, mode, method, kwargs)
    except EngrainError as error:
        if isinstance(error, ValidationError):
            assert _names_the_argument(error.message, argument), (method, argument, error)
        s.engine.wait()
        assert _export(s.engine) == before, (method, argument, "a refused call wrote")
    s.engine.wait()
    if method not in ("import_records", "ingest_conversations"):  # these name their users
        assert _bob(s.engine) == bobs, (method, argument, "a call for ada changed bob's")
    s.engine.close()


def test_a_user_id_warning_names_the_callers_line(tmp_path: Path) -> None:
    """A user id with surrounding whitespace warns at the line that called the engine,
    however deep the check runs (the method's gate, ``lifecycle.admitted``, included)."""
    from engrain.validate import UserIdWarning

    # no background compression: its job checks the id again, on its own thread
    settings = make_settings(tmp_path, auto_compress=False)
    engine = Engine(settings=settings, store=MemoryStore(), embedder=HashEmbedder())
    calls = {
        "remember": lambda: engine.remember("tabs over spaces", " ada"),
        "context": lambda: engine.context("tabs?", " ada"),
        "list": lambda: engine.list(" ada"),
        "ingest_conversation": lambda: engine.ingest_conversation(
            [{"speaker": "u", "text": "hello there"}], " ada"
        ),
    }
    for name, call in calls.items():
        with pytest.warns(UserIdWarning) as caught:
            call()
        assert {Path(w.filename).name for w in caught} == {Path(__file__).name}, name
    engine.close()


def test_an_engine_with_a_bad_setting_opens_no_store(tmp_path: Path) -> None:
    """``llm_url`` without ``llm_model`` was refused after the store was opened: the SQLite
    file created and migrated (a PostgreSQL store's pool left running) by a constructor
    that raised."""
    path = tmp_path / "never.db"
    settings = make_settings(tmp_path, llm_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="llm_model"):
        Engine(f"sqlite:///{path}", settings=settings)
    assert not path.exists()


def test_an_engine_whose_embedder_fails_closes_the_store_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Store] = []

    def kept(url: str) -> Store:
        opened.append(open_store(url))
        return opened[-1]

    def no_model(*args: object, **kwargs: object) -> Embedder:
        raise EmbeddingError("the model's files cannot be read")

    monkeypatch.setattr(engine_module, "open_store", kept)
    monkeypatch.setattr(engine_module, "make_embedder", no_model)
    with pytest.raises(EmbeddingError):
        Engine(f"sqlite:///{tmp_path / 'e.db'}", settings=make_settings(tmp_path))
    with pytest.raises(StoreError, match="closed"):  # closed, not left open with its threads
        opened[0].query("ada")
