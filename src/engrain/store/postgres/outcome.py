"""One write transaction, and whether it committed when its connection broke at the commit.

A write is one pipeline, ``BEGIN`` … ``COMMIT`` (:func:`in_one_transaction`). If the
connection breaks after the server received the ``COMMIT`` (the server restarted, the
backend was terminated, the network went), the server may have committed, and the client
cannot tell from the error: before session 20 the call raised ``StoreError`` though the
write was stored, which breaks "a public call succeeds or raises and writes nothing".

**The token.** Each write transaction first inserts a token of its own into
``write_tokens`` (migration 010; 8 bytes of microseconds since the epoch, then 8 random
bytes): a statement queued in the same pipeline, so no round trip more. When the
connection breaks after ``COMMIT`` was queued, :func:`committed` asks the database, on
another connection, to insert the *same* token (``ON CONFLICT DO NOTHING``):

* the token is there (the insert conflicts): the write committed; the call succeeds;
* the insert succeeds: the write did not commit, and now never can (its own insert of the
  token would conflict): the call raises ``StoreError``, nothing written;
* the write's transaction is still open on the server (its backend has not yet noticed the
  broken connection): the insert waits for it to end, commit or roll back, and then
  answers as above; after :data:`FENCE_LOCK_TIMEOUT`, or when the server cannot be
  reached within the pool's timeout, the outcome is unknown:
  :class:`~engrain.errors.WriteOutcomeUnknownError`, whose message says how to check.

Tokens older than :data:`KEEP_SECONDS` are deleted by a write of each store at most every
:data:`PRUNE_SECONDS` (in its own pipeline: a range of the primary key, since tokens
start with their time). A check runs within the pool's timeout of the failure, far inside
that hour.

Rejected: two-phase commit (``PREPARE TRANSACTION``; psycopg's ``tpc_*``) needs
``max_prepared_transactions`` > 0, off by default, and a round trip more per write;
``pg_current_xact_id()`` with ``pg_xact_status()`` needs the transaction id read back
before the ``COMMIT`` is sent, a round trip more for a write that reads nothing (an access
count), and answers "in progress" where the token's insert waits and then decides.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Final, TypeVar

import psycopg

T = TypeVar("T")

#: The migration that makes the tokens' table.
MIGRATION: Final = "010_write_tokens"
#: Seconds a token is kept: far longer than any check of a broken commit takes (the pool's
#: wait for a connection, 30 s by default, plus :data:`FENCE_LOCK_TIMEOUT`).
KEEP_SECONDS: Final = 3600.0
#: Seconds between two prunes of old tokens by one store.
PRUNE_SECONDS: Final = 60.0
#: How long a check waits for the broken write's transaction to end on the server.
FENCE_LOCK_TIMEOUT: Final = "10s"

RECORD: Final = "INSERT INTO write_tokens (token) VALUES (%s)"
FENCE: Final = "INSERT INTO write_tokens (token) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1"
PRUNE: Final = "DELETE FROM write_tokens WHERE token < %s"


def migrate(db: Any) -> None:
    """Migration 010: the table of write tokens (empty; every write from here on records
    one, and older trees, which would not, refuse a database at 010)."""
    db.execute("CREATE TABLE write_tokens (token bytea PRIMARY KEY)")


def new_token(now: float | None = None) -> bytes:
    """A token no other write has: the time in microseconds, then 8 random bytes."""
    micros = int((time.time() if now is None else now) * 1_000_000)
    return struct.pack(">Q", micros) + os.urandom(8)


def prune_below(now: float | None = None) -> bytes:
    """Every token written more than :data:`KEEP_SECONDS` before ``now`` sorts below this."""
    return new_token((time.time() if now is None else now) - KEEP_SECONDS)[:8]


class InDoubt(Exception):
    """The connection broke after ``COMMIT`` was queued: ``result`` is the body's, to be
    returned if :func:`committed` finds the token."""

    def __init__(self, result: Any, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.result = result


def in_one_transaction(
    conn: Any, body: Callable[[Any], T], token: bytes | None = None, prune: bytes | None = None
) -> T:
    """``body`` between ``BEGIN`` and ``COMMIT`` in one pipeline on the autocommit
    connection ``conn``, recording ``token`` first and deleting tokens below ``prune``.

    On an error the transaction is rolled back before the error propagates, so the
    connection goes back to the pool idle — except when the connection broke once
    ``COMMIT`` was queued and a token was recorded: that raises :class:`InDoubt` (from the
    driver's error) for the caller to ask :func:`committed`."""
    committing = False
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            if token is not None:
                conn.execute(RECORD, (token,))
            if prune is not None:
                conn.execute(PRUNE, (prune,))
            result = body(conn)
            committing = True
            conn.execute("COMMIT")
    except BaseException as exc:
        if committing and token is not None and conn.broken:
            raise InDoubt(result, exc) from exc
        with suppress(psycopg.Error):
            conn.rollback()  # a no-op unless the transaction is still open
        raise
    return result


def committed(connect: Callable[[], Any], token: bytes) -> bool:
    """Whether the write that recorded ``token`` committed, asked on a connection from
    ``connect`` (a context manager, e.g. the pool's); once this returns ``False`` it never
    will. Raises the driver's error when the database cannot answer in time."""
    with connect() as conn, conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = '{FENCE_LOCK_TIMEOUT}'")
        return conn.execute(FENCE, (token,)).fetchone() is None
