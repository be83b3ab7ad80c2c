"""Migrations 011 (``store/postgres/restem.py``), 012 (``restem_final_e.py``) and 013
(``restem_plural.py``): a database whose postings were stemmed by an earlier stemmer
(session 20's: "killed" → "kil"; session 21's: "notes" → "not", "times" → "tim"; session
22's: "studied" → "studi", "status" → "statu") holds, once migrated, exactly the postings and
document frequencies a store written by this tree holds; running it again changes nothing;
a second process opening meanwhile waits and finds it done; a migrator killed halfway
leaves every posting as it was, and the next open re-stems them all. Every test runs for
each of the three migrations (``step``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from engrain.errors import MigrationError
from engrain.model import Memory
from engrain.store import Patch, lexical

from .pg import new_schema, posting_rows
from .test_stem import (
    EED,
    EED_SAME,
    FAMILIES,
    FAMILIES_S23,
    FIXED,
    IE,
    SAME,
    TAKES_ES_CASES,
    US,
    stem_s21,
    stem_s22,
)
from .test_stem import stem_before as earlier_stemmer
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
graphed = postgres.graphed
import psycopg  # noqa: E402
import psycopg.errors  # noqa: E402

schema, restem, bm25 = postgres.schema, postgres.restem, postgres.bm25
restem_final_e = postgres.restem_final_e
restem_plural = postgres.restem_plural
postings = postgres.postings
PostgresStore = postgres.PostgresStore
SPAWN = mp.get_context("spawn")
NAMES = [n for n, _ in schema.MIGRATIONS]
_GRAPHED = dict(schema.MIGRATIONS)[graphed.MIGRATION]


@dataclass(frozen=True)
class Step:
    """A re-stemming migration, the stemmer of the trees before it, and what it fixes: a
    query (``missed[0]``) that misses the rows holding a word (``missed[1]``) until it runs,
    and a term no fresh store holds that the earlier stemmer stored (``stale``)."""

    name: str
    stemmer: Callable[[str], str]
    missed: tuple[tuple[str, str], ...]
    stale: tuple[str, ...]

    @property
    def before(self) -> list[Any]:
        """The migrations a tree before this step knows, and 015's ``graphed`` flags, which
        today's writes set (applied out of order: it stands on its own)."""
        return [*schema.MIGRATIONS[: NAMES.index(self.name)], (graphed.MIGRATION, _GRAPHED)]

    @property
    def applied(self) -> list[str]:
        """What opening a database of a tree before this step applies."""
        return [n for n in NAMES[NAMES.index(self.name) :] if n != graphed.MIGRATION]


STEPS = [
    Step(restem.MIGRATION, restem.stem_before, (("kill", "killed"), ("agree", "agreed")),
         ("pas", "agre", "spe")),
    Step(restem_final_e.MIGRATION, restem_final_e.stem_before,
         (("hope", "hoped"), ("created", "create"), ("time", "times")), ("not", "hop")),
    Step(restem_plural.MIGRATION, restem_plural.stem_before,
         (("study", "studied"), ("movies", "movie"), ("focused", "focus")),
         ("studi", "movi", "focu")),
]  # fmt: skip


@pytest.fixture(params=STEPS, ids=[s.name for s in STEPS])
def step(request: pytest.FixtureRequest) -> Step:
    return request.param  # type: ignore[no-any-return]


#: Rows of two users: words session 20's stemmer cut ("killed", "passing", "filled",
#: "calling"; "agreed", "speed", "proceeds", "employees"), words in "-e" session 21's cut
#: apart ("notes", "noted" / "note"; "create" / "created"; "times" / "Tim"), an old stem
#: that is also a word of its own ("kil", "tim"), words stemmed alike by all three
#: ("running", "planned", "speeds", "boxes"), and rows with none of them.
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
    "notes: I noted it twice, noting times Tim hoped for",
    "the note and the time",
    "created, creating, creates; the cache caches cached pages",
    "create the boxes, matches and pushes; issues issued, an issue; the sites we sit at",
    "she studied the build status; we tried twice, tries and a movie; focused on gpus",
    "study it: the statue, the movies, a focus on the status of two cpus",
]


def test_the_migrations_keep_the_earlier_stemmers_as_they_were() -> None:
    words = [w for w, *_ in [*FIXED, *SAME, *EED, *EED_SAME, *TAKES_ES_CASES, *IE, *US]]
    words += [w for forms in [*FAMILIES.values(), *FAMILIES_S23.values()] for w in forms]
    words += ["ballooned", "fizzing", "1100ing", "kil", "aaeeed", "speeded", "quite"]
    assert [restem.stem_before(w) for w in words] == [earlier_stemmer(w) for w in words]
    assert [restem_final_e.stem_before(w) for w in words] == [stem_s21(w) for w in words]
    assert [restem_plural.stem_before(w) for w in words] == [stem_s22(w) for w in words]
    first = NAMES.index(restem.MIGRATION)
    assert NAMES[first : first + 3] == [
        restem.MIGRATION, restem_final_e.MIGRATION, restem_plural.MIGRATION]  # fmt: skip


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
    final_e = restem_final_e.stem_before
    assert restem.restemmed("notes", final_e) == ("not", "note")
    assert restem.restemmed("create", final_e) == ("create", "creat")
    assert restem.restemmed("created", final_e) is None  # "creat" before and now
    assert restem.restemmed("times", final_e) == ("tim", "time")
    assert restem.restemmed("boxes", final_e) is None
    assert restem.restemmed("killed", final_e) is None  # 011's fix: the same in both
    plural = restem_plural.stem_before
    assert restem.restemmed("studied", plural) == ("studi", "study")
    assert restem.restemmed("status", plural) == ("statu", "status")
    assert restem.restemmed("movie", plural) == ("movi", "movy")
    assert restem.restemmed("gpus", plural) is None  # "gpu" before and now
    assert restem.restemmed("notes", plural) is None  # 012's fix: the same in both


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
    final_e = restem_final_e.stem_before
    # "tim" is a name here: it keeps its posting, "times" goes to "time"
    assert restem.row_changes("Tim noted the notes, times", 4, final_e) == {
        "not": None,
        "note": (2, 4),
        "tim": (1, 4),
        "time": (1, 4),
    }
    assert restem.row_changes("boxes killed", 2, final_e) == {}
    plural = restem_plural.stem_before
    # "statue" keeps "statu"; "status" leaves it for a term of its own
    assert restem.row_changes("the status of the statue; studies studied", 4, plural) == {
        "statu": (1, 4),
        "status": (1, 4),
        "studi": None,
        "study": (2, 4),
    }


def _memories() -> list[Memory]:
    out = []
    for user in ("alice", "bob"):
        for i in range(30):
            text = f"{TEXTS[i % len(TEXTS)]} (note {i})"
            out.append(mem(f"{user[0]}{i:02d}", user, content=text))
    return out


@contextmanager
def _older_tree(monkeypatch: pytest.MonkeyPatch, step: Step) -> Iterator[None]:
    """This process as a tree before ``step``: its stemmer, the migrations before it, the
    legacy blocks (before 014)."""
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", step.before)
        patch.setattr(postings, "CURRENT", postings.LEGACY)
        patch.setattr(lexical, "_stem", step.stemmer)
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


def _stemmed_before(url: str, monkeypatch: pytest.MonkeyPatch, step: Step) -> list[Memory]:
    """A database just before ``step`` written by the stemmer before it; the memories."""
    memories = _memories()
    with _older_tree(monkeypatch, step):
        _write(url, memories)
    return memories


def _term_stats(url: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(url, autocommit=True) as db:
        return {
            (u, t): int(df) for u, t, df in db.execute("SELECT user_id, term, df FROM term_stats")
        }


def _fresh(pg_server: str, memories: list[Memory]) -> str:
    """A schema where this tree wrote ``memories``: what a re-stemming must leave."""
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


def _found_unmigrated(
    url: str, query: str, monkeypatch: pytest.MonkeyPatch, step: Step
) -> set[str]:
    """:func:`_found` with this tree's stemmer on a database left before ``step``."""
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", step.before)
        patch.setattr(postings, "CURRENT", postings.LEGACY)
        return _found(url, query)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 postings: a term's list spans several, so a re-stem splits and empties
    some."""
    monkeypatch.setattr(bm25, "BLOCK", 4)


def test_a_database_stemmed_before_holds_a_fresh_stores_postings_once_migrated(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, small_blocks: None, step: Step
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch, step)
    fresh = _fresh(pg_server, memories)
    expected, expected_df = posting_rows(fresh), _term_stats(fresh)
    assert posting_rows(url) != expected  # what the earlier stemmer stored
    for term in step.stale:
        assert ("alice", term) in _term_stats(url) and ("alice", term) not in expected_df
    rows = {}
    for query, word in step.missed:  # the defect
        rows[query] = {m.id for m in memories
                       if m.user_id == "alice" and word in lexical.words(m.content)}  # fmt: skip
        assert rows[query] and not rows[query] & _found_unmigrated(url, query, monkeypatch, step)
    monkeypatch.setattr(restem, "REWRITE_ROWS", 3)  # several rounds of rewrites

    assert schema.migrate(url, "test") == step.applied
    assert posting_rows(url) == expected
    assert _term_stats(url) == expected_df
    for query, word in step.missed:
        assert rows[query] <= _found(url, query) and rows[query] <= _found(url, word)


def test_running_it_again_changes_nothing(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, small_blocks: None, step: Step
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch, step)
    with monkeypatch.context() as patch:  # up to the step (014 then repacks the blocks)
        patch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[: NAMES.index(step.name) + 1],
                                             (graphed.MIGRATION, _GRAPHED)])  # fmt: skip
        schema.migrate(url, "test")
    rows, stats = posting_rows(url), _term_stats(url)
    with psycopg.connect(url, autocommit=True) as db, db.transaction():
        dict(schema.MIGRATIONS)[step.name](db)
    assert posting_rows(url) == rows and _term_stats(url) == stats
    assert rows == posting_rows(_fresh(pg_server, memories))


def test_writes_after_it_leave_no_stale_posting(
    pg_server: str, monkeypatch: pytest.MonkeyPatch, step: Step
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch, step)
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
    pg_url: str, monkeypatch: pytest.MonkeyPatch, step: Step
) -> None:
    _write(pg_url, _memories())
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", step.before)
        with pytest.raises(MigrationError, match="newer engrain"):
            PostgresStore(pg_url, pool_size=1)


def _migrate_pausing(url: str, paused: Any, go: Any, kill_me: bool) -> None:
    """Run the migrations in this (spawned) process, stopping inside the first re-stemming
    migration after its first rewrite until ``go`` is set (or forever, to be killed)."""
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
        assert paused.wait(120), "the migrator never reached a re-stemming"
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
    pg_server: str, monkeypatch: pytest.MonkeyPatch, step: Step
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch, step)
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
    pg_server: str, monkeypatch: pytest.MonkeyPatch, step: Step
) -> None:
    url = new_schema(pg_server)
    memories = _stemmed_before(url, monkeypatch, step)
    before, expected = posting_rows(url), posting_rows(_fresh(pg_server, memories))
    with _migrator(url, kill_me=True) as (proc, _):
        thread, applied = _second_open(url)
        os.kill(proc.pid, signal.SIGKILL)  # inside the migration, blocks already rewritten
        proc.join(60)
        assert posting_rows(url) == before  # nothing of it committed
        thread.join(120)
    assert applied == [step.applied]  # the waiting open ran it itself
    assert set(step.applied) <= _applied(url)
    assert posting_rows(url) == expected
    store = PostgresStore(url, pool_size=1, fill_in_background=False)
    try:
        for memory in memories:
            assert memory.id in {
                m.id for m, _ in store.lexical_search(memory.user_id, memory.content, 100)
            }
    finally:
        store.close()
