"""A large user's working set held in process by the PostgreSQL store (issue 18).

The SQLite store serves a large user's searches from columns, a matrix and a BM25 index in
process (:class:`~engrain.store.cache.UserCache`), checked on every call against the user's
revision. This module does the same over PostgreSQL when turned on
(``ENGRAIN_PG_WORKING_SET``: ``on`` for users with at least :data:`WORKING_SET_MIN`
memories, or a count; unset or ``off``: never):

* **Checked on every call, in one round trip.** Before a search or a lexical search is
  served from process memory, one statement (:data:`CHECK`) reads the user's revision and
  access clock and the access rows counted since the working set's clock. Every write of a
  user's memories bumps the revision in its own transaction (``writes.write_body``), so an
  equal revision means the rows are the ones loaded (or last applied); access counts, which
  every ``context()`` makes without a revision, are applied from the rows stamped after the
  clock, as :meth:`PostgresStore.query`'s listings do: under the working sets' lock, only
  by a check newer than the clock held, and as stored counts, never added twice (the
  reads of one call check from several threads at once). A different revision: the rows
  changed since are read in the call (:data:`DELTA`, migration 008's ``row_changes``: every
  write stamps the rows it changes with the revision it bumps) and applied if each is a
  held row changed in place and there are at most :data:`DELTA_MAX`; otherwise the call is
  served by SQL, exactly as for a small user, and the load thread applies them. So a
  reader never sees a forgotten memory and never misses one committed before its call
  began: what it reads is at least as new as the check, and the check is after the call
  began.
* **Read in one snapshot.** A (re)load reads the revision, the access clock and every row of
  the user in one ``REPEATABLE READ`` transaction, off the request path; the BM25 index and
  the columns are built there too, so the first call served from it pays nothing. Reloads
  of one user run one at a time and at most one per :func:`_pause` after the previous one
  ends: a delta (below) no sooner than four times the last delta's duration after it, a
  full load no sooner than four times the last full load's duration (at least
  :data:`RELOAD_PAUSE` s): a user another process writes to all the time is served by SQL,
  not reloaded without end. One full load runs at a time per process (the others' users
  are served by SQL meanwhile and try again on a later call).
* **Deltas, not listings.** The load thread, and this process's own writes once committed,
  bring a working set up to date by the same :data:`DELTA` (rows changed since its
  revision, up to :data:`REFRESH_SHARE` of them; more: a full load).
* **Sizes learned, not asked** (``ENGRAIN_PG_WORKING_SET=on``): a user's memory count is
  taken from the statements the SQL path runs anyway (BM25's statistics, the search plan's
  read: :meth:`WorkingSets.saw_size`), so a small user's calls run no statement more than
  before; a count given (``ENGRAIN_PG_WORKING_SET=5000``) reads it with the check.
* **Bounded**: :data:`USERS_KEPT` users per process, least recently used dropped.
* **Off by default** (:func:`working_set_min`; ``ENGRAIN_PG_WORKING_SET=on`` turns it
  on): the rows are read as columns and the float32 matrix is dropped once the graphs hold
  every row, the vectors a search scores read back by id (``table.py``), so a process
  serving a 100,000-memory user holds ~325 MB instead of ~860 MB; side by side it served
  ``context()`` at the SQL path's latency (p50 / p95 1.12 / 1.00x) for a fifth of its
  server CPU (docs/postgres.md, "Session 14"): no latency won for twice the SQL path's
  memory, so it stays a choice.

Vector search in the working set goes through usearch (``store/ann.py``: an int8 HNSW graph
built in process and a second one over the typed learnings, candidates scored exactly with
their float32 vectors — from the matrix while the graphs are built, then read back from the
rows by id — rows the graph does not hold yet searched exactly): an exact product at 100,000
took ~106 ms at load 14, the graph ~11 ms for the gate's two searches. Cosine equals the
dot product for the unit vectors engrain stores (the query is scaled to unit length). Rows
are loaded in id order, so equal scores rank by id as the SQL path ranks them (memories
added since are appended).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engrain import envvars
from engrain.model import Memory, as_utc
from engrain.store import heap
from engrain.store.ann import ANN_MIN_VECTORS, IndexSlot
from engrain.store.cache import UserCache
from engrain.store.columns import Table
from engrain.store.postgres.codec import SELECT_COLUMNS, WITH_ACCESS, Conn, from_row
from engrain.store.postgres.loader import ONE_CORE, Load, Loader, four_times
from engrain.store.postgres.table import read_table, row_vectors

log = logging.getLogger(__name__)

#: Users with at least this many memories are served from a working set in process.
WORKING_SET_MIN = 20_000
#: ... and at most this many: its graphs are built in each process (100,000: minutes of a
#: core under load), so larger users stay with SQL.
WORKING_SET_MAX = 200_000
#: Working sets kept per process (least recently used dropped).
USERS_KEPT = 2
#: Seconds at least between the end of a user's load and the start of the next.
RELOAD_PAUSE = 5.0
#: A refresh reads only the rows changed since the working set's revision unless more than
#: this share of them changed (then the whole working set is read again).
REFRESH_SHARE = 0.2
#: How long a user's size, read to decide whether it gets a working set, is trusted.
SIZE_SECONDS = 10.0

#: The revision, the memory count, the access clock and the access rows stamped after a
#: clock (none: one row with NULLs), in one snapshot.
CHECK = (
    "SELECT r.revision, r.documents, (SELECT clock FROM access_clocks WHERE user_id = %s), "
    "a.id, a.access_count, a.last_accessed_at "
    "FROM (SELECT 1) AS one LEFT JOIN revisions r ON r.user_id = %s "
    "LEFT JOIN access a ON a.user_id = %s AND a.clock > %s"
)
#: Past any access clock: :data:`CHECK` lists no access rows.
NO_CLOCK = 2**63 - 1
#: Rows changed since the held revision that a call reads and applies itself (migration
#: 008's ``row_changes``) when each is a held row changed in place (a promotion, a pin, an
#: edit: ~3-6 ms of the calling thread at 100,000 rows); more, or a new or forgotten row
#: (~75 and ~290 ms at 100,000: the columns and BM25 are copied), and the call is served
#: by SQL while the load thread applies them.
DELTA_MAX = 64

#: In one snapshot: the user's revision and up to a limit of the rows changed after a
#: revision, each with its row as it is now (the memory's columns NULL: gone). Nothing
#: changed: one row, the revision and NULLs.
DELTA = (
    "WITH c AS (SELECT id FROM row_changes WHERE user_id = %s AND revision > %s LIMIT %s) "
    f"SELECT (SELECT revision FROM revisions WHERE user_id = %s), c.id, {SELECT_COLUMNS} "
    "FROM (SELECT 1) AS one LEFT JOIN c ON true "
    "LEFT JOIN memories m ON m.user_id = %s AND m.id = c.id "
    "LEFT JOIN access a ON a.user_id = m.user_id AND a.id = m.id"
)

Connect = Callable[[], AbstractContextManager[Conn]]


def working_set_min(environ: Mapping[str, str] | None = None) -> int | None:
    """The memory count from which a user gets a working set: ``ENGRAIN_PG_WORKING_SET``
    (``on`` for :data:`WORKING_SET_MIN`, a count, or unset / ``off``: ``None``, never).
    Off by default: read as columns and without the float32 matrix (``table.py``) it holds
    ~325 MB for a process serving a 100,000-memory user (the SQL path's: ~165 MB, the
    issue's bound 300 MB) and side by side it served ``context()`` with p50 / p95 1.12 /
    1.00x the SQL path's for a fifth of its server CPU (docs/postgres.md, "Session 14"):
    no latency won, so a deployment whose database is the bottleneck turns it on. Any
    other value raises :class:`~engrain.errors.ConfigError` (:mod:`engrain.envvars`)."""
    value = envvars.count("ENGRAIN_PG_WORKING_SET", environ)
    if value is envvars.ON:
        return WORKING_SET_MIN
    return max(1, value) if isinstance(value, int) else None


def working_set_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``ENGRAIN_PG_WORKING_SET`` gives a count: the store then reads a user's size
    with the check itself; turned ``on`` it learns sizes from the statements its SQL path
    runs anyway (:meth:`WorkingSets.saw_size`), so a small user pays nothing."""
    return isinstance(envvars.count("ENGRAIN_PG_WORKING_SET", environ), int)


@dataclass
class _Held:
    """A user's working set as of ``revision`` with the access counts up to ``clock``."""

    revision: int
    clock: int
    cache: UserCache


class WorkingSets:
    """The working sets of the large users this process serves (module docstring).

    ``connect`` lends a pooled autocommit connection; ``min_rows`` is the size from which a
    user gets one; ``background`` False loads in the calling thread (tests); ``learned``:
    a user's size is only learned from the SQL path's own reads (:meth:`saw_size`), never
    read by a statement of its own for a user without a working set (the default)."""

    def __init__(
        self,
        connect: Connect,
        min_rows: int,
        *,
        kept: int = USERS_KEPT,
        background: bool = True,
        learned: bool = False,
    ) -> None:
        self._connect = connect
        self.min_rows = min_rows
        self.learned = learned
        self.kept = max(1, kept)
        self._lock = threading.Lock()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._sizes: dict[str, tuple[int, float]] = {}
        self._loader: Loader[str] = Loader(
            self._lock, self._load, _pause, what="the working set of a PostgreSQL user",
            name="engrain-pg-ws", background=background, light_loads=True,
        )  # fmt: skip
        self._slots: OrderedDict[str, IndexSlot] = OrderedDict()
        #: held by the one full load running in this process
        self._full_load = threading.Lock()
        self._closed = False
        #: Calls of large users: served from a working set, or by SQL (benchmarks).
        self.calls: Counter[str] = Counter()

    def _large(self, documents: int) -> bool:
        return self.min_rows <= documents <= WORKING_SET_MAX

    def saw_size(self, user_id: str, documents: int) -> None:
        """Note the user's memory count as a statement of the SQL path just read it (the
        search plan's, BM25's statistics): with ``learned``, how a user's size is known."""
        with self._lock:
            self._sizes[user_id] = (documents, time.monotonic())

    # -- reads ------------------------------------------------------------------------------

    def current(self, user_id: str) -> UserCache | None:
        """The user's working set, holding exactly what the database holds as of this call
        (access counts included), or ``None``: serve this call by SQL (a small user, a
        working set not loaded yet or behind a write; a load is started then)."""
        with self._lock:
            held = self._held.get(user_id)
            size = self._sizes.get(user_id)
        fresh = size is not None and time.monotonic() - size[1] < SIZE_SECONDS
        if held is None and size is not None and fresh:
            if self._large(size[0]):
                self.calls["by_sql"] += 1
                self._start_load(user_id)
            return None
        if held is None and self.learned:
            return None  # size unknown or old: the SQL path's reads will tell (saw_size)
        since = NO_CLOCK if held is None else held.clock
        revision, documents, clock, counts = self._check(user_id, since)
        with self._lock:
            self._sizes[user_id] = (documents, time.monotonic())
            now = self._held.get(user_id)
        # written since: the rows changed are read and applied here, if they are few
        behind = now is not None and now.revision != revision and self._large(documents)
        if behind and now is not None and self._catch_up(user_id, now, DELTA_MAX, in_place=True):
            self.calls["caught_up"] += 1
            with self._lock:
                now = self._held.get(user_id)
        if now is None or now.revision < revision:
            if self._large(documents):
                self.calls["by_sql"] += 1
                self._start_load(user_id)
            return None
        if since > now.clock and clock > now.clock:
            # published or replaced since the check began: the counts it listed start after
            # this working set's clock, so SQL serves this call; the next check lists them
            self.calls["by_sql"] += 1
            return None
        if clock > now.clock:
            # One thread at a time, and only while no other one has moved the clock to this
            # check's or past it: the reads of one context() check from several threads at
            # once (store/reads.py), and two applying the same counts added the uses twice.
            with self._lock:
                if clock > now.clock:
                    _apply_counts(now.cache, counts)
                    now.clock = clock
        with self._lock:
            if user_id in self._held:
                self._held.move_to_end(user_id)
        self.calls["served"] += 1
        return now.cache

    def _check(self, user_id: str, since: int) -> tuple[int, int, int, list[tuple[str, int, Any]]]:
        with self._connect() as conn, conn.cursor(binary=True) as cur:
            cur.execute(CHECK, (user_id, user_id, user_id, since))
            rows = cur.fetchall()
        first = rows[0]
        counts = [(r[3], int(r[4]), r[5]) for r in rows if r[3] is not None]
        return int(first[0] or 0), int(first[1] or 0), int(first[2] or 0), counts

    # -- loads ------------------------------------------------------------------------------

    def _start_load(self, user_id: str) -> None:
        """Start reading the user's working set unless a load runs or the pause after the
        last one has not passed (``loader.py``)."""
        self._loader.start(user_id)

    def _load(self, user_id: str, loading: Load) -> None:
        """Read the user's rows, revision and clock in one snapshot, build the working set
        (columns, BM25, the approximate index: the user's slot is kept between loads, so a
        reload patches its graph rather than building it again) and publish it unless a
        newer one is held. A delta (below a share of the rows) or no load at all is a light
        load (``loading.full`` False): the next may start at once."""
        with self._lock:
            stale = self._held.get(user_id)
        # more rows changed than a call applies, fewer than a full load reads
        share = 0 if stale is None else int(REFRESH_SHARE * max(1, len(stale.cache)))
        if stale is not None and self._catch_up(user_id, stale, share):
            loading.full = False
            return
        if time.monotonic() < loading.full_not_before:
            loading.full = False  # too soon for another full load: SQL serves the user meanwhile
            return
        if not self._full_load.acquire(blocking=False):
            loading.full = False  # another user's full load runs: this one tries on a later call
            return
        try:
            revision, clock, table, memories = self._read_all(user_id)
            if self._closed:
                return  # the store closed meanwhile: build nothing
            cache = UserCache(
                memories, table=table, ann=self._slot(user_id),
                row_vectors=None if table is None else row_vectors(self._connect, user_id),
            )  # fmt: skip
            del table, memories
            cache.count()  # builds the columns
            cache.lexical_search("engrain", 1)  # builds the BM25 index off the request path
            cache.wait_for_index()  # builds, or patches, the graph
            heap.release()  # the rows read and dropped: hand their pages back
        finally:
            self._full_load.release()
        with self._lock:
            old = self._held.get(user_id)
            if not self._closed and (old is None or old.revision <= revision):
                self._held[user_id] = _Held(revision, clock, cache)
                self._held.move_to_end(user_id)
                while len(self._held) > self.kept:
                    self._held.popitem(last=False)

    def _slot(self, user_id: str) -> IndexSlot:
        """The user's approximate index in this process (every working set is large), with
        a second one over the typed learnings when they are as many as the SQLite store
        gives one for (``store/ann_kinds.py``): ~12 MB at 100,000 memories instead of a
        copy of their vectors and its coarse projection (~44 MB)."""
        with self._lock:
            slot = self._slots.get(user_id)
            if slot is None:
                part = IndexSlot(None, ANN_MIN_VECTORS)
                slot = self._slots[user_id] = IndexSlot(None, 1, part=part)
            self._slots.move_to_end(user_id)
            while len(self._slots) > self.kept:
                self._slots.popitem(last=False)[1].close()
            return slot

    def _catch_up(self, user_id: str, held: _Held, limit: int, *, in_place: bool = False) -> bool:
        """Bring ``held`` to the database's state by the rows changed since its revision
        (:data:`DELTA`: one statement, one snapshot; every write stamps the rows it changes
        with the revision it bumps, ``writes.write_body``): upsert those that are there,
        delete those gone, move to the revision read. ``False`` (nothing applied) when more
        than ``limit`` rows changed, or another load replaced ``held`` meanwhile, or (with
        ``in_place``: a call's own catch-up) a row changed is new or gone.

        A delta read from an older revision than ``held`` holds by then (another thread
        applied one meanwhile) is still right to apply: it holds every row changed since
        that older revision as the newer one leaves it."""
        with self._connect() as conn, conn.cursor(binary=True) as cur:
            cur.execute(DELTA, (user_id, held.revision, limit + 1, user_id, user_id))
            rows = cur.fetchall()
        revision = int(rows[0][0] or 0)
        changed = [r for r in rows if r[1] is not None]
        if len(changed) > limit:
            return False
        found = [from_row(r[2:]) for r in changed if r[2] is not None]
        gone = [r[1] for r in changed if r[2] is None]
        if in_place and (gone or any(m.id not in held.cache.snapshot.rows for m in found)):
            return False
        with self._lock:
            if self._held.get(user_id) is not held:
                return False  # replaced meanwhile: the caller looks again
            if revision > held.revision:
                held.cache.upsert(found)
                held.cache.delete(gone)
                held.revision = revision
        return True

    def _read_all(self, user_id: str) -> tuple[int, int, Table | None, list[Memory]]:
        """The user's revision, access clock and every row, in one snapshot: as a table
        of columns (``table.py``), or as objects if their vectors are not all of one size."""
        with self._snapshot() as cur:
            cur.execute(CHECK, (user_id, user_id, user_id, NO_CLOCK))
            first = cur.fetchone()
            assert first is not None
            documents = int(first[1] or 0)
            # the load's transients mapped apart from what stays (store/heap.py)
            heap.map_large_blocks(documents)
            table = read_table(cur, user_id, documents)
            memories: list[Memory] = []
            if table is None:
                cur.execute(
                    f"SELECT {SELECT_COLUMNS} FROM memories m {WITH_ACCESS} "
                    "WHERE m.user_id = %s ORDER BY m.id",  # equal scores by id, as in SQL
                    (user_id,),
                )
                memories = [from_row(r) for r in cur]
        return int(first[0] or 0), int(first[2] or 0), table, memories

    def wait(self, user_id: str, timeout: float | None = None) -> bool:
        """Start the user's load if due and wait for it (tests, benchmarks); whether a
        working set current as of now is held (a load due only after its pause is waited
        for too, within ``timeout``)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            known = user_id in self._sizes or user_id in self._held
        if not known:  # learned sizes: read this one (the caller waits anyway)
            documents = self._check(user_id, NO_CLOCK)[1]
            self.saw_size(user_id, documents)
        while True:
            if self.current(user_id) is not None:
                return True
            with self._lock:
                loading = self._loader.get(user_id)
                thread = None if loading is None else loading.thread
                due = 0.0 if loading is None else loading.not_before
                if loading is not None and user_id not in self._held:  # only a full load
                    due = max(due, loading.full_not_before)
            now = time.monotonic()  # one reading: a second one could be past ``due``
            left = None if end is None else end - now
            if left is not None and left <= 0:
                return False
            if thread is not None:
                thread.join(left)
            elif due > now and (end is None or due < end):
                time.sleep(due - now)
            else:
                return self.current(user_id) is not None

    # -- this process's writes --------------------------------------------------------------

    def written(self, touched: Mapping[str, Iterable[str]]) -> None:
        """After a committed write of this process, bring the working sets of the users it
        changed up to date by the rows changed since they were read (:meth:`_catch_up`:
        this write's and any other committed meanwhile), or leave them to the next call.
        The write is committed: a working set that cannot be brought up to date (the
        database or memory failed between) is dropped, served by SQL and read again, never
        reported as the write's failure (the caller would be told a stored write failed)."""
        for user_id in touched:
            with self._lock:
                held = self._held.get(user_id)
            if held is None:
                continue
            try:
                self._catch_up(user_id, held, int(REFRESH_SHARE * max(1, len(held.cache))))
            except Exception as exc:  # the rows hold the truth; the next call reads them
                with self._lock:
                    if self._held.get(user_id) is held:
                        del self._held[user_id]
                log.warning("a working set was dropped after a write (%s: %s): it is read "
                            "again from the database", type(exc).__name__, exc)  # fmt: skip

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        """A binary cursor inside one read-only REPEATABLE READ transaction: every read
        through it sees one snapshot of the database."""
        with self._connect() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                conn.execute(ONE_CORE)  # background work: one core of the database
                with conn.cursor(binary=True) as cur:
                    yield cur
            finally:
                conn.execute("COMMIT")

    def drop(self, user_id: str) -> None:
        """Forget the user's working set (the next call is served by SQL and reloads)."""
        with self._lock:
            self._held.pop(user_id, None)

    def close(self) -> None:
        """Drop every working set and start no more loads; a load running (a daemon
        thread) publishes nothing and ends at its next read of the closed pool."""
        with self._lock:
            self._closed = True
            self._loader.close()
            self._held.clear()
            for slot in self._slots.values():
                slot.close()


def _pause(took: float, full: bool = True) -> float:
    """Seconds before a user's next load may start, after one that took ``took``: four
    times as long (loads take at most a fifth of a core), and after a full load at least
    :data:`RELOAD_PAUSE`."""
    return four_times(took, RELOAD_PAUSE if full else 0.0)


def _apply_counts(cache: UserCache, counts: Sequence[tuple[str, int, datetime | None]]) -> None:
    """Bring the working set's access counts up to the rows ``counts`` (id, count, last
    access as the ``access`` table holds them): each memory is touched as many times as
    its stored count exceeds the held one, at its stored last access. The held counts are
    read from the columns, never from a memory built for it (a memory built from the
    columns reads its vector back from the database: a round trip a counted memory).
    Called under the working sets' lock: two threads reading the held counts before either
    touched them would each add the difference (session 17)."""
    held = _held_counts(cache, [memory_id for memory_id, _, _ in counts])
    by_time: dict[datetime, list[str]] = {}
    for (memory_id, count, at), now in zip(counts, held, strict=True):
        if now is None or at is None or count <= now:
            continue
        by_time.setdefault(as_utc(at), []).extend([memory_id] * (count - now))
    for at, ids in by_time.items():
        cache.touch(ids, at)


def _held_counts(cache: UserCache, ids: Sequence[str]) -> list[int | None]:
    """The access count the working set holds for each of ``ids`` (``None``: not held)."""
    snapshot = cache.snapshot
    arrays = snapshot.arrays
    if arrays is None:  # not built yet: the memories are objects
        found = [snapshot.rows.get(memory_id) for memory_id in ids]
        return [None if memory is None else memory.access_count for memory in found]
    rows = arrays.position.rows_of(ids).tolist()
    access, _ = arrays.rows.counts.many([row for row in rows if row >= 0])
    held = iter(access)
    return [next(held) if row >= 0 else None for row in rows]
