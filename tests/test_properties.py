"""Property tests: round trips are lossless for any memory, a user never sees another user's
memory whatever was written, and both stores (SQLite through two connections, and in memory)
behave like a dict under any sequence of adds, updates, deletes and failed writes (a hypothesis
state machine)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, content_hash
from engrain.store import MemoryFilter, MemoryStore, Store
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW
from .test_store_contract import _Boom, _Unwritable, assert_same

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------

zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-7))]
)
aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=zones
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
provenances = st.builds(
    Provenance,
    turn_ids=st.lists(st.text(max_size=8), max_size=4).map(tuple),
    metadata=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
embeddings = st.none() | hnp.arrays(
    np.float32, st.integers(1, 8), elements=st.floats(-1, 1, width=32)
)
finite = st.floats(allow_nan=False, allow_infinity=False)
optional_text = st.none() | st.text(max_size=12)


@st.composite
def memories(draw: st.DrawFn, user_id: st.SearchStrategy[str] | None = None) -> Memory:
    """Any well-formed memory: aware datetimes, a content hash that matches its content."""
    content = draw(st.text(min_size=1, max_size=40))
    return Memory(
        id=draw(st.text(min_size=1, max_size=12)),
        user_id=draw(user_id if user_id is not None else st.text(min_size=1, max_size=8)),
        content=content,
        memory_type=draw(st.sampled_from(MemoryType)),
        kind=draw(st.sampled_from(Kind)),
        created_at=draw(aware_datetimes),
        updated_at=draw(aware_datetimes),
        project=draw(optional_text),
        domains=tuple(draw(st.lists(st.text(max_size=8), max_size=4))),
        session_id=draw(optional_text),
        event_at=draw(st.none() | aware_datetimes),
        key=draw(optional_text),
        importance=draw(finite),
        confidence=draw(finite),
        usefulness=draw(finite),
        access_count=draw(st.integers(0, 2**63 - 1)),
        last_accessed_at=draw(st.none() | aware_datetimes),
        pinned=draw(st.booleans()),
        muted=draw(st.booleans()),
        promoted_at=draw(st.none() | aware_datetimes),
        compressed=draw(st.booleans()),
        compression_source=draw(st.booleans()),
        source_session_id=draw(optional_text),
        provenance=draw(provenances),
        content_hash=content_hash(content),
        embedding=draw(embeddings),
    )


@contextmanager
def fresh(backend: str) -> Iterator[Store]:
    """A new, empty store per hypothesis example (function fixtures would be shared). SQLite
    runs in memory here: same SQL and search index, without a file's fsyncs per example (the
    state machine below uses a real file)."""
    store: Store = MemoryStore() if backend == "memory" else SQLiteStore(":memory:")
    try:
        yield store
    finally:
        store.close()


# -- round trips ------------------------------------------------------------------------------


@FAST
@given(memories())
def test_to_dict_from_dict_is_lossless(memory: Memory) -> None:
    via_json = json.loads(json.dumps(memory.to_dict(with_embedding=True)))

    assert_same([Memory.from_dict(via_json)], [memory], stored=False)


@FAST
@given(memories())
def test_to_dict_without_embedding_drops_only_the_embedding(memory: Memory) -> None:
    restored = Memory.from_dict(memory.to_dict())

    assert_same([restored], [memory.evolve(embedding=None)], stored=False)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@FAST
@given(batch=st.lists(memories(user_id=st.sampled_from(["u1", "u2"])), min_size=1, max_size=5))
def test_store_round_trip_is_lossless(backend: str, batch: list[Memory]) -> None:
    with fresh(backend) as store:
        assert_round_trip(store, batch)


def assert_round_trip(store: Store, batch: list[Memory]) -> None:
    """Write ``batch``; each memory reads back equal by id and in the user's listing."""
    latest = {(m.user_id, m.id): m for m in batch}  # a batch may repeat an id: last one wins
    store.write(batch)
    for (user, memory_id), memory in latest.items():
        assert_same(store.get(user, [memory_id]), [memory])
    for user in {m.user_id for m in batch}:
        expected = sorted(
            (m for m in latest.values() if m.user_id == user),
            key=lambda m: (m.updated_at, m.id),
            reverse=True,
        )
        assert_same(store.query(user), expected)


# -- isolation ------------------------------------------------------------------------------

USERS = ["alice", "bob", "carol"]
CONTENTS = ["tabs", "spaces", "dark mode", "vim", "emacs", "vim and tabs"]
WORDS = ["tabs", "spaces", "dark", "mode", "vim", "emacs"]
IDS = [f"m{i}" for i in range(6)]
DIM = 3

#: Few directions, so equal similarities (ties) are common; queries may be any direction.
DIRECTIONS = [
    (v / np.linalg.norm(v)).astype(np.float32)
    for v in np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [1, -1, 1], [-1, 0, 2], [0, 0, 1]])
]
stored_vectors = st.none() | st.sampled_from(DIRECTIONS)
unit_vectors = (
    hnp.arrays(np.float32, DIM, elements=st.floats(-1, 1, width=32))
    .filter(lambda v: float(np.linalg.norm(v)) > 0.1)
    .map(lambda v: (v / np.linalg.norm(v)).astype(np.float32))
)
importances = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
filters = st.builds(
    MemoryFilter,
    project=st.none() | st.sampled_from(["p1", "p2"]),
    memory_types=st.none() | st.lists(st.sampled_from(MemoryType), unique=True).map(tuple),
    kinds=st.none() | st.lists(st.sampled_from(Kind), max_size=4, unique=True).map(tuple),
    session_id=st.none() | st.sampled_from(["s1", "s2"]),
    key=st.none() | st.sampled_from(["k1", "k2"]),
    include_compressed=st.booleans(),
    include_muted=st.booleans(),
    min_importance=st.none() | importances,
    pinned=st.none() | st.booleans(),
)


@st.composite
def small_memories(
    draw: st.DrawFn, user_id: str | None = None, memory_id: str | None = None
) -> Memory:
    """Memories from small value sets, so ids, times, projects and vectors collide often."""
    content = draw(st.sampled_from(CONTENTS))
    at = NOW + timedelta(minutes=draw(st.integers(0, 4)))
    return Memory(
        id=memory_id or draw(st.sampled_from(IDS)),
        user_id=user_id or draw(st.sampled_from(USERS)),
        content=content,
        memory_type=draw(st.sampled_from(MemoryType)),
        kind=draw(st.sampled_from(Kind)),
        created_at=at - timedelta(days=1),
        updated_at=at,
        project=draw(st.none() | st.sampled_from(["p1", "p2"])),
        session_id=draw(st.none() | st.sampled_from(["s1", "s2"])),
        key=draw(st.none() | st.sampled_from(["k1", "k2"])),
        importance=draw(importances),
        muted=draw(st.booleans()),
        pinned=draw(st.booleans()),
        compressed=draw(st.booleans()),
        content_hash=content_hash(content),
        embedding=draw(stored_vectors),
    )


writes = st.lists(
    st.tuples(st.sampled_from(["upsert", "delete"]), small_memories()), min_size=1, max_size=25
)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@FAST
@given(ops=writes, vector=unit_vectors, flt=filters, k=st.integers(1, 8))
def test_a_user_never_sees_another_users_memory(
    backend: str, ops: list[tuple[str, Memory]], vector: Vector, flt: MemoryFilter, k: int
) -> None:
    owned: dict[tuple[str, str], Memory] = {}
    with fresh(backend) as store:
        for op, memory in ops:
            if op == "upsert":
                store.write([memory])
                owned[(memory.user_id, memory.id)] = memory
            else:
                store.write(deletes=[memory])
                owned.pop((memory.user_id, memory.id), None)

        for user in USERS:
            seen = [
                *store.get(user, IDS),
                *store.query(user),
                *store.query(user, flt),
                *(m for m, _ in store.search(user, vector, k)),
                *(m for m, _ in store.search(user, vector, k, flt)),
                *(m for m, _ in store.lexical_search(user, "vim tabs dark", k, flt)),
            ]
            assert all(m.user_id == user for m in seen)
            # and what the user sees is what the user wrote, not a same-id memory of another
            assert all(m == owned[(user, m.id)] for m in seen)
            assert {m.id for m in store.query(user)} == {i for u, i in owned if u == user}


# -- the stateful model -------------------------------------------------------------------------

#: A RAM-backed directory where there is one: a file's fsyncs on open and close would
#: otherwise dominate each example and make shrinking a failure take minutes.
_RAM_DIR = "/dev/shm" if Path("/dev/shm").is_dir() else None


def _expected_query(
    model: dict[tuple[str, str], Memory], user: str, flt: MemoryFilter
) -> list[Memory]:
    found = [m for (u, _), m in model.items() if u == user and flt.matches(m)]
    return sorted(found, key=lambda m: (m.updated_at, m.id), reverse=True)


def _similarity(memory: Memory, vector: Vector) -> float:
    assert memory.embedding is not None
    return float(memory.embedding @ vector)


class StoresAgainstDict(RuleBasedStateMachine):
    """Two connections on one SQLite file and a MemoryStore, all checked against a dict.

    Each write goes to the MemoryStore and to one SQLite connection picked at random; reads
    go through all three, so a stale search index in one connection after the other commits
    shows up as a difference."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="engrain-state-", dir=_RAM_DIR)
        path = Path(self.directory) / "s.db"
        self.connections = (SQLiteStore(path), SQLiteStore(path))
        self.reference = MemoryStore()
        self.stores: tuple[Store, ...] = (*self.connections, self.reference)
        self.model: dict[tuple[str, str], Memory] = {}

    def write(
        self, second: bool, upserts: list[Memory] | None = None, deletes: list[Memory] | None = None
    ) -> None:
        for store in (self.connections[int(second)], self.reference):
            store.write(upserts or (), deletes or ())

    @rule(batch=st.lists(small_memories(), max_size=4), second=st.booleans())
    def upsert(self, batch: list[Memory], second: bool) -> None:
        self.write(second, upserts=batch)
        for memory in batch:
            self.model[(memory.user_id, memory.id)] = memory

    @rule(data=st.data(), second=st.booleans())
    def update_existing(self, data: st.DataObject, second: bool) -> None:
        if not self.model:
            return
        user, memory_id = data.draw(st.sampled_from(sorted(self.model)))
        changed = data.draw(small_memories(user_id=user, memory_id=memory_id))
        self.write(second, upserts=[changed])
        self.model[(user, memory_id)] = changed

    @rule(
        keys=st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(IDS)), max_size=4),
        second=st.booleans(),
    )
    def delete(self, keys: list[tuple[str, str]], second: bool) -> None:
        stubs = [Memory(i, u, "x", MemoryType.SEMANTIC, Kind.FACT, NOW, NOW) for u, i in keys]
        self.write(second, deletes=stubs)
        for key in keys:
            self.model.pop(key, None)

    @rule(
        batch=st.lists(small_memories(), min_size=1, max_size=3),
        at=st.integers(0, 3),
        second=st.booleans(),
    )
    def failed_write(self, batch: list[Memory], at: int, second: bool) -> None:
        """A batch that breaks on one item: nothing of it lands, whichever list it is in (the
        upserts run first, so a broken delete must undo them)."""
        broken = [*batch[:at], cast(Memory, _Unwritable()), *batch[at:]]
        stores = (self.connections[int(second)], self.reference)
        for store in stores:
            with pytest.raises(_Boom):
                store.write(upserts=batch, deletes=broken)
            with pytest.raises(_Boom):
                store.write(upserts=broken)

    @rule(
        user=st.sampled_from(USERS),
        memory_ids=st.lists(st.sampled_from(IDS), max_size=3),
        minutes=st.integers(0, 100),
        second=st.booleans(),
    )
    def record_access(self, user: str, memory_ids: list[str], minutes: int, second: bool) -> None:
        at = NOW + timedelta(minutes=minutes)
        counting = self.connections[int(second)]
        counting.record_access(user, memory_ids, at)
        with counting._lock:  # its counts committed (by default they follow the call)
            pass
        self.reference.record_access(user, memory_ids, at)
        for memory_id in memory_ids:
            if (old := self.model.get((user, memory_id))) is not None:
                self.model[(user, memory_id)] = old.evolve(
                    access_count=old.access_count + 1, last_accessed_at=at
                )

    @rule(user=st.sampled_from(USERS), flt=filters,
          limit=st.none() | st.integers(0, 4), offset=st.integers(0, 3))  # fmt: skip
    def query_matches(self, user: str, flt: MemoryFilter, limit: int | None, offset: int) -> None:
        expected = _expected_query(self.model, user, flt)
        expected = expected[offset : None if limit is None else offset + limit]
        for store in self.stores:
            assert_same(store.query(user, flt, limit=limit, offset=offset), expected)
            assert store.count(user, flt) == len(_expected_query(self.model, user, flt))

    @rule(user=st.sampled_from(USERS), vector=unit_vectors, k=st.integers(1, 8), flt=filters)
    def search_matches(self, user: str, vector: Vector, k: int, flt: MemoryFilter) -> None:
        candidates = [m for m in _expected_query(self.model, user, flt) if m.embedding is not None]
        best = sorted((_similarity(m, vector) for m in candidates), reverse=True)[:k]

        for store in self.stores:
            found = store.search(user, vector, k, flt)

            # equal similarities may come back in either order: compare scores, then each hit
            assert [s for _, s in found] == pytest.approx(best, abs=1e-5)
            for memory, score in found:
                assert_same([memory], [self.model[(user, memory.id)]])
                assert flt.matches(memory)
                assert score == pytest.approx(_similarity(memory, vector), abs=1e-5)

    @rule(user=st.sampled_from(USERS), words=st.lists(st.sampled_from(WORDS), min_size=1),
          k=st.integers(1, 8), flt=filters)  # fmt: skip
    def lexical_search_stays_within_the_filter(
        self, user: str, words: list[str], k: int, flt: MemoryFilter
    ) -> None:
        for store in self.stores:
            found = store.lexical_search(user, " ".join(words), k, flt)

            assert len(found) <= k
            assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
            for memory, score in found:
                assert_same([memory], [self.model[(user, memory.id)]])
                assert flt.matches(memory)
                assert score > 0 and set(memory.content.split()) & set(words)

    @rule(user=st.sampled_from(USERS), wanted=st.lists(st.sampled_from(IDS), max_size=8))
    def get_matches(self, user: str, wanted: list[str]) -> None:
        expected = [self.model[(user, i)] for i in wanted if (user, i) in self.model]
        for store in self.stores:
            assert_same(store.get(user, wanted), expected)

    @invariant()
    def centroid_is_the_mean(self) -> None:
        for user in USERS:
            vectors = [
                m.embedding
                for (u, _), m in self.model.items()
                if u == user and m.embedding is not None
            ]
            for store in self.stores:
                centroid = store.centroid(user)
                if not vectors:
                    assert centroid is None
                else:
                    assert centroid is not None
                    np.testing.assert_allclose(centroid, np.mean(vectors, axis=0), atol=1e-5)

    @invariant()
    def every_user_sees_exactly_their_memories(self) -> None:
        for store in self.stores:
            assert store.users() == sorted({u for u, _ in self.model})
            for user in USERS:
                assert_same(store.query(user), _expected_query(self.model, user, MemoryFilter()))

    def teardown(self) -> None:
        for store in self.connections:
            store.close()
        shutil.rmtree(self.directory, ignore_errors=True)


StoresAgainstDict.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # one shrunk failure, no explain phase: a failing run takes seconds, not minutes
    report_multiple_bugs=False, phases=[p for p in Phase if p is not Phase.explain],
)  # fmt: skip
test_stores_behave_like_a_dict = StoresAgainstDict.TestCase
