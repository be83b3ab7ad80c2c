"""Every public Engine method validates all its arguments before any read or write: a bad
argument is a ValidationError naming the field, and the store is left as it was."""

from __future__ import annotations

from typing import Any

import pytest

from engrain import Engine
from engrain.errors import NotFoundError, ValidationError

from .conftest import NOW


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
