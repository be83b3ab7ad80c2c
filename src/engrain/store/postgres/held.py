"""What a PostgreSQL store holds in process per user, bounded by bytes (issue 18, session 17).

The learnings searched in process (``learnings.py``) and the pool's projections
(``projected.py``) keep one value per large user, loaded in the background by a
:class:`~engrain.store.postgres.loader.Loader`. :class:`HeldByBytes` is what they share: the
values in least-recently-used order under one lock, their bytes bounded by ``max_bytes``
(the oldest dropped first), waiting for a load (tests, benchmarks), dropping one user, and
closing. A subclass reads its values (``_load``) and decides when a loaded one replaces the
held one (only if newer: the loader's rule, ``loader.py``).

Threads: every read or change of the held values is under ``_lock``, which the loader takes
only to check and update a key's record, never during a load.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from engrain.store.postgres.codec import Conn
from engrain.store.postgres.loader import Answering, Load, Loader

#: Lends a pooled autocommit connection.
Connect = Callable[[], AbstractContextManager[Conn]]


class Sized(Protocol):
    """A held value: what holding it costs, in bytes."""

    @property
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=Sized)


class HeldByBytes(ABC, Generic[V]):
    """Per-user values held in process, at most ``max_bytes`` of them (module docstring).
    ``pause``, ``what`` and ``name`` pace, describe and name the loads (:class:`Loader`);
    ``background`` False loads in the calling thread (tests); ``answering`` holds the loads
    a call asks for until a call has answered (``loader.Answering``)."""

    def __init__(
        self,
        connect: Connect,
        max_bytes: int,
        pause: Callable[[float, bool], float],
        *,
        what: str,
        name: str,
        background: bool = True,
        answering: Answering | None = None,
    ) -> None:
        self._connect = connect
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._held: OrderedDict[str, V] = OrderedDict()
        self._loader: Loader[str] = Loader(
            self._lock, self._load, pause, what=what, name=name, background=background,
            answering=answering,
        )  # fmt: skip
        self._closed = False

    @abstractmethod
    def _load(self, user_id: str, loading: Load) -> None:
        """Read the user's value and publish it under ``_lock`` (the loader's job)."""

    def _recent(self, user_id: str) -> V | None:
        """The user's value, marked most recently used; ``None`` if not held."""
        with self._lock:
            value = self._held.get(user_id)
            if value is not None:
                self._held.move_to_end(user_id)
            return value

    @property
    def nbytes(self) -> int:
        """Bytes held across users."""
        with self._lock:
            return sum(value.nbytes for value in self._held.values())

    def _bound(self) -> None:
        """Drop the least recently used values until the rest fit (under ``_lock``)."""
        total = sum(value.nbytes for value in self._held.values())
        while total > self.max_bytes and self._held:
            total -= self._held.popitem(last=False)[1].nbytes

    def wait(self, user_id: str, timeout: float | None = None) -> bool:
        """Wait for a load of the user's value that runs (tests, benchmarks); whether one is
        held."""
        with self._lock:
            loading = self._loader.get(user_id)
            thread = None if loading is None else loading.thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            return user_id in self._held

    def drop(self, user_id: str) -> None:
        """Forget the user's value (the next search is served without it and loads one)."""
        with self._lock:
            self._held.pop(user_id, None)

    def close(self) -> None:
        """Drop everything held and start no more loads."""
        with self._lock:
            self._closed = True
            self._loader.close()
            self._held.clear()
