"""The reads a store answers from a user's working set (:class:`~engrain.store.cache.
UserCache`) alone: the in-memory store's and the SQLite store's, one definition for both.

A store mixing this in defines ``_cache(user_id)``: the user's working set, current as of
the call (the SQLite store brings it up to the file's revision and other processes' commits
first, under its lock: ``store/sqlite_versions.py``). A working set is safe to read
unlocked, so nothing here takes a lock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engrain.model import Memory, Vector
from engrain.store.base import ALL, MemoryFilter
from engrain.store.cache import UserCache


class WorkingSetReads:
    """Queries, searches, counts and the centroid, each one call on the user's working
    set."""

    def _cache(self, user_id: str) -> UserCache:
        raise NotImplementedError  # the store's own, first in its method order

    def working_set(self, user_id: str) -> Mapping[str, Memory]:
        """The user's working set by id (current as of the call): an immutable mapping,
        replaced by a new one on every change, counted uses included, so comparing
        identities tells a caller keeping per-memory data (the inspector's used order)
        whether anything changed since it looked."""
        return self._cache(user_id).snapshot.rows

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        return self._cache(user_id).query(flt, limit, offset)

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        return self._cache(user_id).search(vector, k, flt)

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, from one product over the working set."""
        return self._cache(user_id).search_many(vector, searches)

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        return self._cache(user_id).lexical_search(text, k, flt)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        return self._cache(user_id).count(flt)

    def centroid(self, user_id: str) -> Vector | None:
        return self._cache(user_id).centroid()
