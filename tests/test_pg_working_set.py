"""A large PostgreSQL user's working set in process (``store/postgres/working.py``): served
only while the user's revision says it holds what the database holds, access counts of
other processes applied, this process's own writes applied in place, anything else served
by SQL until it is read again. Every change made through a *second* store is a change
another process makes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from engrain.errors import ConfigError
from engrain.store.base import Patch
from engrain.store.postgres import working

from .conftest import NOW
from .test_store_contract import ids, mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
PostgresStore = postgres.PostgresStore

WORDS = [
    "deploy",
    "billing",
    "roadmap",
    "login",
    "budget",
    "tabs",
    "schedule",
    "owner",
    "review",
    "release",
    "incident",
    "database",
    "cache",
    "latency",
    "spaces",
    "team",
    "friday",
    "meeting",
    "customer",
    "invoice",
    "pager",
    "backup",
    "search",
    "index",
]


def _memories(n: int, user: str = "alice", start: int = 0) -> list[Any]:
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        size = int(rng.integers(2, 9))
        words = " ".join(WORDS[j] for j in rng.choice(len(WORDS), size=size, replace=False))
        out.append(mem(f"m{i:04d}", user, minutes=i, content=f"note {i} about {words}",
                       vector=tuple(rng.standard_normal(4))))  # fmt: skip
    return out


@pytest.fixture
def stores(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Any]]:
    """``mine`` holds working sets of users with 20 memories or more (reloaded without a
    pause: the tests wait for them), ``theirs`` (another process) writes, ``sql`` never
    holds one (the reference)."""
    monkeypatch.setattr(working, "RELOAD_PAUSE", 0.0)
    mine = PostgresStore(pg_url, pool_size=3, working_set_min=20)
    theirs = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    sql = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    yield mine, theirs, sql
    for store in (mine, theirs, sql):
        store.close()


def _held(store: Any, user: str = "alice") -> bool:
    """Whether ``store`` serves the user from a current working set right now."""
    return store._working.current(user) is not None


def _same_results(mine: Any, sql: Any, user: str = "alice") -> None:
    rng = np.random.default_rng(7)
    for _ in range(5):
        query = rng.standard_normal(4).astype(np.float32)
        got, want = mine.search(user, query, 10), sql.search(user, query, 10)
        assert ids([m for m, _ in got]) == ids([m for m, _ in want])
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    for text in ("deploy budget", "billing owner schedule", "roadmap"):
        got, want = mine.lexical_search(user, text, 10), sql.lexical_search(user, text, 10)
        # equal scores, equal rows above the last score (ties at the cut may differ:
        # SQL breaks them by id, the working set by row, as the SQLite store does)
        assert [round(s, 5) for _, s in got] == [round(s, 5) for _, s in want]
        last = round(want[-1][1], 5) if want else 0.0
        assert [(m.id, m.access_count) for m, s in _by_score(got) if round(s, 5) > last] == [
            (m.id, m.access_count) for m, s in _by_score(want) if round(s, 5) > last
        ]


def _by_score(hits: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
    return sorted(hits, key=lambda h: (-round(h[1], 5), h[0].id))


def test_a_large_user_is_served_from_the_working_set_with_the_same_results(stores: Any) -> None:
    mine, theirs, sql = stores
    theirs.write(_memories(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    _same_results(mine, sql)
    assert _held(mine)


def test_a_small_user_never_gets_one(stores: Any) -> None:
    mine, theirs, _ = stores
    theirs.write(_memories(5))
    assert not mine.wait_for_working_set("alice", timeout=30)
    assert len(mine.search("alice", np.ones(4, dtype=np.float32), 10)) == 5


def test_a_memory_another_process_writes_is_never_missed(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs, sql = stores
    monkeypatch.setattr(working, "DELTA_MAX", 0)  # no row read in the call: SQL serves it
    theirs.write(_memories(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    target = mem("new", content="quokka zebra", vector=(0.0, 0.0, 0.0, 1.0))
    theirs.write([target])
    assert not _held(mine)  # the revision moved: served by SQL
    assert mine.search("alice", np.array([0, 0, 0, 1], dtype=np.float32), 1)[0][0].id == "new"
    assert mine.lexical_search("alice", "quokka", 5)[0][0].id == "new"
    assert mine.wait_for_working_set("alice", timeout=30)  # read again, with it
    assert mine.lexical_search("alice", "quokka", 5)[0][0].id == "new"
    _same_results(mine, sql)


def test_a_memory_another_process_forgets_is_never_returned(stores: Any) -> None:
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    query = np.asarray(memories[3].embedding, dtype=np.float32)
    assert mine.search("alice", query, 1)[0][0].id == memories[3].id
    theirs.write(deletes=[memories[3]])
    assert memories[3].id not in ids([m for m, _ in mine.search("alice", query, 40)])
    assert mine.wait_for_working_set("alice", timeout=30)
    assert memories[3].id not in ids([m for m, _ in mine.search("alice", query, 40)])
    _same_results(mine, sql)


def test_access_counts_of_another_process_are_applied_without_a_reload(stores: Any) -> None:
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    cache = mine._working.current("alice")
    at = NOW + timedelta(days=2)
    theirs.record_access("alice", [memories[0].id, memories[0].id, memories[5].id], at)
    query = np.asarray(memories[0].embedding, dtype=np.float32)
    best = mine.search("alice", query, 1)[0][0]
    assert (best.id, best.access_count, best.last_accessed_at) == (memories[0].id, 2, at)
    assert mine._working.current("alice") is cache  # the same working set, counted
    _same_results(mine, sql)


def test_two_threads_checking_the_same_counts_apply_them_once(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reads of one ``context()`` run in several threads at once (``store/reads.py``),
    each checking the working set: two that read the same counted uses before either has
    applied them count each use once (session 17: both added them, so the next call scored
    the working set's memories with twice their uses and showed another block)."""
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    used = [memories[0].id, memories[5].id, memories[5].id]
    theirs.record_access("alice", used, NOW + timedelta(days=1))
    checked = threading.Barrier(2, timeout=30)  # both checks list the uses before either applies
    # the race: both read the counts held before either adds the uses it finds missing
    applying = threading.Barrier(2, timeout=3)
    check, held_counts = mine._working._check, working._held_counts

    def check_together(*args: Any) -> Any:
        found = check(*args)
        checked.wait()
        return found

    def held_together(*args: Any) -> Any:
        found = held_counts(*args)
        with contextlib.suppress(threading.BrokenBarrierError):
            applying.wait()  # fixed: the other thread waits, then finds the uses applied
        return found

    with monkeypatch.context() as patched:
        patched.setattr(mine._working, "_check", check_together)
        patched.setattr(working, "_held_counts", held_together)
        served: list[Any] = []

        def call() -> None:
            served.append(mine._working.current("alice"))

        threads = [threading.Thread(target=call) for _ in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(served) == 2 and None not in served  # both served from the working set
    assert _held(mine)
    query = np.ones(4, dtype=np.float32)
    held = {m.id: m.access_count for m, _ in mine.search("alice", query, 40)}
    assert {i: held[i] for i in used} == {memories[0].id: 1, memories[5].id: 2}
    assert held == {m.id: m.access_count for m, _ in sql.search("alice", query, 40)}


def test_counts_of_both_processes_read_by_threads_meanwhile_are_the_stored_ones(
    stores: Any,
) -> None:
    """Threads served from the working set while this process counts uses and promotes
    and another process counts uses: once they stop, every memory's count and promotion
    in the working set is the one stored (before session 17 the threads' checks added
    uses twice: the held counts ended above the stored ones in most runs)."""
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    stop = threading.Event()
    failed: list[BaseException] = []

    def read() -> None:
        rng = np.random.default_rng()
        try:
            while not stop.is_set():
                mine.search("alice", rng.standard_normal(4).astype(np.float32), 5)
        except BaseException as exc:  # reported below: a thread's error fails the test
            failed.append(exc)

    def count_own() -> None:
        rng = np.random.default_rng(1)
        for i in range(40):
            used = [memories[j].id for j in rng.choice(40, 3, replace=False)]
            at = NOW + timedelta(minutes=i)
            mine.record_uses("alice", used, at)
            if i % 7 == 0:
                mine.write(patches=[Patch("alice", used[0], {"promoted_at": at})])

    readers = [threading.Thread(target=read) for _ in range(3)]
    own = threading.Thread(target=count_own)
    for thread in (*readers, own):
        thread.start()
    rng = np.random.default_rng(2)
    for i in range(40):
        used = [memories[j].id for j in rng.choice(40, 4, replace=False)]
        theirs.record_access("alice", used, NOW + timedelta(hours=1, minutes=i))
    own.join(60)
    stop.set()
    for thread in readers:
        thread.join(60)
    assert not failed
    assert _held(mine)
    query = np.ones(4, dtype=np.float32)
    got = {m.id: (m.access_count, m.promoted_at) for m, _ in mine.search("alice", query, 40)}
    assert got == {m.id: (m.access_count, m.promoted_at) for m, _ in sql.search("alice", query, 40)}


def test_this_process_writes_are_applied_in_place(stores: Any) -> None:
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    mine.write(
        upserts=[mem("mine", content="wombat", vector=(0.0, 0.0, 1.0, 0.0))],
        deletes=[memories[1]],
        patches=[Patch("alice", memories[2].id, {"pinned": True, "content": "capybara"})],
    )
    assert _held(mine)  # applied, not reloaded
    assert mine.lexical_search("alice", "wombat", 1)[0][0].id == "mine"
    hit = mine.lexical_search("alice", "capybara", 1)[0][0]
    assert (hit.id, hit.pinned) == (memories[2].id, True)
    found = ids([m for m, _ in mine.search("alice", np.ones(4, dtype=np.float32), 50)])
    assert memories[1].id not in found and "mine" in found
    _same_results(mine, sql)


def test_an_own_write_with_another_between_brings_both_in(stores: Any) -> None:
    mine, theirs, sql = stores
    theirs.write(_memories(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    ws = mine._working
    held = ws._held["alice"]
    theirs.write([mem("theirs", content="axolotl")])  # R + 1
    mine.write([mem("mine", content="wombat")])  # R + 2: the rows changed since R applied
    assert ws._held.get("alice") is held and held.revision == mine.revision("alice")
    by_sql = ws.calls["by_sql"]
    assert mine.lexical_search("alice", "axolotl", 1)[0][0].id == "theirs"
    assert mine.lexical_search("alice", "wombat", 1)[0][0].id == "mine"
    assert ws.calls["by_sql"] == by_sql  # both served in process
    _same_results(mine, sql)


def test_full_loads_pause_after_each_full_load(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working, "RELOAD_PAUSE", 3600.0)
    monkeypatch.setattr(working, "DELTA_MAX", 2)
    mine = PostgresStore(pg_url, pool_size=2, working_set_min=20)
    theirs = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    try:
        memories = _memories(40)
        theirs.write(memories)
        assert mine.wait_for_working_set("alice", timeout=30)
        # more than REFRESH_SHARE of the rows change: only a full load would do
        theirs.write([mem("x", content="axolotl")], deletes=memories[:20])
        assert not mine.wait_for_working_set("alice", timeout=30)  # none before the pause
        assert mine.lexical_search("alice", "axolotl", 1)[0][0].id == "x"  # by SQL
        found = ids([m for m, _ in mine.search("alice", np.ones(4), 50)])
        assert not set(found) & {m.id for m in memories[:20]}
    finally:
        mine.close()
        theirs.close()


def test_a_user_above_the_largest_size_stays_with_sql(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs, _ = stores
    monkeypatch.setattr(working, "WORKING_SET_MAX", 30)
    theirs.write(_memories(40))
    assert not mine.wait_for_working_set("alice", timeout=30)


def test_the_threshold_comes_from_the_environment() -> None:
    assert working.working_set_min({}) is None  # off unless turned on
    assert not working.working_set_asked({"ENGRAIN_PG_WORKING_SET": "on"})
    assert working.working_set_asked({"ENGRAIN_PG_WORKING_SET": "5000"})
    assert working.working_set_min({"ENGRAIN_PG_WORKING_SET": "on"}) == working.WORKING_SET_MIN
    assert working.working_set_min({"ENGRAIN_PG_WORKING_SET": "off"}) is None
    assert working.working_set_min({"ENGRAIN_PG_WORKING_SET": "5000"}) == 5000
    with pytest.raises(ConfigError, match="ENGRAIN_PG_WORKING_SET='lots'"):
        working.working_set_min({"ENGRAIN_PG_WORKING_SET": "lots"})


def test_a_reload_pauses_four_times_its_duration() -> None:
    assert working._pause(0.1) == working.RELOAD_PAUSE
    assert working._pause(10.0) == 40.0
    assert working._pause(0.1, full=False) == pytest.approx(0.4)


def test_random_writes_of_two_processes_are_always_seen_exactly(stores: Any) -> None:
    """Writes, forgets, pins and counted uses by either store in random order: after each,
    ``mine`` returns every live memory and no forgotten one, whether it serves the call from
    its working set or by SQL (it is let to reload now and then)."""
    mine, theirs, sql = stores
    rng = np.random.default_rng(3)
    live: dict[str, Any] = {m.id: m for m in _memories(40)}
    theirs.write(list(live.values()))
    served = 0
    for step in range(30):
        writer = mine if rng.random() < 0.4 else theirs
        action = rng.choice(["add", "forget", "pin", "use"])
        if action == "add" or len(live) < 30:
            memory = mem(f"r{step}", content=f"token{step} deploy", vector=(0.0, 1.0, 0.0, 0.0))
            writer.write([memory])
            live[memory.id] = memory
        elif action == "forget":
            gone = live.pop(sorted(live)[int(rng.integers(len(live)))])
            writer.write(deletes=[gone])
        elif action == "pin":
            writer.write(patches=[Patch("alice", sorted(live)[0], {"pinned": True})])
        else:
            writer.record_access("alice", sorted(live)[:3], NOW + timedelta(minutes=step))
        if step % 10 == 9:
            assert mine.wait_for_working_set("alice", timeout=30)
        served += _held(mine)
        found = ids([m for m, _ in mine.search("alice", np.ones(4, dtype=np.float32), 500)])
        assert sorted(found) == sorted(live)
        for memory_id in [i for i in live if i.startswith("r")][-3:]:
            token = live[memory_id].content.split()[0]
            assert ids([m for m, _ in mine.lexical_search("alice", token, 5)]) == [memory_id]
        want = {m.id: m.access_count for m, _ in sql.search("alice", np.ones(4), 500)}
        got = {m.id: m.access_count for m, _ in mine.search("alice", np.ones(4), 500)}
        assert got == want
    assert served > 0  # the working set served some of the calls


def test_another_process_write_is_read_as_a_delta_not_a_full_load(stores: Any) -> None:
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    cache = mine._working.current("alice")
    theirs.write(
        upserts=[mem("new", content="quokka")],
        deletes=[memories[4]],
        patches=[Patch("alice", memories[6].id, {"content": "capybara"})],
    )
    assert mine.wait_for_working_set("alice", timeout=30)
    assert mine._working.current("alice") is cache  # the same working set, brought up to date
    assert mine.lexical_search("alice", "quokka", 1)[0][0].id == "new"
    assert mine.lexical_search("alice", "capybara", 1)[0][0].id == memories[6].id
    assert memories[4].id not in ids([m for m, _ in mine.search("alice", np.ones(4), 50)])
    _same_results(mine, sql)


def test_calls_served_and_sent_to_sql_are_counted(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs, _ = stores
    theirs.write(_memories(40))
    assert mine.wait_for_working_set("alice", timeout=30)
    calls = mine._working.calls
    served = calls["served"]
    mine.lexical_search("alice", "deploy", 3)
    assert calls["served"] == served + 1
    theirs.write(patches=[Patch("alice", "m0001", {"content": "axolotl"})])
    caught_up, by_sql = calls["caught_up"], calls["by_sql"]
    assert mine.lexical_search("alice", "axolotl", 3)[0][0].id == "m0001"
    assert (calls["caught_up"], calls["by_sql"]) == (caught_up + 1, by_sql)
    monkeypatch.setattr(working, "DELTA_MAX", 1)
    two = [Patch("alice", i, {"content": "okapi"}) for i in ("m0002", "m0003")]
    theirs.write(patches=two)  # two rows: more than a call applies
    assert ids([m for m, _ in mine.lexical_search("alice", "okapi", 3)]) == ["m0002", "m0003"]
    assert calls["by_sql"] == by_sql + 1


def test_a_delta_may_follow_a_full_load_at_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause after a (long) full load holds back the next full load, not the deltas
    that keep the working set current."""
    monkeypatch.setattr(working, "RELOAD_PAUSE", 3600.0)
    monkeypatch.setattr(working, "DELTA_MAX", 0)  # the delta read by the load, not the call
    mine = PostgresStore(pg_url, pool_size=2, working_set_min=20)
    theirs = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    try:
        theirs.write(_memories(40))
        assert mine.wait_for_working_set("alice", timeout=30)
        theirs.write([mem("x", content="axolotl")])
        assert mine.wait_for_working_set("alice", timeout=30)  # a delta, despite the pause
        assert mine.lexical_search("alice", "axolotl", 1)[0][0].id == "x"
        assert mine._working.calls["served"] > 0
    finally:
        mine.close()
        theirs.close()


def test_another_process_patches_are_applied_in_the_call(stores: Any) -> None:
    """Rows another process changes in place (a pin, an edit, a promotion) are read in the
    call that first sees the new revision (``row_changes``, migration 008) and served from
    the same working set: no call goes to SQL, and what it returns is the database's."""
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    ws = mine._working
    cache, by_sql = ws.current("alice"), ws.calls["by_sql"]
    theirs.write(
        patches=[
            Patch("alice", memories[6].id, {"content": "capybara", "pinned": True}),
            Patch("alice", memories[7].id, {"pinned": True}),
        ]
    )
    hit = mine.lexical_search("alice", "capybara", 1)[0][0]
    assert (hit.id, hit.pinned) == (memories[6].id, True)
    query = np.asarray(memories[7].embedding, dtype=np.float32)
    best = mine.search("alice", query, 1)[0][0]
    assert (best.id, best.pinned) == (memories[7].id, True)
    assert ws.calls["by_sql"] == by_sql and ws.calls["caught_up"] == 1
    assert ws.current("alice") is cache
    _same_results(mine, sql)


def test_another_process_inserts_and_forgets_go_to_sql_until_applied(stores: Any) -> None:
    """A new or forgotten row costs the columns and BM25 a copy: the call that sees it is
    served by SQL (never a forgotten memory, never a missed one) and the load thread applies
    the rows; the working set then serves with them."""
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    ws = mine._working
    cache, by_sql = ws.current("alice"), ws.calls["by_sql"]
    theirs.write(
        upserts=[mem("new", content="quokka", vector=(0.0, 0.0, 0.0, 1.0))],
        deletes=[memories[4]],
    )
    assert mine.search("alice", np.array([0, 0, 0, 1], dtype=np.float32), 1)[0][0].id == "new"
    query = np.asarray(memories[4].embedding, dtype=np.float32)
    assert memories[4].id not in ids([m for m, _ in mine.search("alice", query, 50)])
    assert ws.calls["by_sql"] > by_sql and ws.calls["caught_up"] == 0
    assert mine.wait_for_working_set("alice", timeout=30)
    assert ws.current("alice") is cache  # brought up to date by the load thread
    assert mine.lexical_search("alice", "quokka", 1)[0][0].id == "new"
    _same_results(mine, sql)


def test_a_forgotten_memory_written_again_comes_back_once(stores: Any) -> None:
    mine, theirs, sql = stores
    memories = _memories(40)
    theirs.write(memories)
    assert mine.wait_for_working_set("alice", timeout=30)
    theirs.write(deletes=[memories[2]])
    assert memories[2].id not in ids([m for m, _ in mine.search("alice", np.ones(4), 50)])
    theirs.write([memories[2]])
    found = ids([m for m, _ in mine.search("alice", np.ones(4), 50)])
    assert found.count(memories[2].id) == 1 and len(found) == 40
    _same_results(mine, sql)


def test_one_full_load_runs_at_a_time(stores: Any) -> None:
    """While another user's full load holds the process's slot, a user is served by SQL
    and its load waits for a later call (two loads at once would hold two users' rows and
    graphs in memory at the same time)."""
    mine, theirs, _ = stores
    theirs.write(_memories(40))
    ws = mine._working
    with ws._full_load:  # another user's load, running
        assert not mine.wait_for_working_set("alice", timeout=5)
        assert len(mine.search("alice", np.ones(4, dtype=np.float32), 50)) == 40  # by SQL
        assert "alice" not in ws._held
    assert mine.wait_for_working_set("alice", timeout=30)


def test_turned_on_sizes_are_learned_from_the_sql_paths_own_reads(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turned on (``ENGRAIN_PG_WORKING_SET=on``) a user without a working set costs no
    statement of its own: the size comes from BM25's statistics or the search plan's
    read, and a large user's load starts from there."""
    monkeypatch.setenv("ENGRAIN_PG_WORKING_SET", "on")
    monkeypatch.setattr(working, "WORKING_SET_MIN", 20)
    monkeypatch.setattr(working, "RELOAD_PAUSE", 0.0)
    mine = PostgresStore(pg_url, pool_size=2)
    theirs = PostgresStore(pg_url, pool_size=2, working_set_min=None)
    try:
        assert mine._working.learned
        theirs.write(_memories(5, user="bob"))
        theirs.write(_memories(40))
        assert mine._working.current("bob") is None and "bob" not in mine._working._sizes
        mine.lexical_search("bob", "deploy budget roadmap", 3)
        assert mine._working._sizes["bob"][0] == 5
        mine.lexical_search("alice", "deploy budget roadmap", 3)  # by SQL: starts the load
        assert mine._working._sizes["alice"][0] == 40
        assert mine.wait_for_working_set("alice", timeout=30)
        assert not mine.wait_for_working_set("bob", timeout=5)
    finally:
        mine.close()
        theirs.close()


@pytest.mark.parametrize("failure", ["database", "memory"])
def test_a_write_whose_working_set_cannot_catch_up_succeeds_and_is_seen(
    stores: Any, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """After this process's write commits, its working set reads the rows changed since: a
    failure there (the database gone for a moment, memory out while copying the arrays)
    reported the committed write as failed. Now the write succeeds, the working set is
    dropped, and the next calls give SQL's answers (the write included)."""
    import psycopg

    mine, theirs, sql = stores
    theirs.write(_memories(40))
    assert mine.wait_for_working_set("alice", timeout=30)

    def fails(*args: Any, **kwargs: Any) -> bool:
        if failure == "memory":
            raise MemoryError
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(working.WorkingSets, "_catch_up", fails)
    mine.write(_memories(3, start=40))  # committed: succeeds
    monkeypatch.undo()
    assert {"m0040", "m0041", "m0042"} <= {m.id for m in sql.get("alice", ["m0040", "m0041",
                                                                           "m0042"])}  # fmt: skip
    _same_results(mine, sql)
