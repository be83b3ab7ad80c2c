"""The PostgreSQL store's connections: the pool every call takes a connection from, reads
(one statement, every row fetched), and write transactions (pipelined ``BEGIN`` …
``COMMIT``, retried after a deadlock or serialization failure, and resolved by their token
when the connection breaks after the ``COMMIT`` was sent: ``outcome.py``).

Nothing is held across calls here but the pool: each read or transaction takes its own
connection and returns it, so threads never share one. ``_lock`` guards only this
process's bookkeeping (the prune clock here; the listings, rows and plans of the layers
above), never a statement: no thread waits on it while the database works. Every statement
takes its connection after the counted uses handed over by calls that returned are
committed (``deferred.py``, ``ENGRAIN_DEFER_USES``): one attribute read when none wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool

from engrain.errors import (
    OutOfMemoryError,
    StoreError,
    ValidationError,
    WriteOutcomeUnknownError,
)
from engrain.store.postgres import outcome
from engrain.store.postgres.codec import Conn, configure
from engrain.store.postgres.deferred import DeferredCounts
from engrain.threads import cannot_start

#: Times a write is retried after a deadlock or serialization failure.
_RETRIES = 3
T = TypeVar("T")


class Pooled:
    """The database at ``url`` through this process's pool (attributes set by
    :class:`~engrain.store.postgres.PostgresStore`'s constructor, in its order)."""

    url: str
    _where: str  # the URL without its password, for messages
    _closed: bool
    _lock: threading.Lock
    _next_prune: float  # outcome.PRUNE_SECONDS: old write tokens deleted
    _tokens: bool  # writes record their tokens (migration 010 applied)
    _pool: ConnectionPool[Conn]
    #: The counts of calls that returned, committed after them (``deferred.py``); ``None``:
    #: each call commits its own.
    _deferred: DeferredCounts | None

    def _open_pool(self, pool_size: int, connect_timeout: float) -> None:
        """Open the pool (at most ``pool_size`` connections) and wait for its first."""
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True},
            configure=configure,
            timeout=connect_timeout,
            name="engrain",
            open=False,
        )
        try:
            self._pool.open()  # its threads start here
            self._pool.wait(timeout=connect_timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise StoreError(f"cannot open PostgreSQL store at {self._where}: {exc}") from exc
        except RuntimeError as exc:
            self._pool.close()  # the threads that did start end
            if not cannot_start(exc):
                raise
            raise OutOfMemoryError(
                f"cannot open PostgreSQL store at {self._where}: a thread of its connection "
                "pool could not start (out of memory or the process's thread limit)"
            ) from exc

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        if self._closed:
            raise StoreError(f"the PostgreSQL store at {self._where} is closed")
        if self._deferred is not None:  # every statement after the counts handed over
            self._deferred.settle()
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.errors.DataError as exc:
            raise ValidationError(f"PostgreSQL refused a value: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL at {self._where} failed: {exc}") from exc

    def _read(self, query: Any, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def _transaction(self, body: Callable[[Conn], T]) -> T:
        """``body`` in one transaction, retried from the start after a deadlock or a
        serialization failure (the transaction was rolled back, so it is safe).

        The transaction runs in pipeline mode, opened and closed by plain ``BEGIN`` and
        ``COMMIT`` statements queued with the body's: they travel together, so a write
        waits for the server only where the body reads a result (its row locks) and once
        at the end — a body that reads nothing (an access count, a state document) is one
        round trip. (psycopg's ``transaction()`` inside a pipeline syncs when it opens
        and twice when it closes: four round trips for one statement.) A statement the
        server refuses aborts the pipeline, the rest is skipped and the transaction is
        rolled back: nothing of it is written. A connection that breaks once the ``COMMIT``
        is sent leaves the outcome to :meth:`_resolve` (``outcome.py``)."""
        for attempt in range(_RETRIES + 1):
            token = outcome.new_token() if self._tokens else None
            prune = self._prune_due() if self._tokens else None
            try:
                with self._connection() as conn:
                    return outcome.in_one_transaction(conn, body, token, prune)
            except outcome.InDoubt as doubt:  # only ever raised with a token
                return self._resolve(token or b"", doubt)  # type: ignore[no-any-return]
            except StoreError as exc:
                retry = isinstance(
                    exc.__cause__,
                    psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure,
                )
                if not retry or attempt == _RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _resolve(self, token: bytes, doubt: outcome.InDoubt) -> Any:
        """The result of a write whose connection broke after its ``COMMIT`` was sent, if
        the database finds its token (it committed); else ``StoreError`` (it did not, and
        now never will), or :class:`WriteOutcomeUnknownError` if the database cannot say."""
        cause = doubt.__cause__
        try:
            stored = outcome.committed(self._pool.connection, token)
        except psycopg.Error as exc:
            raise WriteOutcomeUnknownError(
                f"PostgreSQL at {self._where} went away while a write was committing "
                f"({str(cause).strip()}) and could not be asked whether it committed "
                f"({str(exc).strip()}): it may or may not be stored. Read it back (get or "
                "list it by id) once the database answers before writing it again."
            ) from exc
        if not stored:
            raise StoreError(
                f"PostgreSQL at {self._where} failed while committing (nothing was "
                f"written): {str(cause).strip()}"
            ) from cause
        return doubt.result

    def _prune_due(self) -> bytes | None:
        """The token bound to prune below, once every ``outcome.PRUNE_SECONDS`` per store."""
        now = time.time()
        with self._lock:
            if now < self._next_prune:
                return None
            self._next_prune = now + outcome.PRUNE_SECONDS
        return outcome.prune_below(now)

    # -- protocol -----------------------------------------------------------------------
