"""The store contract: one test body per behaviour, run against every backend.

The ``store`` fixture (conftest) is parametrized over the in-memory, SQLite and PostgreSQL
stores; this file widens it to Chroma, embedded and over HTTP (a server the session starts,
``tests/chroma.py``). A new backend passes this file before it ships.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from engrain.errors import KeyChangedError, ValidationError
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, content_hash
from engrain.store import ALL, KeyClaim, MemoryFilter, MemoryStore, Patch, State, Store, open_store
from engrain.store.base import KeyRecord, Toward
from engrain.store.cache import UserCache
from engrain.store.sqlite import SQLiteStore
from engrain.tokens import spaced_count

from .conftest import NOW

BACKENDS = ["memory", "sqlite", "postgres", "chroma", "chroma+http"]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """conftest's backends (built the same way), and Chroma embedded (``chroma://``) and
    over HTTP on the session's server."""
    backend: Store
    if request.param == "memory":
        backend = MemoryStore()
    elif request.param == "sqlite":
        backend = SQLiteStore(tmp_path / "t.db")
    elif request.param == "postgres":
        from engrain.store.postgres import PostgresStore

        backend = PostgresStore(request.getfixturevalue("pg_url"), pool_size=2)
    else:
        pytest.importorskip("chromadb")
        if request.param == "chroma":
            url = f"chroma://{tmp_path / 'chroma'}"
        else:
            url = request.getfixturevalue("chroma_http_url")
        backend = open_store(url)
    yield backend
    backend.close()


def unit(*xs: float) -> Vector:
    """A unit vector: stores rank by dot product, which is cosine for embedder output."""
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def mem(
    memory_id: str,
    user_id: str = "alice",
    *,
    minutes: int = 0,
    vector: Sequence[float] | None = (1.0, 0.0, 0.0, 0.0),
    **fields: Any,
) -> Memory:
    """A memory updated ``minutes`` after NOW, with a unit embedding (or none)."""
    at = NOW + timedelta(minutes=minutes)
    content = fields.pop("content", f"memory {memory_id} of {user_id}")
    return Memory(
        id=memory_id,
        user_id=user_id,
        content=content,
        memory_type=fields.pop("memory_type", MemoryType.SEMANTIC),
        kind=fields.pop("kind", Kind.FACT),
        created_at=fields.pop("created_at", at),
        updated_at=fields.pop("updated_at", at),
        content_hash=content_hash(content),
        embedding=None if vector is None else unit(*vector),
        **fields,
    )


def assert_same(
    actual: Sequence[Memory], expected: Sequence[Memory], *, stored: bool = True
) -> None:
    """Same memories in the same order, embeddings included (``==`` skips them); with
    ``stored`` (memories read back from a store), each with the count of its content kept
    with its row (``content_tokens``: the store counts it when the memory written carries
    none)."""
    assert [m.id for m in actual] == [m.id for m in expected]
    for got, want in zip(actual, expected, strict=True):
        for f in dataclasses.fields(Memory):
            if f.name not in ("embedding", "content_tokens"):
                assert getattr(got, f.name) == getattr(want, f.name), f.name
        if stored:
            assert got.content_tokens == spaced_count(got.content)
        assert want.content_tokens in (None, got.content_tokens)
        if want.embedding is None:
            assert got.embedding is None
        else:
            assert got.embedding is not None
            assert got.embedding.dtype == np.float32
            np.testing.assert_array_equal(got.embedding, want.embedding)


def ids(memories: Sequence[Memory]) -> list[str]:
    return [m.id for m in memories]


def centroid_of(store: Store, user_id: str) -> Vector:
    centroid = store.centroid(user_id)
    assert centroid is not None
    return centroid


def snapshot(store: Store) -> dict[str, Any]:
    """Everything a caller can observe, for "nothing changed" assertions."""
    state: dict[str, Any] = {"users": store.users()}
    for user in state["users"]:
        rows = store.query(user)
        state[user] = [
            (m.to_dict(), None if m.embedding is None else m.embedding.tolist()) for m in rows
        ]
        found = store.search(user, unit(1, 0, 0, 0), 100)
        state[f"{user}/search"] = [(m.id, round(s, 6)) for m, s in found]
    return state


# -- write / get ----------------------------------------------------------------------------


def test_round_trip_keeps_every_field(store: Store) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    full = Memory(
        id="full",
        user_id="alice",
        content="Uses tabs, never spaces — café ☕",
        memory_type=MemoryType.PROCEDURAL,
        kind=Kind.PREFERENCE,
        created_at=datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=ist),
        updated_at=NOW + timedelta(microseconds=7),
        project="engrain",
        domains=("python", "style"),
        session_id="s-1",
        event_at=datetime(2024, 12, 31, 23, 59, 59, tzinfo=timezone.utc),  # noqa: UP017
        key="indent",
        importance=0.8125,
        confidence=0.9,
        usefulness=0.123456789,
        access_count=7,
        last_accessed_at=NOW - timedelta(days=2),
        pinned=True,
        muted=True,
        promoted_at=NOW - timedelta(hours=1),
        compressed=True,
        compression_source=True,
        source_session_id="s-0",
        superseded_by="newer",
        provenance=Provenance(
            turn_ids=("t1", "t2"),
            metadata={"source": "chat", "n": 3, "score": 0.5, "tags": ["a", "b"], "x": None},
        ),
        content_hash=content_hash("Uses tabs, never spaces — café ☕"),
        embedding=unit(0.1, -0.2, 0.3, 0.9),
    )
    bare = mem("bare", vector=None)
    store.write([full, bare])

    got_full, got_bare = store.get("alice", ["full", "bare"])

    assert_same([got_full, got_bare], [full, bare])
    assert got_full.created_at.utcoffset() is not None
    assert isinstance(got_full.domains, tuple)
    assert isinstance(got_full.provenance.turn_ids, tuple)
    assert got_bare.project is None and got_bare.event_at is None and got_bare.key is None
    assert got_bare.provenance == Provenance()


def test_upsert_replaces_by_id(store: Store) -> None:
    original = mem("a", content="first", importance=0.2)
    store.write([original])
    changed = original.evolve(
        content="second", importance=0.9, updated_at=NOW + timedelta(hours=1),
        embedding=unit(0, 1, 0, 0),
    )  # fmt: skip

    store.write([changed])

    assert_same(store.query("alice"), [changed])
    assert_same(store.get("alice", ["a"]), [changed])
    ((hit, score),) = store.search("alice", unit(0, 1, 0, 0), 5)
    assert hit.content == "second" and score == pytest.approx(1.0)


def test_same_id_for_two_users_are_two_memories(store: Store) -> None:
    store.write([mem("x", "alice", content="alice's")])

    store.write([mem("x", "bob", content="bob's")])

    assert [m.content for m in store.get("alice", ["x"])] == ["alice's"]
    assert [m.content for m in store.get("bob", ["x"])] == ["bob's"]


def test_delete_removes_only_the_named_memories(store: Store) -> None:
    a, b, c = mem("a", minutes=1), mem("b", minutes=2), mem("c", minutes=3)
    store.write([a, b, c])

    store.write(deletes=[b, mem("never-written")])

    assert ids(store.query("alice")) == ["c", "a"]
    assert store.get("alice", ["b"]) == []
    assert {m.id for m, _ in store.search("alice", unit(1, 0, 0, 0), 10)} == {"a", "c"}


def test_delete_is_scoped_to_the_memorys_user(store: Store) -> None:
    store.write([mem("a", "alice")])

    store.write(deletes=[mem("a", "bob")])

    assert ids(store.get("alice", ["a"])) == ["a"]


def test_upsert_and_delete_in_one_write(store: Store) -> None:
    old = mem("old")
    store.write([old])

    store.write(upserts=[mem("new")], deletes=[old])

    assert ids(store.query("alice")) == ["new"]


def test_empty_write_changes_nothing(store: Store) -> None:
    store.write()
    assert store.users() == []


def test_get_keeps_requested_order_and_skips_unknown_ids(store: Store) -> None:
    store.write([mem("a", minutes=1), mem("b", minutes=2), mem("c", minutes=3)])

    assert ids(store.get("alice", ["c", "nope", "a", "b"])) == ["c", "a", "b"]
    assert store.get("alice", []) == []
    assert store.get("nobody", ["a"]) == []


def test_get_many_ids(store: Store) -> None:
    many = [mem(f"m{i:04d}", vector=None) for i in range(1200)]
    store.write(many)

    wanted = [m.id for m in reversed(many)]
    assert ids(store.get("alice", wanted)) == wanted


# -- query ----------------------------------------------------------------------------------


def _filter_dataset() -> list[Memory]:
    return [
        mem("a", minutes=1, project="p1", session_id="s1", importance=0.9),
        mem("b", minutes=2, project="p2", session_id="s2", importance=0.3,
            memory_type=MemoryType.EPISODIC, kind=Kind.EVENT),
        mem("c", minutes=3, project="p1", key="editor", importance=0.6, muted=True,
            memory_type=MemoryType.PROCEDURAL, kind=Kind.PREFERENCE),
        mem("d", minutes=4, session_id="s1", importance=0.5, compressed=True,
            memory_type=MemoryType.WORKING, kind=Kind.CONTEXT),
        mem("e", minutes=5, project="p1", importance=0.5, kind=Kind.DECISION, pinned=True,
            superseded_by="a"),
        mem("bob-a", "bob", project="p1", session_id="s1", key="editor"),
    ]  # fmt: skip


FILTER_CASES: list[tuple[MemoryFilter, set[str]]] = [
    (ALL, {"a", "b", "c", "d", "e"}),
    (MemoryFilter(project="p1"), {"a", "c", "e"}),
    (MemoryFilter(memory_types=(MemoryType.SEMANTIC,)), {"a", "e"}),
    (MemoryFilter(memory_types=(MemoryType.EPISODIC, MemoryType.WORKING)), {"b", "d"}),
    (MemoryFilter(kinds=(Kind.FACT, Kind.PREFERENCE)), {"a", "c"}),
    (MemoryFilter(session_id="s1"), {"a", "d"}),
    (MemoryFilter(key="editor"), {"c"}),
    (MemoryFilter(include_compressed=False), {"a", "b", "c", "e"}),
    (MemoryFilter(include_muted=False), {"a", "b", "d", "e"}),
    (MemoryFilter(min_importance=0.5), {"a", "c", "d", "e"}),
    (MemoryFilter(include_superseded=False), {"a", "b", "c", "d"}),
    (MemoryFilter(pinned=True), {"e"}),
    (MemoryFilter(pinned=False), {"a", "b", "c", "d"}),
    (MemoryFilter(project="p1", include_muted=False, min_importance=0.6), {"a"}),
    (MemoryFilter(session_id="s1", include_compressed=False), {"a"}),
    (MemoryFilter(project="nowhere"), set()),
    (MemoryFilter(kinds=()), set()),
]
FILTER_IDS = [
    "all", "project", "type", "types", "kinds", "session", "key", "no-compressed", "no-muted",
    "no-superseded", "min-importance", "pinned", "unpinned", "combined", "session+no-compressed",
    "no-match", "no-kinds",
]  # fmt: skip


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES, ids=FILTER_IDS)
def test_query_filters(store: Store, flt: MemoryFilter, expected: set[str]) -> None:
    store.write(_filter_dataset())

    found = store.query("alice", flt)

    assert set(ids(found)) == expected
    assert len(found) == len(expected)


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES, ids=FILTER_IDS)
def test_count_applies_the_same_filters(
    store: Store, flt: MemoryFilter, expected: set[str]
) -> None:
    store.write(_filter_dataset())

    assert store.count("alice", flt) == len(expected)


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES, ids=FILTER_IDS)
def test_search_applies_the_same_filters(
    store: Store, flt: MemoryFilter, expected: set[str]
) -> None:
    store.write(_filter_dataset())

    found = store.search("alice", unit(1, 0, 0, 0), 10, flt)

    assert {m.id for m, _ in found} == expected
    assert len(found) == len(expected)


def test_query_orders_most_recently_updated_first(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    memories = [
        # created first but updated last: the order is by update time
        mem("oldest-created", created_at=NOW - timedelta(days=9), minutes=30),
        # 12:20 UTC written as 14:20+02:00: compared as instants, not as text
        mem("other-zone", updated_at=(NOW + timedelta(minutes=20)).astimezone(plus_two)),
        mem("micro", updated_at=NOW + timedelta(minutes=10, microseconds=1)),
        mem("whole", minutes=10),
        mem("first", minutes=0),
    ]
    store.write([memories[i] for i in (3, 0, 4, 1, 2)])

    assert ids(store.query("alice")) == ["oldest-created", "other-zone", "micro", "whole", "first"]


def test_query_breaks_ties_by_id_so_pages_are_stable(store: Store) -> None:
    store.write([mem(i) for i in ("b", "d", "a", "c")])

    assert ids(store.query("alice")) == ["d", "c", "b", "a"]


def test_query_limit_and_offset(store: Store) -> None:
    store.write([mem(f"m{i}", minutes=i) for i in range(5)])  # m4 is the newest

    assert ids(store.query("alice", limit=2)) == ["m4", "m3"]
    assert ids(store.query("alice", limit=2, offset=2)) == ["m2", "m1"]
    assert ids(store.query("alice", limit=10, offset=4)) == ["m0"]
    assert ids(store.query("alice", offset=3)) == ["m1", "m0"]
    assert store.query("alice", limit=0) == []
    assert store.query("alice", limit=3, offset=5) == []


def test_query_of_unknown_user_is_empty(store: Store) -> None:
    store.write([mem("a")])
    assert store.query("nobody") == []


# -- search ---------------------------------------------------------------------------------


def test_search_returns_best_first_with_cosine_similarity(store: Store) -> None:
    vectors = {
        "far": (0, 1, 0, 0),
        "near": (1, 0.1, 0, 0),
        "mid": (1, 1, 0, 0),
        "opp": (-1, 0, 0, 0),
    }
    store.write([mem(name, vector=v) for name, v in vectors.items()])
    query = unit(1, 0, 0, 0)

    found = store.search("alice", query, 3)

    assert [m.id for m, _ in found] == ["near", "mid", "far"]
    for memory, similarity in found:
        expected = float(unit(*vectors[memory.id]) @ query)
        assert similarity == pytest.approx(expected, abs=1e-6)
    np.testing.assert_array_equal(found[0][0].embedding, unit(*vectors["near"]))


def test_search_k_larger_than_count_returns_every_embedded_memory(store: Store) -> None:
    store.write(
        [mem("a", vector=(1, 0, 0, 0)), mem("b", vector=(0, 1, 0, 0)), mem("c", vector=None)]
    )

    found = store.search("alice", unit(1, 0, 0, 0), 50)

    assert [m.id for m, _ in found] == ["a", "b"]


def test_search_of_empty_user_or_zero_k_is_empty(store: Store) -> None:
    assert store.search("alice", unit(1, 0, 0, 0), 5) == []
    store.write([mem("a")])
    assert store.search("alice", unit(1, 0, 0, 0), 0) == []
    assert store.search("nobody", unit(1, 0, 0, 0), 5) == []


@pytest.mark.parametrize(
    ("flt", "blocked"),
    [
        (MemoryFilter(project="p1"), {"project": "p2"}),
        (MemoryFilter(include_muted=False), {"muted": True}),
        (MemoryFilter(kinds=(Kind.FACT,)), {"kind": Kind.EVENT}),
        (MemoryFilter(min_importance=0.5), {"importance": 0.1}),
        (MemoryFilter(session_id="s1"), {"session_id": "s2"}),
        (MemoryFilter(key="k"), {"key": "other"}),
    ],
    ids=["project", "muted", "kind", "importance", "session", "key"],
)
def test_search_filters_before_taking_k(
    store: Store, flt: MemoryFilter, blocked: dict[str, Any]
) -> None:
    """The nearest memories fail the filter; k that pass still come back."""
    allowed: dict[str, Any] = {"project": "p1", "session_id": "s1", "key": "k", "importance": 0.9}
    nearest = [mem(f"blocked{i}", vector=(1, 0.01 * i, 0, 0), **{**allowed, **blocked})
               for i in range(10)]  # fmt: skip
    farther = [mem(f"ok{i}", vector=(0.2 * i, 1, 0, 0), **allowed) for i in range(4)]
    store.write(nearest + farther)

    found = store.search("alice", unit(1, 0, 0, 0), 3, flt)

    assert [m.id for m, _ in found] == ["ok3", "ok2", "ok1"]


def test_search_sees_the_stores_own_later_writes(store: Store) -> None:
    store.write([mem("a", vector=(0, 1, 0, 0))])
    query = unit(1, 0, 0, 0)
    assert [m.id for m, _ in store.search("alice", query, 1)] == ["a"]

    store.write([mem("b", vector=(1, 0, 0, 0))])
    assert [m.id for m, _ in store.search("alice", query, 1)] == ["b"]

    store.write([mem("a", vector=(1, 0.01, 0, 0))], deletes=[mem("b")])
    ((hit, score),) = store.search("alice", query, 1)
    assert hit.id == "a" and score == pytest.approx(float(unit(1, 0.01, 0, 0) @ query))


def test_lexical_search_ranks_by_shared_terms_within_the_filter(store: Store) -> None:
    store.write([
        mem("both", content="the deploy pipeline runs nightly", minutes=1),
        mem("one", content="a pipeline of thoughts", minutes=2),
        mem("none", content="tabs over spaces", minutes=3),
        mem("muted", content="deploy pipeline deploy pipeline", minutes=4, muted=True),
        mem("bob", "bob", content="deploy pipeline"),
    ])  # fmt: skip

    found = store.lexical_search("alice", "deploy pipeline", 10, MemoryFilter(include_muted=False))

    assert [m.id for m, _ in found] == ["both", "one"]
    assert found[0][1] > found[1][1] > 0
    assert [m.id for m, _ in store.lexical_search("alice", "deploy pipeline", 1)] == ["muted"]
    assert store.lexical_search("alice", "kubernetes", 10) == []
    assert store.lexical_search("alice", "deploy", 0) == []
    assert store.lexical_search("carol", "deploy", 5) == []


# -- access, centroid, cache, users ----------------------------------------------------------


def test_record_access_counts_and_stamps(store: Store) -> None:
    a, b = mem("a", access_count=3), mem("b")
    store.write([a, b, mem("a", "bob")])
    first, second = NOW + timedelta(hours=1), NOW + timedelta(hours=2)

    store.record_access("alice", ["a", "unknown"], first)
    store.record_access("alice", ["a"], second)

    got_a, got_b = store.get("alice", ["a", "b"])
    assert got_a.access_count == 5
    assert got_a.last_accessed_at == second
    assert got_a.evolve(access_count=3, last_accessed_at=None) == a
    assert got_b == b
    assert store.get("bob", ["a"])[0].access_count == 0


def test_record_access_with_no_ids_is_a_no_op(store: Store) -> None:
    store.write([mem("a")])
    store.record_access("alice", [], NOW)
    assert store.get("alice", ["a"])[0].access_count == 0


def test_centroid_is_the_mean_embedding_of_the_users_memories(store: Store) -> None:
    assert store.centroid("alice") is None
    store.write([mem("a", vector=(1, 0, 0, 0)), mem("b", vector=(0, 1, 0, 0)),
                 mem("c", vector=None), mem("z", "bob", vector=(0, 0, 0, 1))])  # fmt: skip

    centroid = store.centroid("alice")

    assert centroid is not None and centroid.dtype == np.float32
    np.testing.assert_allclose(centroid, [0.5, 0.5, 0, 0], atol=1e-6)

    store.write([mem("d", vector=(0, 0, 1, 0))], deletes=[mem("a")])
    np.testing.assert_allclose(centroid_of(store, "alice"), [0, 0.5, 0.5, 0], atol=1e-6)


def test_centroid_is_none_without_embeddings(store: Store) -> None:
    store.write([mem("a", vector=None)])
    assert store.centroid("alice") is None


def test_embedding_cache_round_trip_keyed_by_model(store: Store) -> None:
    v1, v2 = unit(1, 2, 3, 4), unit(4, 3, 2, 1)
    store.cache_embeddings("model-a", {"h1": v1, "h2": v2})
    store.cache_embeddings("model-b", {"h1": v2})

    found = store.cached_embeddings("model-a", ["h1", "h2", "h3"])

    assert set(found) == {"h1", "h2"}
    np.testing.assert_array_equal(found["h1"], v1)
    np.testing.assert_array_equal(found["h2"], v2)
    assert found["h1"].dtype == np.float32
    np.testing.assert_array_equal(store.cached_embeddings("model-b", ["h1", "h2"])["h1"], v2)
    assert store.cached_embeddings("model-c", ["h1"]) == {}
    assert store.cached_embeddings("model-a", []) == {}
    store.cache_embeddings("model-a", {})


def test_embedding_cache_many_hashes(store: Store) -> None:
    vectors = {f"h{i}": unit(1, i, 0, 0) for i in range(1200)}
    store.cache_embeddings("m", vectors)

    found = store.cached_embeddings("m", list(vectors))

    assert set(found) == set(vectors)
    np.testing.assert_array_equal(found["h1199"], vectors["h1199"])


def test_users_lists_every_user_with_a_memory(store: Store) -> None:
    assert store.users() == []
    store.write([mem("1", "carol"), mem("2", "alice"), mem("3", "alice"), mem("4", "bob")])
    assert store.users() == ["alice", "bob", "carol"]

    store.write(deletes=[mem("1", "carol")])
    assert store.users() == ["alice", "bob"]


# -- isolation ------------------------------------------------------------------------------


def test_a_user_never_sees_another_users_memories(store: Store) -> None:
    shared: dict[str, Any] = {"project": "p", "session_id": "s", "key": "k"}
    alice = [mem(f"a{i}", "alice", vector=(1, 0.1 * i, 0, 0), **shared) for i in range(3)]
    bob = [mem(f"b{i}", "bob", vector=(0, 1, 0.1 * i, 0), **shared) for i in range(3)]
    store.write(alice + bob)
    alice_ids = ids(alice)

    assert store.get("bob", alice_ids) == []
    assert set(ids(store.query("bob"))) == set(ids(bob))
    assert set(ids(store.query("bob", MemoryFilter(project="p")))) == set(ids(bob))
    for flt in (ALL, MemoryFilter(project="p"), MemoryFilter(session_id="s", key="k")):
        found = store.search("bob", unit(1, 0, 0, 0), 10, flt)  # alice's direction
        assert {m.id for m, _ in found} == set(ids(bob))
    bob_mean = np.mean([unit(0, 1, 0.1 * i, 0) for i in range(3)], axis=0)
    np.testing.assert_allclose(centroid_of(store, "bob"), bob_mean, atol=1e-6)

    store.record_access("bob", alice_ids, NOW)
    store.write(deletes=[m.evolve(user_id="bob") for m in alice])
    assert_same(store.get("alice", alice_ids), alice)


# -- atomicity ------------------------------------------------------------------------------


class _Boom(Exception):
    pass


class _Unwritable:
    """Stands in for a memory and fails as soon as the store reads it."""

    def __getattr__(self, name: str) -> Any:
        raise _Boom(name)


@pytest.mark.parametrize("where", ["upserts", "deletes"])
def test_a_write_that_fails_midway_changes_nothing(store: Store, where: str) -> None:
    before_rows = [mem("keep", minutes=1), mem("doomed", minutes=2), mem("bob1", "bob")]
    store.write(before_rows)
    store.cache_embeddings("m", {"h": unit(1, 0, 0, 0)})
    before = snapshot(store)
    broken = cast(Memory, _Unwritable())
    upserts = [mem("keep", content="changed", vector=(0, 1, 0, 0)), mem("new", "carol")]
    deletes = [mem("doomed"), mem("bob1", "bob")]
    if where == "upserts":
        upserts.insert(1, broken)
    else:
        deletes.insert(1, broken)

    with pytest.raises(_Boom):
        store.write(upserts, deletes)

    assert snapshot(store) == before
    store.write([mem("after")])  # the store is still usable
    assert "after" in ids(store.query("alice"))


# -- state and revisions --------------------------------------------------------------------


def test_state_round_trip_update_and_delete(store: Store) -> None:
    doc = {"tier": 1, "text": "café ☕", "ids": ["a", "b"], "nested": {"x": 0.5, "n": None}}
    store.write(state=[State("alice", "tiers", "p1", doc)])
    assert store.get_state("alice", "tiers", "p1") == doc
    assert store.get_state("alice", "tiers", "p2") is None
    assert store.get_state("alice", "other", "p1") is None
    assert store.get_state("bob", "tiers", "p1") is None

    store.write(state=[State("alice", "tiers", "p1", {"tier": 2})])
    assert store.get_state("alice", "tiers", "p1") == {"tier": 2}
    store.write(state=[State("alice", "tiers", "p1", None)])
    assert store.get_state("alice", "tiers", "p1") is None


def test_state_that_is_not_json_is_refused_and_nothing_is_written(store: Store) -> None:
    with pytest.raises(ValidationError):
        store.write([mem("a")], state=[State("alice", "ns", "k", {"bad": object()})])
    assert store.query("alice") == []
    assert store.get_state("alice", "ns", "k") is None


def test_revision_changes_on_every_memory_write_of_that_user_only(store: Store) -> None:
    assert store.revision("alice") == 0
    store.write([mem("a")])
    first = store.revision("alice")
    assert first != 0 and store.revision("bob") == 0

    store.write([mem("a", content="edited")])
    second = store.revision("alice")
    assert second != first
    store.write(deletes=[mem("a")])
    third = store.revision("alice")
    assert third not in (first, second)

    store.record_access("alice", ["a"], NOW)
    store.write(state=[State("alice", "ns", "k", {"v": 1})])
    store.write([mem("b1", "bob")])
    assert store.revision("alice") == third


def test_expire_state_deletes_only_older_documents_of_that_namespace(store: Store) -> None:
    store.write(state=[State("alice", "contexts", "c1", {"ids": ["a"]}),
                       State("alice", "tiers", "t", {"tier": 1}),
                       State("bob", "contexts", "c1", {"ids": []})])  # fmt: skip
    assert store.expire_state("alice", "contexts", datetime.now(UTC) - timedelta(hours=1)) == 0
    assert store.expire_state("alice", "contexts", datetime.now(UTC) + timedelta(hours=1)) == 1
    assert store.get_state("alice", "contexts", "c1") is None
    assert store.get_state("alice", "tiers", "t") == {"tier": 1}
    assert store.get_state("bob", "contexts", "c1") == {"ids": []}


def test_states_lists_a_users_documents_by_namespace_and_key(store: Store) -> None:
    store.write(state=[State("alice", "tiers", "b", {"n": 2}),
                       State("alice", "contexts", "z", {"ids": ["a"]}),
                       State("alice", "tiers", "a", {"n": 1}),
                       State("bob", "tiers", "a", {"n": 9})])  # fmt: skip
    assert store.states("alice") == [
        State("alice", "contexts", "z", {"ids": ["a"]}),
        State("alice", "tiers", "a", {"n": 1}),
        State("alice", "tiers", "b", {"n": 2}),
    ]
    assert store.states("alice", "tiers") == [
        State("alice", "tiers", "a", {"n": 1}),
        State("alice", "tiers", "b", {"n": 2}),
    ]
    assert store.states("alice", "missing") == []
    assert store.states("carol") == []
    store.write(state=[State("alice", "tiers", "a", None)])
    assert [s.key for s in store.states("alice", "tiers")] == ["b"]


def _counted(doc: Any) -> dict[str, Any]:
    return {"n": (doc or {}).get("n", 0) + 1}


def test_a_state_change_is_applied_to_the_document_the_write_finds(store: Store) -> None:
    """A ``change`` reads the document inside the write: a value written meanwhile (by
    another process) is the one it changes, a ``None`` result deletes, and a missing
    document is passed as ``None``."""
    store.write(state=[State("alice", "ns", "k", None, change=_counted)])
    assert store.get_state("alice", "ns", "k") == {"n": 1}
    store.write(state=[State("alice", "ns", "k", {"n": 10})])  # someone else's write
    store.write([mem("a")], state=[State("alice", "ns", "k", None, change=_counted)])
    assert store.get_state("alice", "ns", "k") == {"n": 11}
    assert ids(store.query("alice")) == ["a"]
    store.write(state=[State("alice", "ns", "k", None, change=lambda doc: None)])
    assert store.get_state("alice", "ns", "k") is None
    store.write(state=[State("alice", "ns", "gone", None, change=lambda doc: doc)])
    assert store.get_state("alice", "ns", "gone") is None


def test_a_state_change_that_is_not_json_writes_nothing(store: Store) -> None:
    store.write(state=[State("alice", "ns", "k", {"n": 1})])
    with pytest.raises(ValidationError):
        store.write([mem("a")], state=[State("alice", "ns", "k", None,
                                             change=lambda doc: {"bad": object()})])  # fmt: skip
    assert store.query("alice") == []
    assert store.get_state("alice", "ns", "k") == {"n": 1}


def test_state_changes_from_many_threads_all_count(store: Store) -> None:
    """Threads (on PostgreSQL, pooled connections: separate transactions) each counting
    one document up by changes: no count lost."""

    def counter() -> None:
        for _ in range(10):
            store.write(state=[State("alice", "ns", "k", None, change=_counted)])

    run_threads([counter] * 4)
    assert store.get_state("alice", "ns", "k") == {"n": 40}


# -- patches: field-level changes of existing memories ------------------------------------


def test_a_toward_patch_moves_from_the_value_the_write_finds(store: Store) -> None:
    """A :class:`Toward` is applied to the row inside the write: a usefulness another
    process wrote after this process read the row is the one moved (feedback adds up)."""
    store.write([mem("a")])  # usefulness 0.5
    move = Patch("alice", "a", {"usefulness": Toward(1.0, 0.2)})
    store.write(patches=[Patch("alice", "a", {"usefulness": 0.9})])  # written meanwhile
    store.write(patches=[move])
    assert store.get("alice", ["a"])[0].usefulness == pytest.approx(0.92)
    store.write(patches=[move, move])
    assert store.get("alice", ["a"])[0].usefulness == pytest.approx(1 - 0.08 * 0.8**2)
    store.write(patches=[Patch("alice", "a", {"usefulness": Toward(0.0, 1.0)})])
    assert store.get("alice", ["a"])[0].usefulness == 0.0


@pytest.mark.parametrize(
    "changes",
    [{"importance": Toward(1.0, 0.2)}, {"usefulness": Toward(1.5, 0.2)},
     {"usefulness": Toward(1.0, -0.1)}, {"usefulness": Toward(True, 0.2)}],  # type: ignore[arg-type]
)  # fmt: skip
def test_a_toward_patch_of_another_field_or_outside_0_1_is_refused(
    changes: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        Patch("alice", "a", changes)


def test_patch_changes_only_the_named_fields_and_keeps_other_changes(store: Store) -> None:
    store.write([mem("a", minutes=1), mem("b", minutes=2)])
    before = store.revision("alice")
    # two changes made from the same stale read: neither undoes the other
    store.write(patches=[Patch("alice", "a", {"pinned": True})])
    store.write(patches=[Patch("alice", "a", {"muted": True, "importance": 0.25})])
    store.record_access("alice", ["a"], NOW)
    store.write(patches=[Patch("alice", "a", {"content": "edited a"})])

    (got,) = store.get("alice", ["a"])
    assert (got.pinned, got.muted, got.importance, got.content) == (True, True, 0.25, "edited a")
    assert got.access_count == 1
    assert_same([got], [mem("a", minutes=1).evolve(
        pinned=True, muted=True, importance=0.25, content="edited a",
        access_count=1, last_accessed_at=NOW)])  # fmt: skip
    assert store.revision("alice") != before
    # reads served from a working set see the committed row too
    assert ids(store.query("alice", MemoryFilter(pinned=True))) == ["a"]
    assert ids(store.query("alice", MemoryFilter(include_muted=False))) == ["b"]
    assert [m.id for m, _ in store.lexical_search("alice", "edited", 5)] == ["a"]
    assert_same(store.get("alice", ["b"]), [mem("b", minutes=2)])


def test_patch_of_a_deleted_or_unknown_memory_writes_nothing(store: Store) -> None:
    store.write([mem("a"), mem("b1", "bob")])
    store.write(deletes=[mem("a")])
    store.write(patches=[Patch("alice", "a", {"pinned": True}),
                         Patch("alice", "never", {"muted": True}),
                         Patch("alice", "b1", {"pinned": True})])  # fmt: skip
    assert store.get("alice", ["a", "never", "b1"]) == []
    assert store.query("alice") == [] and store.count("alice") == 0
    assert store.search("alice", unit(1, 0, 0, 0), 5) == []
    assert store.users() == ["bob"]
    assert store.get("bob", ["b1"])[0].pinned is False  # another user's id is not this one


def test_patch_within_one_write_applies_to_the_upsert_and_a_delete_wins(store: Store) -> None:
    store.write([mem("gone")])
    store.write(
        [mem("new", minutes=3)],
        deletes=[mem("gone")],
        patches=[Patch("alice", "new", {"pinned": True}), Patch("alice", "gone", {"muted": True})],
    )
    assert ids(store.query("alice")) == ["new"]
    assert store.get("alice", ["new"])[0].pinned is True


@pytest.mark.parametrize(
    "changes",
    [{"id": "other"}, {"user_id": "mallory"}, {"no_such_field": 1}, {"embedding": None, "x": 2}],
)
def test_patch_of_identity_or_unknown_fields_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Patch("alice", "a", changes)


def test_a_patch_made_from_a_mutable_dict_is_frozen() -> None:
    changes: dict[str, Any] = {"pinned": True}
    patch = Patch("alice", "a", changes)
    changes["muted"] = True
    assert dict(patch.changes) == {"pinned": True}


def test_patch_racing_a_delete_never_brings_the_memory_back(store: Store) -> None:
    doomed = [mem(f"m{i}", minutes=i) for i in range(40)]
    store.write(doomed)
    start = threading.Barrier(2)

    def patcher() -> None:
        start.wait()
        for round_ in range(3):
            for m in doomed:
                store.write(patches=[Patch("alice", m.id, {"pinned": round_ % 2 == 0})])

    def deleter() -> None:
        start.wait()
        for m in doomed:
            store.write(deletes=[m])
            store.record_access("alice", [m.id], NOW)

    run_threads([patcher, deleter])
    assert store.get("alice", [m.id for m in doomed]) == []
    assert store.query("alice") == [] and store.count("alice") == 0


def test_record_access_of_a_deleted_id_does_nothing(store: Store) -> None:
    store.write([mem("a"), mem("b")])
    store.write(deletes=[mem("a")])
    store.record_access("alice", ["a", "b"], NOW)
    assert store.get("alice", ["a"]) == []
    assert ids(store.query("alice")) == ["b"]
    assert store.get("alice", ["b"])[0].access_count == 1


def test_record_access_from_many_threads_counts_every_access(store: Store) -> None:
    store.write([mem("a"), mem("b")])

    def counter() -> None:
        for _ in range(20):
            store.record_access("alice", ["a", "b"], NOW)

    run_threads([counter] * 4)
    assert [m.access_count for m in store.get("alice", ["a", "b"])] == [80, 80]
    assert [m.access_count for m in store.query("alice")] == [80, 80]


def test_threads_sharing_a_store_see_consistent_results(store: Store) -> None:
    """Writers add, patch and delete their own memories while readers query, search and
    count the same user: no call fails, every result is well formed, and the end state is
    exactly what the writers did."""
    expected: dict[str, dict[str, bool]] = {}  # writer -> id -> pinned, for the survivors
    errors: list[BaseException] = []
    rounds = 60

    def writer(name: str) -> Callable[[], None]:
        def work() -> None:
            mine = expected.setdefault(name, {})
            for i in range(rounds):
                memory_id = f"{name}-{i}"
                text = f"note {name} number {i} about topic{i % 5}"
                vector = (1.0, (i % 7) / 7.0, 0.0, 0.5)
                store.write([mem(memory_id, minutes=i, vector=vector, content=text)])
                mine[memory_id] = False
                if i % 3 == 0:
                    store.write(patches=[Patch("alice", memory_id, {"pinned": True})])
                    mine[memory_id] = True
                if i % 4 == 1:
                    victim = f"{name}-{i - 1}"
                    store.write(deletes=[mem(victim)])
                    mine.pop(victim, None)

        return work

    def reader() -> None:
        for i in range(rounds):
            listed = store.query("alice")
            assert all(m.user_id == "alice" for m in listed)
            times = [(m.updated_at, m.id) for m in listed]
            assert times == sorted(times, reverse=True)
            pinned = store.query("alice", MemoryFilter(pinned=True))
            assert all(m.pinned for m in pinned)
            found = store.search("alice", unit(1.0, (i % 7) / 7.0, 0.0, 0.5), 5)
            sims = [s for _, s in found]
            assert sims == sorted(sims, reverse=True) and len(found) <= 5
            hits = store.lexical_search("alice", f"topic{i % 5}", 5)
            assert all(f"topic{i % 5}" in m.content for m, _ in hits)
            assert store.count("alice") >= 0
            store.get("alice", [m.id for m in listed[:3]])
            if listed:
                store.record_access("alice", [listed[0].id], NOW)

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported below, with its traceback
                errors.append(exc)

        return run

    run_threads([guarded(writer("w1")), guarded(writer("w2")), *[guarded(reader)] * 4])
    if errors:
        raise errors[0]
    survivors = {i: p for mine in expected.values() for i, p in mine.items()}
    listed = store.query("alice")
    assert {m.id: m.pinned for m in listed} == survivors
    assert store.count("alice") == len(survivors)
    assert {m.id for m, _ in store.search("alice", unit(1, 0, 0, 0.5), 1000)} == set(survivors)


def run_threads(work: Sequence[Callable[[], None]]) -> None:
    """Run each function in its own thread and wait for all; the first error is raised."""
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize(
    "changes",
    [{"pinned": "no"}, {"importance": True}, {"domains": "abc"}, {"domains": (1,)},
     {"access_count": 1.5}, {"memory_type": "nonsense"}, {"content": None}],
)  # fmt: skip
def test_patch_values_of_the_wrong_type_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Patch("alice", "a", changes)


# -- the per-user working set ----------------------------------------------------------------


def test_a_working_set_snapshot_never_changes_after_it_is_published() -> None:
    """What a reader holds stays whole while writers replace the working set: every write
    builds a new snapshot instead of patching the arrays a reader may be using."""
    cache = UserCache([mem("a", minutes=1), mem("b", minutes=2, vector=(0, 1, 0, 0))])
    assert ids(cache.query()) == ["b", "a"]
    cache.lexical_search("memory", 5)
    held = cache.snapshot
    assert held.arrays is not None and held.lexical is not None
    rows, memories = dict(held.rows), list(held.arrays.memories)
    matrix, pinned = held.arrays.matrix.copy(), held.arrays.pinned.copy()

    cache.upsert([mem("a", minutes=1, pinned=True, vector=(0, 0, 1, 0)), mem("c", minutes=3)])
    cache.touch(["b"], NOW)
    cache.delete(["b"])

    assert dict(held.rows) == rows and held.arrays.memories == memories
    np.testing.assert_array_equal(held.arrays.matrix, matrix)
    np.testing.assert_array_equal(held.arrays.pinned, pinned)
    assert ids(cache.query()) == ["c", "a"]
    assert ids(cache.query(MemoryFilter(pinned=True))) == ["a"]
    assert [m.id for m, _ in cache.search(unit(0, 0, 1, 0), 1)] == ["a"]


# -- API keys -------------------------------------------------------------------------------


def key_record(key_id: str, *, minutes: int = 0, **fields: Any) -> KeyRecord:
    """A key record created ``minutes`` after NOW, with a digest derived from its id."""
    values: dict[str, Any] = {
        "id": key_id,
        "digest": hashlib.sha256(key_id.encode()).hexdigest(),
        "name": None,
        "users": ("alice",),
        "projects": (),
        "admin": False,
        "created_at": NOW + timedelta(minutes=minutes),
        **fields,
    }
    return KeyRecord(**values)


def test_key_records_round_trip_every_field(store: Store) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    full = key_record(
        "key_0123456789ab",
        name="ci — déploiement",
        users=("alice", "Alice", "é", "ä ", "bob"),
        projects=("web", "Web"),
        created_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=ist),
    )
    admin = key_record("key_ffffffffffff", minutes=1, users=(), admin=True)
    assert store.put_key(full) and store.put_key(admin)
    assert store.key_record(full.digest) == full
    assert store.key_record(admin.digest) == admin
    assert store.key_records() == [full, admin]


def test_key_records_are_listed_oldest_first(store: Store) -> None:
    for key_id, minutes in [("key_b", 5), ("key_c", 0), ("key_a", 5), ("key_d", -3)]:
        assert store.put_key(key_record(key_id, minutes=minutes))
    assert [k.id for k in store.key_records()] == ["key_d", "key_c", "key_a", "key_b"]


def test_a_taken_key_id_is_refused_and_the_stored_key_kept(store: Store) -> None:
    first = key_record("key_1")
    assert store.put_key(first)
    assert not store.put_key(key_record("key_1", digest="0" * 64, users=("mallory",)))
    assert store.key_records() == [first]
    assert store.key_record("0" * 64) is None


def test_an_unknown_digest_finds_no_key(store: Store) -> None:
    assert store.key_record("0" * 64) is None
    store.put_key(key_record("key_1"))
    assert store.key_record(key_record("key_2").digest) is None
    assert store.key_record(key_record("key_1").digest.upper()) is None


def test_revoking_a_key_keeps_its_first_revocation_time(store: Store) -> None:
    kept, revoked = key_record("key_1"), key_record("key_2")
    store.put_key(kept)
    store.put_key(revoked)
    first = NOW + timedelta(hours=1)
    assert store.revoke_key("key_2", first)
    assert store.revoke_key("key_2", first + timedelta(hours=1))
    assert not store.revoke_key("key_3", first)
    found = store.key_record(revoked.digest)
    assert found is not None and found.revoked_at == first
    assert store.key_record(kept.digest) == kept
    assert [k.revoked_at for k in store.key_records()] == [None, first]


def test_keys_are_not_memories(store: Store) -> None:
    store.write([mem("a")])
    before = (store.users(), store.revision("alice"), snapshot(store))
    store.put_key(key_record("key_1", users=("alice", "bob")))
    store.revoke_key("key_1", NOW)
    assert (store.users(), store.revision("alice"), snapshot(store)) == before
    assert store.revision("bob") == 0


# -- key claims: the planner's key lookup, checked inside the write ------------------------

KEYED = MemoryFilter(key="deploy", kinds=(Kind.GOLDEN_PATH,), include_superseded=False,
                     include_compressed=False)  # fmt: skip


def keyed(memory_id: str, user_id: str = "alice", **fields: Any) -> Memory:
    return mem(memory_id, user_id, kind=Kind.GOLDEN_PATH, memory_type=MemoryType.PROCEDURAL,
               key="deploy", **fields)  # fmt: skip


def test_a_claim_that_the_key_is_free_refuses_a_write_once_it_is_taken(store: Store) -> None:
    store.write([keyed("a")])
    before = (store.revision("alice"), snapshot(store))
    with pytest.raises(KeyChangedError, match="deploy"):
        store.write([keyed("b")], claims=[KeyClaim("alice", KEYED, None)])
    assert (store.revision("alice"), snapshot(store)) == before  # nothing written
    with pytest.raises(KeyChangedError):  # the memory found is not the one live now
        store.write([keyed("b")], claims=[KeyClaim("alice", KEYED, "c")])
    assert store.get("alice", ["b"]) == []


def test_a_claim_that_holds_lets_the_write_through(store: Store) -> None:
    store.write([keyed("a")], claims=[KeyClaim("alice", KEYED, None)])
    store.write(patches=[Patch("alice", "a", {"content": "new"})],
                claims=[KeyClaim("alice", KEYED, "a")])  # fmt: skip
    assert [m.content for m in store.get("alice", ["a"])] == ["new"]


def test_a_claim_sees_only_live_memories_of_its_filter(store: Store) -> None:
    store.write([keyed("old", superseded_by="x"), keyed("other", project="p"),
                 keyed("bob", "bob"), mem("fact", key="deploy")])  # fmt: skip
    store.write(
        [keyed("a", project="q")], claims=[KeyClaim("alice", KEYED.update(project="q"), None)]
    )
    assert [m.id for m in store.get("alice", ["a"])] == ["a"]


def test_a_claim_on_a_forgotten_memory_refuses_the_write(store: Store) -> None:
    store.write([keyed("a")])
    store.write(deletes=[keyed("a")])
    with pytest.raises(KeyChangedError):  # the merge into "a" would be lost
        store.write(patches=[Patch("alice", "a", {"content": "new"})],
                    claims=[KeyClaim("alice", KEYED, "a")])  # fmt: skip
