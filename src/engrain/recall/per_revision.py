"""Per-user indexes derived from a store's rows, kept in this process and rebuilt when the
user's revision changes (the conversation chunks' lines, the derived session summaries).

Threads: a reader takes the kept index under the lock and builds outside it; two threads
that both find it stale build twice and the newer revision wins. A revision read *before*
the memories are listed labels an index at worst older than it is, so the next change of
revision rebuilds it (see ``recall/turns.py``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from engrain.model import Memory
from engrain.store.base import Store

#: Texts to unit vectors (the engine's embedder, through its content-hash cache).
Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


class Revisioned(Protocol):
    """An index labelled with the store revision it was built at."""

    @property
    def revision(self) -> int: ...


T = TypeVar("T", bound=Revisioned)

#: ``build(memories, user_id, revision, embed, previous)``: the user's index of ``memories``
#: at ``revision`` (``previous``: the one it replaces, whose work it may reuse).
Build = Callable[[Sequence[Memory], str, int, Embed, "T | None"], T]

#: Users whose index a store's :class:`UserIndexes` keeps (least recently used dropped
#: first, rebuilt when next asked for): as many as the SQLite store keeps working sets.
HELD_USERS = 64


class UserIndexes(Generic[T]):
    """The index of each of the :data:`HELD_USERS` most recently used users of one store."""

    def __init__(self, build: Build[T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._users: OrderedDict[str, T] = OrderedDict()

    def of(self, store: Store, user_id: str, embed: Embed) -> T:
        """The user's index at the store's current revision (rebuilt if it changed)."""
        revision = store.revision(user_id)
        with self._lock:
            current = self._users.get(user_id)
            if current is not None:
                self._users.move_to_end(user_id)
        if current is not None and current.revision == revision:
            return current
        index = self._build(store.query(user_id), user_id, revision, embed, current)
        with self._lock:
            now = self._users.get(user_id)
            if now is None or now.revision <= revision:
                self._users[user_id] = index
                self._users.move_to_end(user_id)
                while len(self._users) > HELD_USERS:
                    self._users.popitem(last=False)
        return index


class StoreIndexes(Generic[T]):
    """:class:`UserIndexes` per store, created on first use and dropped with the store."""

    def __init__(self, build: Build[T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._stores: weakref.WeakKeyDictionary[Store, UserIndexes[T]] = weakref.WeakKeyDictionary()

    def __call__(self, store: Store) -> UserIndexes[T]:
        """The process's indexes of ``store``."""
        with self._lock:
            found = self._stores.get(store)
            if found is None:
                found = self._stores[store] = UserIndexes(self._build)
            return found
