"""An in-memory store: the reference implementation of the protocol, used by fast tests."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engrain.model import Memory, Vector
from engrain.store.base import ALL, MemoryFilter, State
from engrain.store.cache import UserCache


class MemoryStore:
    """Keeps every user's memories in a :class:`UserCache`. A write reads every item it is
    given before changing anything, so a bad item leaves the store as it was."""

    def __init__(self) -> None:
        self._users: dict[str, UserCache] = {}
        self._vectors: dict[tuple[str, str], Vector] = {}
        self._state: dict[tuple[str, str, str], tuple[str, datetime]] = {}
        self._revisions: Counter[str] = Counter()
        self._lock = threading.RLock()

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
    ) -> None:
        plan_upserts = [(m.user_id, m.id, m) for m in upserts]
        plan_deletes = [(m.user_id, m.id) for m in deletes]
        plan_state = [((s.user_id, s.namespace, s.key), s.encoded()) for s in state]
        now = datetime.now(UTC)
        with self._lock:
            for user in {u for u, _, _ in plan_upserts} | {u for u, _ in plan_deletes}:
                self._revisions[user] += 1
            for where, value in plan_state:
                if value is None:
                    self._state.pop(where, None)
                else:
                    self._state[where] = (value, now)
            for user, _, memory in plan_upserts:
                self._users.setdefault(user, UserCache()).upsert([memory])
            for user, memory_id in plan_deletes:
                if user in self._users:
                    self._users[user].delete([memory_id])
            for user in [u for u, cache in self._users.items() if not len(cache)]:
                del self._users[user]

    def _cache(self, user_id: str) -> UserCache:
        return self._users.get(user_id) or UserCache()

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        with self._lock:
            return self._cache(user_id).get(ids)

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        with self._lock:
            return self._cache(user_id).query(flt, limit, offset)

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        with self._lock:
            return self._cache(user_id).search(vector, k, flt)

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        with self._lock:
            return self._cache(user_id).lexical_search(text, k, flt)

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        with self._lock:
            self._cache(user_id).touch(ids, at)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        with self._lock:
            return self._cache(user_id).count(flt)

    def centroid(self, user_id: str) -> Vector | None:
        with self._lock:
            return self._cache(user_id).centroid()

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        return {h: self._vectors[(model_id, h)] for h in hashes if (model_id, h) in self._vectors}

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        with self._lock:
            for h, v in vectors.items():
                self._vectors.setdefault((model_id, h), np.asarray(v, dtype=np.float32))

    def revision(self, user_id: str) -> int:
        with self._lock:
            return self._revisions[user_id]

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._state.get((user_id, namespace, key))
            return None if found is None else dict(json.loads(found[0]))

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        with self._lock:
            old = [
                where for where, (_, at) in self._state.items()
                if where[:2] == (user_id, namespace) and at < before
            ]  # fmt: skip
            for where in old:
                del self._state[where]
            return len(old)

    def users(self) -> list[str]:
        return sorted(self._users)

    def close(self) -> None:
        """Nothing to release."""
