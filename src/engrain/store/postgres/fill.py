"""Token counts of rows written before migration 009, filled after it (issue 18, session 17).

Migration ``009_content_tokens`` counts ``content_tokens`` for a table of up to
``schema.FILL_IN_MIGRATION_MAX`` rows in its own transaction; a larger table is left NULL
(each such line is counted at call time, as before 009) and filled here, in batches, each
its own transaction, by whichever of these runs first:

* ``engrain migrate`` (:meth:`PostgresStore.fill_content_tokens`): at full speed, in the
  foreground; it waits for a filler of another process to finish, so when it returns the
  table is filled.
* a **background filler** a store starts when it opens a database that still has rows to
  fill (:class:`Filler`, after :data:`START_DELAY`): batches of :data:`BACKGROUND_BATCH`
  rows, each followed by a pause as long as it took, so it takes at most half of one
  server core and a writer waits on its row locks for one small batch at most.

**Done is recorded by the database.** When no row is left, the filler adds the check
constraint :data:`CONSTRAINT` (``content_tokens IS NOT NULL``) and validates it. A store
that opens the database reads one catalog row (:func:`pending`): a validated constraint
means nothing is left, so no process scans the table again. No migration records it: a
migration would make every older tree refuse the database, while the constraint changes
nothing any tree since 009 reads or writes (each writes a count with every row it writes).
A small table (``schema.migrate``) gets the constraint in the migrator's own transaction.

**Many processes, one filler.** A filler holds the session-level advisory lock
:data:`FILL_LOCK` on a connection of its own while it works; the background filler only
tries it (another process fills: nothing to do here), the foreground one waits for it. A
filler killed midway loses its connection, so the server rolls back its open batch and
releases the lock: the next store that opens the database finds the constraint missing
and resumes (the rows filled are skipped: they hold a count). Rows written meanwhile are
counted by their writer (``writes.write_body``).

**Never in a caller's way.** A batch locks its rows in ``(user_id, id)`` order (``FOR
UPDATE``, waiting for a writer that holds one: the order writers lock theirs in, so the two
do not deadlock), counts them, writes their counts and commits; a row's count
is a function of its content, which the lock keeps, and the fill bumps no revision: a
reader or a working set that still holds NULL for a row counts its line as before, with
the same result, so a call gives the same block before, during and after the fill. A
deadlock the server reports anyway is retried by whichever of the two lost (a writer's
transaction is retried whole, ``PostgresStore._transaction``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import psycopg.errors

from engrain.store.postgres.codec import Conn
from engrain.threads import started
from engrain.tokens import spaced_count

log = logging.getLogger(__name__)

#: The check constraint whose validation records that every row holds its count.
CONSTRAINT = "memories_content_tokens_counted"
#: One filler at a time per database ("engrain-f"; the migrations hold their own lock).
FILL_LOCK = 0x656E67_7261692D66
#: Rows per transaction of a foreground fill (``engrain migrate``).
FILL_BATCH = 1_000
#: Rows per transaction of the background filler: at ~4.6 ms a row (a fill update enters
#: both HNSW graphs unless it stays on its page; docs/scale.md, "Session 16") a writer of
#: one of its rows waits ~1 s at most.
BACKGROUND_BATCH = 200
#: Seconds a store's background filler waits after the store opens before its first batch:
#: a process that closes the store sooner (a CLI command) starts none, rather than a batch
#: its exit would roll back.
START_DELAY = 10.0
#: How long adding or validating the constraint waits for the table's lock before it is
#: left to the next open (adding it briefly excludes every reader and writer; a long
#: transaction on the table would otherwise queue every call behind it).
LOCK_TIMEOUT = "2s"
#: Times a batch that lost a deadlock against a writer is tried again.
RETRIES = 5

_FIRST = (
    "SELECT user_id, id, content FROM memories WHERE content_tokens IS NULL "
    "ORDER BY user_id, id LIMIT %s FOR UPDATE"
)
_NEXT = (
    "SELECT user_id, id, content FROM memories WHERE content_tokens IS NULL "
    "AND (user_id, id) > (%s, %s) ORDER BY user_id, id LIMIT %s FOR UPDATE"
)
_WRITE = (
    "UPDATE memories m SET content_tokens = v.n "
    "FROM unnest(%s::text[], %s::text[], %s::int[]) AS v(u, i, n) "
    "WHERE m.user_id = v.u AND m.id = v.i AND m.content_tokens IS NULL"
)


def pending(db: Conn) -> bool:
    """Whether rows may still lack their count: :data:`CONSTRAINT` is missing or not yet
    validated (one catalog row; no scan of the table)."""
    row = db.execute(
        "SELECT convalidated FROM pg_constraint "
        "WHERE conrelid = 'memories'::regclass AND conname = %s",
        (CONSTRAINT,),
    ).fetchone()
    return row is None or not row[0]


def mark_counted(db: Conn) -> None:
    """Add :data:`CONSTRAINT` checked at once, inside the caller's transaction (a small
    table, every row already counted: ``schema.migrate``)."""
    db.execute(
        f"ALTER TABLE memories ADD CONSTRAINT {CONSTRAINT} CHECK (content_tokens IS NOT NULL)"
    )


def fill_batch(
    db: Conn, after: tuple[str, str] | None, size: int
) -> tuple[tuple[str, str], int] | None:
    """Count and write the ``content_tokens`` of up to ``size`` rows without one that come
    after the key ``after`` (``None``: from the first), in key order, inside the caller's
    transaction; the last key read and the rows written (``None``: none left)."""
    if after is None:
        found = db.execute(_FIRST, (size,)).fetchall()
    else:
        found = db.execute(_NEXT, (*after, size)).fetchall()
    if not found:
        return None
    written = db.execute(_WRITE, _columns(found)).rowcount
    return (str(found[-1][0]), str(found[-1][1])), written


def _columns(found: Sequence[tuple[Any, ...]]) -> tuple[list[str], list[str], list[int]]:
    return [r[0] for r in found], [r[1] for r in found], [spaced_count(r[2]) for r in found]


def fill(
    url: str,
    *,
    batch: int = FILL_BATCH,
    wait: bool = True,
    paced: bool = False,
    stop: threading.Event | None = None,
) -> int | None:
    """Fill every row's missing count, ``batch`` rows per transaction, then record it
    (:data:`CONSTRAINT`); the rows this call filled, or ``None`` if another filler holds
    :data:`FILL_LOCK` and ``wait`` is false. ``paced``: pause after each batch as long as
    it took; ``stop``: set, the fill ends after the batch that runs (resumed by the next)."""
    filled = 0
    with psycopg.connect(url, autocommit=True) as db:
        if wait:
            db.execute("SELECT pg_advisory_lock(%s)", (FILL_LOCK,))
        elif not _first(db.execute("SELECT pg_try_advisory_lock(%s)", (FILL_LOCK,))):
            return None
        # the lock is the connection's: closing it (or losing it) releases the lock
        if not pending(db):
            return 0  # a filler that held the lock before this one finished
        after: tuple[str, str] | None = None
        while stop is None or not stop.is_set():
            started = time.monotonic()
            last = _batch(db, after, batch)
            if last is None:
                _record(db)
                return filled
            after, filled = last[0], filled + last[1]
            if paced:  # as long as the batch took: half of one server core at most
                pause = time.monotonic() - started
                if stop is None:
                    time.sleep(pause)
                else:
                    stop.wait(pause)
        return filled


def _batch(
    db: Conn, after: tuple[str, str] | None, size: int
) -> tuple[tuple[str, str], int] | None:
    """:func:`fill_batch` in its own transaction, tried again after a deadlock with a
    writer (the server rolled the batch back)."""
    for attempt in range(RETRIES + 1):
        try:
            with db.transaction():
                return fill_batch(db, after, size)
        except psycopg.errors.DeadlockDetected:
            if attempt == RETRIES:
                raise
    raise AssertionError("unreachable")


def _record(db: Conn) -> None:
    """Add :data:`CONSTRAINT` unchecked if missing, then validate it (a scan that blocks
    no reader or writer), each waiting :data:`LOCK_TIMEOUT` at most for the table (else
    the next open records it). A row without a count (written by something other than
    engrain) fails the validation: the constraint is dropped again and the next open
    fills it."""
    db.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    try:
        exists = db.execute(
            "SELECT 1 FROM pg_constraint WHERE conrelid = 'memories'::regclass AND conname = %s",
            (CONSTRAINT,),
        ).fetchone()
        if exists is None:
            db.execute(
                f"ALTER TABLE memories ADD CONSTRAINT {CONSTRAINT} "
                "CHECK (content_tokens IS NOT NULL) NOT VALID"
            )
        try:
            db.execute(f"ALTER TABLE memories VALIDATE CONSTRAINT {CONSTRAINT}")
        except psycopg.errors.CheckViolation:
            db.execute(f"ALTER TABLE memories DROP CONSTRAINT IF EXISTS {CONSTRAINT}")
            log.warning(
                "rows without a token count were written during the fill: the next "
                "store to open the database fills them"
            )
    except psycopg.errors.LockNotAvailable:
        # every row holds its count; only the record waits for the next open
        log.info("the token counts' constraint waits for the table: left to the next open")
    finally:
        db.execute("RESET lock_timeout")


def _first(cursor: psycopg.Cursor[Any]) -> bool:
    row = cursor.fetchone()
    return row is not None and bool(row[0])


class Filler:
    """The background filler of one store (module docstring): started when the store opens
    a database with rows to fill, it waits ``delay`` seconds first (:data:`START_DELAY`: a
    short-lived process, a CLI command, closes before and starts no batch it would lose),
    then fills ``batch`` rows a transaction (:data:`BACKGROUND_BATCH`) until none is left or
    :meth:`stop` (its batch ends first)."""

    def __init__(self, url: str, *, batch: int | None = None, delay: float | None = None) -> None:
        self._url = url
        self._batch = BACKGROUND_BATCH if batch is None else batch
        self._delay = START_DELAY if delay is None else delay
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="engrain-pg-fill")
        #: Rows this filler wrote (``None``: another process held the lock).
        self.filled: int | None = 0

    def start(self) -> bool:
        """Start filling in a daemon thread; whether it started (``threads.started``: out
        of memory or at the process's thread limit it cannot, and the rows wait for the
        next open or ``engrain migrate``)."""
        return started(self._thread)

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return  # closed first: nothing started, nothing lost
        try:
            self.filled = fill(
                self._url, batch=self._batch, wait=False, paced=True, stop=self._stop
            )
        except Exception:  # the next open tries again; calls count their lines meanwhile
            if not self._stop.is_set():
                log.exception("filling the token counts of a PostgreSQL database failed")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the filler to end (tests, benchmarks); whether it has."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the filler to end after its batch and wait up to ``timeout`` for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
