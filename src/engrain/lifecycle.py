"""An engine's calls against its ``close()``: the rule that no call outlives the engine.

``close()`` shuts the gate first: a public call that begins after it is refused with
:class:`~engrain.errors.StoreError` before it reads or writes anything. It then waits (at
most :data:`CLOSE_WAIT` seconds) for the calls already in flight, and only then stops the
engine's threads and closes its store, so a call that raced ``close()`` either completes
or, when it outlived the wait, meets a closed planner, worker or store and raises
``StoreError`` with nothing written (a store writes a call's result in one transaction).
Nothing starts a thread pool once its owner is closed (``Planner._side``,
``Worker.submit``): that is what left embedding threads alive after ``close()``
(``bench/attacks/async_cancel.py``).

A call made by a thread already inside an admitted call (``compress`` run by an ingest's
own thread, a public method calling another) is part of that call and is admitted, so an
admitted call never fails half way because ``close()`` began. ``export_records`` returns
an iterator that reads as it is consumed, after its call returned: consumed after
``close()``, it raises the closed store's ``StoreError``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

from engrain.errors import OutOfMemoryError, StoreError
from engrain.threads import cannot_start

__all__ = ["CLOSE_WAIT", "CallGate", "admitted", "closed_error"]

#: Seconds ``close()`` waits for the calls in flight before it closes the store under them.
CLOSE_WAIT = 30.0

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def closed_error(what: str = "engine") -> StoreError:
    """The error of a call that meets a closed engine (or its planner, worker, store)."""
    return StoreError(f"the {what} is closed: nothing was done")


class CallGate:
    """Counts the calls in flight; after :meth:`close` admits none but nested ones.
    ``around`` (if given) is entered around each outermost call of a thread: the store's
    ``answering`` (the PostgreSQL store begins the loads a call asks for once it has
    answered)."""

    def __init__(self, around: Callable[[], AbstractContextManager[None]] | None = None) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._closed = False
        self._depth = threading.local()  # admitted calls this thread is inside
        self._around = around

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has begun."""
        return self._closed

    @contextmanager
    def call(self) -> Iterator[None]:
        """Admit one call for the ``with`` block, or raise ``StoreError`` when closed."""
        depth = getattr(self._depth, "n", 0)
        with self._changed:
            if self._closed and depth == 0:
                raise closed_error()
            self._running += 1
        self._depth.n = depth + 1
        try:
            if depth == 0 and self._around is not None:
                with self._around():
                    yield
            else:
                yield
        finally:
            self._depth.n = depth
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def close(self, timeout: float | None = None) -> int:
        """Admit no new call and wait up to ``timeout`` seconds (default
        :data:`CLOSE_WAIT`) for those in flight, not counting the calls the closing thread
        is inside; how many still run."""
        mine = getattr(self._depth, "n", 0)
        with self._changed:
            self._closed = True
            wait = CLOSE_WAIT if timeout is None else timeout
            self._changed.wait_for(lambda: self._running <= mine, wait)
            return self._running - mine


class Gated(Protocol):
    """An object whose public calls go through a :class:`CallGate`."""

    @property
    def gate(self) -> CallGate: ...


G = TypeVar("G", bound=Gated)


def admitted(method: Callable[Concatenate[G, P], R]) -> Callable[Concatenate[G, P], R]:
    """``method`` run inside its object's gate: refused once the object is closed."""

    @functools.wraps(method)
    def run(self: G, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.gate.call(), out_of_memory():
            result = method(self, *args, **kwargs)
        if isinstance(result, Generator):  # read after the call returns: translated too
            return cast(R, _translated(result))
        return result

    return run


@contextmanager
def out_of_memory() -> Iterator[None]:
    """Turn running out of memory inside a public call into :class:`OutOfMemoryError`:
    ``MemoryError``, and the ``RuntimeError`` of a thread that could not start (its stack
    could not be mapped). Raised before a commit, the call wrote nothing (a write's
    transaction rolls back); after one, the store does not raise it (its caches are
    dropped instead: ``sqlite_versions``), so it never reports a committed write failed."""
    try:
        yield
    except MemoryError as exc:
        raise OutOfMemoryError(
            "out of memory during the call: nothing was written; try again once memory "
            "is free (or raise the process's memory limit)"
        ) from exc
    except RuntimeError as exc:
        if not cannot_start(exc):
            raise
        raise OutOfMemoryError(
            "could not start a thread (out of memory or the process's thread limit): "
            "nothing was written; try again once memory is free"
        ) from exc


def _translated(items: Generator[T, None, None]) -> Iterator[T]:
    """``items`` read with :func:`out_of_memory` around each step."""
    while True:
        with out_of_memory():
            try:
                item = next(items)
            except StopIteration:
                return
        yield item
