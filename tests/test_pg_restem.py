"""Migration 011 (``store/postgres/restem.py``): a database whose postings were stemmed by
the earlier stemmer ("killed" → "kil") holds, once migrated, exactly the postings and
document frequencies a store written by this tree holds; running it again changes nothing;
a second process opening meanwhile waits and finds it done; a migrator killed halfway
leaves every posting as it was, and the next open re-stems them all."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from engrain.errors import MigrationError
from engrain.model import Memory
from engrain.store import Patch, lexical

from .pg import new_schema, posting_rows
from .test_stem import EED, EED_SAME, FIXED, SAME
from .test_stem import stem_before as earlier_stemmer
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
import psycopg  # noqa: E402
import psycopg.errors  # noqa: E402

schema, restem, bm25 = postgres.schema, postgres.restem, postgres.bm25
PostgresStore = postgres.PostgresStore

_BEFORE = schema.MIGRATIONS[: [n for n, _ in schema.MIGRATIONS].index(restem.MIGRATION)]
SPAWN = mp.get_context("spawn")

#: Rows of two users: words the earlier stemmer cut ("killed", "passing", "filled",
#: "calling"; "agreed", "speed", "proceeds", "employees"), an old stem that is also a word
#: of its own ("kil"), words stemmed alike by both ("running", "planned", "speeds"), and
#: rows with none of them.
TEXTS = [
    "Ada killed the build twice, then killing it again was easy",
    "kill -9 the worker; kil is a typo of kill",
    "the tests passed after passing the flag",
    "Pass the salt. I filled the form and called Jo",
    "running the planned migration",
    "nothing changes in this one",
    "calling the API: called, calls, call",
    "she missed the train, dressed in blue",
    "we agreed on the speed limit; the proceeds exceeded it, indeed",
    "employees agree: speeds proceed, trees need feeding",
]


def test_the_migration_keeps_the_earlier_stemmer_as_it_was() -> None:
    words = [w for w, *_ in [*FIXED, *SAME, *EED, *EED_SAME]]
    words += ["ballooned", "fizzing", "1100ing", "kil", "aaeeed", "speeded"]
    assert [restem.stem_before(w) for w in words] == [earlier_stemmer(w) for w in words]


def test_restemmed_names_the_old_and_new_term_of_a_changed_token() -> None:
    assert restem.restemmed("killed") == ("kil", "kill")
    assert restem.restemmed("calling") == ("cal", "call")
    assert restem.restemmed("killer's") is None  # "killer": no "-ed" / "-ing"
    assert restem.restemmed("running") is None  # stemmed alike
    assert restem.restemmed("the") is None  # a stopword: no term either way
    assert restem.restemmed("agreed") == ("agre", "agree")
    assert restem.restemmed("speed") == ("spe", "speed")
    assert restem.restemmed("proceeds") == ("proceed", "procee")  # "-s", then "-eed" → "-ee"
    assert restem.restemmed("speeds") is None


def test_a_rows_changes_set_each_touched_term_to_the_new_count() -> None:
    # "kil" is a word of its own here: it keeps its posting, "killed"'s goes to "kill"
    assert restem.row_changes("Killed it; kil, kill. Passed!", 5) == {
        "kil": (1, 5),
        "kill": (2, 5),
        "pas": None,
        "pass": (1, 5),
    }
    assert restem.row_changes("running and planning", 2) == {}
    # "speeds" was "speed" before and is now: the count of "speed" takes in "speed" too
    assert restem.row_changes("speed, speeds; they agreed", 4) == {
        "agre": None,
        "agree": (1, 4),
        "spe": None,
        "speed": (2, 4),
    }


def _memories() -> list[Memory]:
    out = []
    for user in ("alice", "bob"):
        for i in range(30):
            text = f"{TEXTS[i % len(TEXTS)]} (note {i})"
            out.append(mem(f"{user[0]}{i:02d}", user, content=text))
    return out


@contextmanager
def _older_tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a tree before 011: the earlier stemmer, migrations up to 010."""
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        patch.setattr(lexical, "_stem", restem.stem_before)
        lexical.term.cache_clear()
        try:
            yield
        finally:
            lexical.term.cache_clear()
    lexical.term.cache_clear()


def _write(url: str, memories: list[Memory]) -> None:
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        store.write(memories)
    finally:
        store.close()


def _stemmed_before(url: str, monkeypatch: pytest.MonkeyPatch) -> list[Memory]:
    """A database at 010 written by the earlier stemmer; the memories written."""
    memories = _memories()
    with _older_tree(monkeypatch):
        _write(url, memories)
    return memories


def _term_stats(url: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(url, autocommit=True) as db:
        return {
            (u, t): int(df) for u, t, df in db.execute("SELECT user_id, term, df FROM term_stats")
        }


def _fresh(pg_server: str, memories: list[Memory]) -> str:
    """A schema where this tree wrote ``memories``: what 011 must leave."""
    url = new_schema(pg_server)
    _write(url, memories)
    return url


def _applied(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as db:
        return {r[0] for r in db.execute("SELECT name FROM migrations")}


def _found(url: str, query: str) -> set[str]:
    """Alice's memories this tree's BM25 finds for ``query`` (opening the store migrates)."""
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        return {m.id for m, _ in store.lexical_search("alice", query, 100)}
    finally:
        store.close()


def _found_unmigrated(url: str, query: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """:func:`_found` with this tree's stemmer on a database left before 011."""
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        return _found(url, query)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 postings: a term's list spans several, so a re-stem splits and empties
    some."""
    monkeypatch.setattr(bm25, "BLOCK", 4)


def test_a_database_stemmed_before_holds_a_fresh_stores_postings_once_migrated(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, small_blocks: None
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch)
    fresh = _fresh(pg_server, memories)
    expected, expected_df = posting_rows(fresh), _term_stats(fresh)
    assert posting_rows(url) != expected  # what the earlier stemmer stored
    assert ("alice", "kil") in _term_stats(url) and ("alice", "pas") in _term_stats(url)
    killed = {m.id for m in memories if m.user_id == "alice" and "killed" in m.content}
    assert killed and not killed & _found_unmigrated(url, "kill", monkeypatch)  # the defect
    agreed = {m.id for m in memories if m.user_id == "alice" and "agreed" in m.content}
    assert agreed and not agreed & _found_unmigrated(url, "agree", monkeypatch)
    assert ("alice", "agre") in _term_stats(url) and ("alice", "spe") in _term_stats(url)
    monkeypatch.setattr(restem, "REWRITE_ROWS", 3)  # several rounds of rewrites

    assert schema.migrate(url, "test") == [restem.MIGRATION]
    assert posting_rows(url) == expected
    assert _term_stats(url) == expected_df
    assert ("alice", "pas") not in expected_df  # no block holds it: no row
    assert killed <= _found(url, "kill") and killed <= _found(url, "killed")
    assert agreed <= _found(url, "agree") and agreed <= _found(url, "speeds")


def test_running_it_again_changes_nothing(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, small_blocks: None
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch)
    schema.migrate(url, "test")
    rows, stats = posting_rows(url), _term_stats(url)
    with psycopg.connect(url, autocommit=True) as db, db.transaction():
        restem.migrate(db)
    assert posting_rows(url) == rows and _term_stats(url) == stats
    assert rows == posting_rows(_fresh(pg_server, memories))


def test_writes_after_it_leave_no_stale_posting(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch)
    store = PostgresStore(url, pool_size=1, fill_in_background=False)  # migrates
    try:
        store.write(
            deletes=[m for m in memories if m.id == "a00"],
            patches=[Patch("alice", "a02", {"content": "nothing at all"})],
        )
    finally:
        store.close()
    kept = [m for m in memories if m.id != "a00"]
    fresh = new_schema(pg_server)
    _write(fresh, [m if m.id != "a02" else mem("a02", content="nothing at all") for m in kept])
    assert posting_rows(url) == posting_rows(fresh)
    assert _term_stats(url) == _term_stats(fresh)


def test_an_older_tree_refuses_the_database_after_it(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(pg_url, _memories())
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", _BEFORE)
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(pg_url, pool_size=1)


def _migrate_pausing(url: str, paused: Any, go: Any, kill_me: bool) -> None:
    """Run the migrations in this (spawned) process, stopping inside 011 after its first
    rewrite until ``go`` is set (or forever, to be killed)."""
    apply = restem._apply

    def apply_then_wait(db: Any, changes: Any) -> None:
        apply(db, changes)
        paused.set()
        if kill_me:
            time.sleep(600)
        go.wait(60)

    restem._apply = apply_then_wait
    restem.REWRITE_ROWS = 2
    schema.migrate(url, "the first process")


@contextmanager
def _migrator(url: str, kill_me: bool) -> Iterator[tuple[Any, Any]]:
    paused, go = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=_migrate_pausing, args=(url, paused, go, kill_me))
    proc.start()
    try:
        assert paused.wait(120), "the migrator never reached 011"
        yield proc, go
    finally:
        go.set()
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _second_open(url: str) -> tuple[threading.Thread, list[list[str]]]:
    """``schema.migrate`` in a thread (what a second process's open runs); its result."""
    out: list[list[str]] = []
    thread = threading.Thread(target=lambda: out.append(schema.migrate(url, "second")))
    thread.start()
    return thread, out


def test_a_second_process_opening_meanwhile_waits_and_finds_it_done(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch)
    before, expected = posting_rows(url), posting_rows(_fresh(pg_server, memories))
    with _migrator(url, kill_me=False) as (proc, go):
        thread, applied = _second_open(url)
        thread.join(2)
        assert thread.is_alive()  # waiting for the migrator's lock
        assert posting_rows(url) == before  # readers see the old terms until the commit
        with psycopg.connect(url, autocommit=True) as db:  # a writer's first statement
            db.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                db.execute("UPDATE revisions SET revision = revision + 1 WHERE user_id = 'bob'")
        go.set()
        proc.join(60)
        assert proc.exitcode == 0
        thread.join(60)
    assert applied == [[]]  # nothing left to apply
    assert posting_rows(url) == expected


def test_a_migrator_killed_halfway_loses_nothing_and_the_next_open_finishes(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch)
    before, expected = posting_rows(url), posting_rows(_fresh(pg_server, memories))
    with _migrator(url, kill_me=True) as (proc, _):
        thread, applied = _second_open(url)
        os.kill(proc.pid, signal.SIGKILL)  # inside 011, blocks already rewritten
        proc.join(60)
        assert posting_rows(url) == before  # nothing of it committed
        thread.join(120)
    assert applied == [[restem.MIGRATION]]  # the waiting open ran it itself
    assert restem.MIGRATION in _applied(url)
    assert posting_rows(url) == expected
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        for memory in memories:
            assert memory.id in {
                m.id for m, _ in store.lexical_search(memory.user_id, memory.content, 100)
            }
    finally:
        store.close()
