"""``Store.record_uses``: a ``context()``'s counted uses and its record in one transaction,
the same behaviour on every backend (the ``store`` fixture of the contract suite: memory,
SQLite, PostgreSQL, Chroma embedded and over HTTP)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engrain.errors import ValidationError
from engrain.store import State, Store

from .conftest import NOW
from .test_store_contract import mem, store  # noqa: F401  (the contract's fixture)

LATER = NOW + timedelta(minutes=5)


def _counts(store: Store, user: str, ids: list[str]) -> dict[str, int]:  # noqa: F811
    return {m.id: m.access_count for m in store.get(user, ids)}


def test_record_uses_counts_and_writes_the_record(store: Store) -> None:  # noqa: F811
    store.write([mem("a"), mem("b"), mem("c"), mem("x", "bob")])
    revision = store.revision("alice")
    record = State("alice", "contexts", "ctx1", {"ids": ["a", "b"], "at": "now"})
    store.record_uses("alice", ["a", "b", "a", "gone"], LATER, [record])
    assert _counts(store, "alice", ["a", "b", "c"]) == {"a": 2, "b": 1, "c": 0}
    assert {m.id: m.last_accessed_at for m in store.get("alice", ["a", "c"])} == {
        "a": LATER,
        "c": None,
    }
    assert store.get_state("alice", "contexts", "ctx1") == {"ids": ["a", "b"], "at": "now"}
    assert store.revision("alice") == revision  # counting changes no revision
    assert _counts(store, "bob", ["x"]) == {"x": 0}  # another user's same id is not counted
    assert "gone" not in {m.id for m in store.query("alice")}  # not brought into being


def test_record_uses_with_ids_only_or_state_only(store: Store) -> None:  # noqa: F811
    store.write([mem("a")])
    store.record_uses("alice", ["a"], NOW)
    assert _counts(store, "alice", ["a"]) == {"a": 1}
    store.record_uses("alice", [], NOW, [State("alice", "contexts", "c2", {"n": 1})])
    assert store.get_state("alice", "contexts", "c2") == {"n": 1}
    assert _counts(store, "alice", ["a"]) == {"a": 1}
    # a None value deletes, as in write()
    store.record_uses("alice", ["a"], NOW, [State("alice", "contexts", "c2", None)])
    assert store.get_state("alice", "contexts", "c2") is None
    assert _counts(store, "alice", ["a"]) == {"a": 2}
    store.record_uses("alice", [], NOW)  # nothing to do
    assert _counts(store, "alice", ["a"]) == {"a": 2}


def test_record_uses_with_a_bad_document_counts_nothing(store: Store) -> None:  # noqa: F811
    store.write([mem("a"), mem("b")])
    good = State("alice", "contexts", "ok", {"n": 1})
    bad = State("alice", "contexts", "bad", {"at": object()})
    with pytest.raises(ValidationError):
        store.record_uses("alice", ["a", "b"], NOW, [good, bad])
    assert _counts(store, "alice", ["a", "b"]) == {"a": 0, "b": 0}
    assert store.get_state("alice", "contexts", "ok") is None
    assert store.states("alice") == []
