"""The browse stage behind the inspector's table (``browse.py``, ``Engine.browse``): every
filter, the search, the sorts, and keyset pages that show each memory exactly once, on the
in-memory and SQLite stores; the relations of one memory."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engrain import Engine
from engrain import browse as browse_module
from engrain.browse import Browse, Sort, decode_cursor, encode_cursor
from engrain.corrections import flag
from engrain.embed import HashEmbedder
from engrain.errors import NotFoundError, ValidationError
from engrain.model import Kind, Memory, MemoryType
from engrain.store import MemoryStore
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

WORDS = ["deploy", "port", "invoice", "tabs", "coffee", "staging", "friday", "backup"]
PROJECTS = [None, "web", "billing"]
DOMAINS = [(), ("ops",), ("ops", "db"), ("finance",)]


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine over the in-memory and the SQLite store (the two working-set stores)."""
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "b.db")
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    yield eng
    eng.close()


def _population(engine: Engine, user: str = "ada", n: int = 120, seed: int = 7) -> list[Memory]:
    """``n`` memories of ``user`` with every flag and label mixed, written directly (ties in
    time, counts and importance on purpose: the cursor must break them by id)."""
    rng = random.Random(seed)
    embed = HashEmbedder()
    memories = []
    for i in range(n):
        kind = rng.choice(list(Kind))
        text = f"note {i} about {rng.choice(WORDS)} and {rng.choice(WORDS)}"
        used = None if rng.random() < 0.3 else NOW + timedelta(hours=rng.randrange(3))
        memory = Memory.new(
            user, text, kind.default_memory_type, kind,
            now=NOW + timedelta(minutes=rng.randrange(30)),
            embedding=embed.embed([text])[0], project=rng.choice(PROJECTS),
            domains=rng.choice(DOMAINS), pinned=rng.random() < 0.2, muted=rng.random() < 0.2,
            importance=rng.choice([0.3, 0.5, 1.0]), access_count=rng.randrange(4),
            last_accessed_at=used,
        )  # fmt: skip
        memories.append(memory)
    for a, b in zip(memories[0:10:2], memories[1:10:2], strict=True):  # five conflicting pairs
        memories[memories.index(a)] = flag(a, [b.id])
        memories[memories.index(b)] = flag(b, [a.id])
    memories[20] = memories[20].evolve(superseded_by=memories[21].id)
    memories[22] = memories[22].evolve(superseded_by=memories[23].id)
    engine.store.write(memories)
    return engine.store.query(user)


def _walk(engine: Engine, user: str = "ada", limit: int = 7, **filters: Any) -> list[Memory]:
    """Every page of a browse, following the cursors to the end."""
    shown: list[Memory] = []
    cursor = None
    for _ in range(1000):
        page = engine.browse(user, limit=limit, cursor=cursor, **filters)
        assert len(page.memories) <= limit
        shown.extend(page.memories)
        cursor = page.next_cursor
        if cursor is None:
            return shown
    raise AssertionError("the cursor never ended")


FILTERS: list[tuple[dict[str, Any], Callable[[Memory], bool]]] = [
    ({"memory_types": ["procedural"]}, lambda m: m.memory_type is MemoryType.PROCEDURAL),
    ({"kinds": ["decision", "fact"]}, lambda m: m.kind in (Kind.DECISION, Kind.FACT)),
    ({"domain": "ops"}, lambda m: "ops" in m.domains),
    ({"project": "web"}, lambda m: m.project == "web"),
    ({"pinned": True}, lambda m: m.pinned),
    ({"pinned": False}, lambda m: not m.pinned),
    ({"muted": True}, lambda m: m.muted),
    ({"muted": False}, lambda m: not m.muted),
    ({"superseded": True}, lambda m: m.superseded_by is not None),
    ({"superseded": False}, lambda m: m.superseded_by is None),
    ({"conflicting": True}, lambda m: bool(m.provenance.metadata.get("conflicts_with"))),
    ({"conflicting": False}, lambda m: not m.provenance.metadata.get("conflicts_with")),
    ({"projects": ["billing"]}, lambda m: m.project == "billing"),
    ({"domain": "ops", "muted": False, "project": "web"},
     lambda m: "ops" in m.domains and not m.muted and m.project == "web"),
]  # fmt: skip


@pytest.mark.parametrize(  # a filter's id is its text, the same in every process (xdist)
    ("filters", "wanted"), FILTERS, ids=lambda v: str(v)[:40] if isinstance(v, dict) else None
)
def test_each_filter_shows_exactly_its_memories(
    engine: Engine, filters: dict[str, Any], wanted: Callable[[Memory], bool]
) -> None:
    everything = _population(engine)
    expected = {m.id for m in everything if wanted(m)}
    assert expected and expected != {m.id for m in everything}  # the filter narrows
    shown = _walk(engine, **filters)
    assert [m.id for m in shown if m.id in expected] == [m.id for m in shown]
    assert {m.id for m in shown} == expected
    assert engine.browse("ada", **filters).total == len(expected)


@pytest.mark.parametrize("sort", ["updated", "used", "importance"])
def test_pages_walk_every_memory_once_in_order(engine: Engine, sort: str) -> None:
    everything = _population(engine)
    shown = _walk(engine, sort=sort)
    assert len(shown) == len({m.id for m in shown}) == len(everything)
    keys = {
        "updated": lambda m: (m.updated_at, m.id),
        "used": lambda m: (
            m.access_count,
            m.last_accessed_at or NOW - timedelta(days=1e5),
            m.updated_at,
            m.id,
        ),
        "importance": lambda m: (m.importance, m.updated_at, m.id),
    }[sort]
    assert shown == sorted(everything, key=keys, reverse=True)


def test_the_default_order_is_the_stores(engine: Engine) -> None:
    everything = _population(engine)
    assert _walk(engine, limit=50) == everything  # most recently updated first, ties by id


def test_a_memory_added_between_pages_shifts_nothing(engine: Engine) -> None:
    everything = _population(engine)
    first = engine.browse("ada", limit=30)
    engine.remember("a brand new note about coffee", "ada", now=NOW + timedelta(days=1))
    engine.forget(first.memories[0].id, "ada")
    rest: list[Memory] = []
    cursor = first.next_cursor
    while cursor is not None:
        page = engine.browse("ada", limit=30, cursor=cursor)
        rest.extend(page.memories)
        cursor = page.next_cursor
    # the new memory sorts before the cursor, the forgotten one was already shown
    assert [m.id for m in first.memories + rest] == [m.id for m in everything]


def test_search_finds_only_memories_sharing_a_word_best_first(engine: Engine) -> None:
    _population(engine)
    page = engine.browse("ada", text="invoice", limit=200)
    assert page.sort is Sort.RELEVANCE
    assert page.memories and all("invoice" in m.content.lower() for m in page.memories)
    score = {m.id: s for m, s in engine.store.lexical_search("ada", "invoice", 200)}
    assert set(score) == {m.id for m in page.memories}
    shown = [score[m.id] for m in page.memories]
    assert shown == sorted(shown, reverse=True) and shown[0] > shown[-1]  # best BM25 first
    everything = engine.store.query("ada")
    assert page.total == sum("invoice" in m.content for m in everything)
    assert _walk(engine, text="invoice", limit=3) == page.memories
    pinned = engine.browse("ada", text="invoice", pinned=True, sort="updated", limit=200)
    assert {m.id for m in pinned.memories} == {m.id for m in page.memories if m.pinned}
    assert engine.browse("ada", text="zebra").total == 0
    assert engine.browse("ada", text="   ").total == len(everything)  # blank: no search


def test_another_users_memories_never_appear(engine: Engine) -> None:
    mine = _population(engine, "ada", n=40)
    theirs = _population(engine, "bob", n=40, seed=8)
    assert {m.id for m in _walk(engine, "ada")} == {m.id for m in mine}
    assert {m.id for m in _walk(engine, "bob", text="note")} <= {m.id for m in theirs}
    with pytest.raises(NotFoundError):
        engine.relations(theirs[0].id, "ada")


def test_relations_show_conflicts_and_corrections(engine: Engine) -> None:
    old = engine.remember("The API listens on port 8080", "ada", now=NOW).memory_id
    new = engine.remember("The API listens on port 9090", "ada", now=NOW).memory_id
    assert old and new
    assert [m.id for m in engine.relations(old, "ada").conflicts] == [new]
    assert {m.id for m in engine.browse("ada", conflicting=True).memories} == {new, old}
    engine.resolve(new, old, "ada", "correct", now=NOW + timedelta(minutes=1))
    assert [m.id for m in engine.relations(new, "ada").corrects] == [old]
    assert engine.relations(old, "ada").corrected_by is not None
    assert engine.relations(old, "ada").conflicts == []
    assert [m.id for m in engine.browse("ada", superseded=True).memories] == [old]


@pytest.mark.parametrize(
    "bad",
    [{"sort": "random"}, {"limit": 0}, {"limit": True}, {"pinned": "yes"}, {"kinds": ["nope"]},
     {"memory_types": ["nope"]}, {"domain": ["a", "b"]}, {"cursor": "!!not-a-cursor!!"},
     {"projects": []}],
)  # fmt: skip
def test_bad_arguments_are_refused(mem_engine: Engine, bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        mem_engine.browse("ada", **bad)


def test_a_cursor_of_another_order_is_refused(mem_engine: Engine) -> None:
    _population(mem_engine, n=40)
    cursor = mem_engine.browse("ada", limit=5, sort="used").next_cursor
    assert cursor is not None
    with pytest.raises(ValidationError, match="cursor"):
        mem_engine.browse("ada", limit=5, sort="updated", cursor=cursor)
    key = (0.5, 12, "x")
    assert decode_cursor(encode_cursor(Sort.IMPORTANCE, key), Sort.IMPORTANCE) == key


def test_relevance_without_a_search_is_the_time_order() -> None:
    assert Browse(sort=Sort.RELEVANCE).order is Sort.UPDATED
    assert Browse(text="port").order is Sort.RELEVANCE
    assert Browse(text="port", sort=Sort.USED).order is Sort.USED


def test_the_used_order_sees_uses_counted_since_the_last_change(engine: Engine) -> None:
    everything = _population(engine)
    engine.browse("ada", sort="used")  # the index is built now
    rarest = min(everything, key=lambda m: (m.access_count, m.id))
    engine.store.record_access("ada", [rarest.id] * 50, NOW + timedelta(days=1))
    first = engine.browse("ada", sort="used", limit=1).memories[0]
    assert (first.id, first.access_count) == (rarest.id, rarest.access_count + 50)


def test_the_index_follows_every_change_like_a_fresh_one(engine: Engine) -> None:
    """After pins, mutes, edits, new memories, corrections and forgets, every view equals
    the one an index built from scratch gives (the index is updated, not rebuilt)."""
    everything = _population(engine, n=80)
    rng = random.Random(3)
    views: list[dict[str, Any]] = [{}, {"sort": "importance"}, {"pinned": True},
                                   {"domain": "ops"}, {"conflicting": True}, {"text": "port"},
                                   {"superseded": True, "muted": False}]  # fmt: skip
    alive = [m.id for m in everything]
    for step in range(12):
        target = rng.choice(alive)
        action = step % 6
        if action == 0:
            engine.pin(target, "ada", pinned=rng.random() < 0.5)
        elif action == 1:
            engine.update(target, "ada", content=f"edited about port {step}", domains=["ops"],
                          importance=rng.choice([0.2, 0.9]))  # fmt: skip
        elif action == 2:
            new = engine.remember(f"fresh note {step} about backup", "ada", now=NOW).memory_id
            assert new is not None
            alive.append(new)
        elif action == 3:
            engine.forget(target, "ada")
            alive.remove(target)
        elif action == 4:
            other = rng.choice([i for i in alive if i != target])
            if not any(m.superseded_by for m in engine.store.get("ada", [target, other])):
                engine.resolve(target, other, "ada", "correct")
        else:
            engine.mute(target, "ada", muted=True)
        for view in views:
            kept = [m.id for m in _walk(engine, limit=9, **view)]
            browse_module._INDEXES.clear()
            assert kept == [m.id for m in _walk(engine, limit=9, **view)], (step, view)


def test_postgres_browses_like_the_working_set_stores(pg_url: str, tmp_path: Path) -> None:
    """The stage uses only the storage protocol: PostgreSQL (no working set, rows decoded
    anew on every query, so every change rebuilds the index) gives the same pages."""
    from engrain.store.postgres import PostgresStore

    pg = Engine(settings=make_settings(tmp_path), store=PostgresStore(pg_url, pool_size=2),
                embedder=HashEmbedder())  # fmt: skip
    mem = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    try:
        everything = _population(mem, n=60)
        pg.store.write(everything)
        for view in ({}, {"sort": "used"}, {"domain": "ops", "muted": False},
                     {"text": "invoice", "sort": "updated"}, {"conflicting": True}):  # fmt: skip
            assert [m.id for m in _walk(pg, limit=8, **view)] == \
                [m.id for m in _walk(mem, limit=8, **view)], view  # fmt: skip
        pg.pin(everything[5].id, "ada", pinned=not everything[5].pinned)
        mem.pin(everything[5].id, "ada", pinned=not everything[5].pinned)
        assert [m.id for m in _walk(pg, pinned=True)] == [m.id for m in _walk(mem, pinned=True)]
    finally:
        pg.close()
        mem.close()


_USERS = st.sampled_from(["ada", "Ada", "ada ", "bob"])  # look-alikes are other users
_VIEWS = st.fixed_dictionaries({}, optional={
    "text": st.sampled_from(["port", "deploy tabs", "note"]),
    "pinned": st.booleans(), "muted": st.booleans(), "superseded": st.booleans(),
    "conflicting": st.booleans(), "domain": st.sampled_from(["ops", "db", "finance"]),
    "project": st.sampled_from(["web", "billing"]),
    "sort": st.sampled_from(["updated", "used", "importance", "relevance"]),
    "limit": st.integers(1, 30),
})  # fmt: skip


@pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(owners=st.lists(_USERS, min_size=1, max_size=40), viewer=_USERS, view=_VIEWS)
def test_a_user_never_sees_another_users_memory(
    tmp_path_factory: pytest.TempPathFactory,
    owners: list[str],
    viewer: str,
    view: dict[str, Any],
) -> None:
    engine = Engine(settings=make_settings(tmp_path_factory.mktemp("p")), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    rng = random.Random(len(owners))
    rows = [Memory.new(owner, f"note {i} about {rng.choice(WORDS)}", MemoryType.SEMANTIC,
                       Kind.FACT, now=NOW, project=rng.choice(PROJECTS),
                       domains=rng.choice(DOMAINS), pinned=rng.random() < 0.5)
            for i, owner in enumerate(owners)]  # fmt: skip
    engine.store.write(rows)
    mine = {m.id for m in rows if m.user_id == viewer}
    shown = _walk(engine, viewer, **view)
    assert {m.id for m in shown} <= mine
    assert all(m.user_id == viewer for m in shown)
    assert len(shown) == len({m.id for m in shown})


def _used_order(memories: list[Memory]) -> list[tuple[str, int]]:
    """The used order computed from scratch: uses, last use, time of writing, id."""

    def key(m: Memory) -> tuple[Any, ...]:
        last = float("-inf") if m.last_accessed_at is None else m.last_accessed_at.timestamp()
        return (m.access_count, last, m.updated_at.timestamp(), m.id)

    return [(m.id, m.access_count) for m in sorted(memories, key=key, reverse=True)]


@pytest.mark.parametrize("deferred", [False, True])
def test_the_used_order_follows_uses_counted_here_and_by_another_process(
    tmp_path: Path, deferred: bool
) -> None:
    """Contexts and counted uses in this engine and in another engine on the same file
    (another process's connection), with edits between: every walk of the used order equals
    a fresh sort of the memories as stored. With the counts written after the call (the
    default, ``ENGRAIN_DEFER_USES``) another process sees them once the store's thread has
    committed them: the walk follows any statement of the counting store."""
    path = tmp_path / "shared.db"
    stores = [SQLiteStore(path, defer_uses=deferred) for _ in range(2)]
    here, there = (
        Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
        for store in stores
    )
    try:
        everything = _population(here, n=60)
        rng = random.Random(11)
        for step in range(8):
            engine = here if step % 2 == 0 else there
            target = rng.choice(everything).id
            if step % 4 == 3:
                engine.pin(target, "ada", pinned=True)  # a change of revision between uses
            elif step % 3 == 0:
                engine.context(f"what about {rng.choice(WORDS)}", "ada", now=NOW)
            else:
                engine.store.record_access("ada", [target] * (step + 1),
                                           NOW + timedelta(days=step))  # fmt: skip
            with stores[step % 2]._lock:  # its waiting counts committed, if its thread has not
                pass
            walked = [(m.id, m.access_count) for m in _walk(here, limit=9, sort="used")]
            fresh = SQLiteStore(path)
            try:
                assert walked == _used_order(fresh.query("ada")), step
            finally:
                fresh.close()
    finally:
        here.close()
        there.close()


def _one_use_changes_one_object(store: SQLiteStore | MemoryStore, engine: Engine) -> Any:
    """The same mapping while nothing changes; after one counted use a new mapping in which
    only the memory touched is a new object, its count one higher. Returns the memories and
    the new mapping."""
    everything = _population(engine, n=30)
    first = store.working_set("ada")
    assert store.working_set("ada") is first
    store.record_access("ada", [everything[0].id], NOW)
    second = store.working_set("ada")
    assert second is not first
    assert [i for i in first if first[i] is not second[i]] == [everything[0].id]
    assert second[everything[0].id].access_count == everything[0].access_count + 1
    return everything, second


def test_the_working_set_mapping_changes_exactly_when_something_changed(tmp_path: Path) -> None:
    """What the used order relies on: the same mapping while nothing changes, a new one
    after a counted use here or in another connection, with a new object for the memory
    touched only."""
    path = tmp_path / "ws.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    try:
        engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
        everything, second = _one_use_changes_one_object(store, engine)
        other.record_access("ada", [everything[1].id], NOW)
        with other._lock:  # its count committed, if its store's thread has not yet
            pass
        third = store.working_set("ada")
        assert third is not second
        assert third[everything[1].id].access_count == everything[1].access_count + 1
    finally:
        store.close()
        other.close()


def test_the_memory_stores_working_set_changes_exactly_when_something_changed(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    everything, second = _one_use_changes_one_object(store, engine)
    engine.pin(everything[1].id, "ada")
    assert store.working_set("ada") is not second
