"""An in-memory store: the reference implementation of the protocol, used by fast tests."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from engrain.lexical import LexicalIndex
from engrain.model import Memory, Vector
from engrain.store.base import ALL, MemoryFilter


class MemoryStore:
    """Keeps everything in dicts. Writes are atomic because they are applied under one lock
    after being validated."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Memory]] = {}
        self._cache: dict[tuple[str, str], Vector] = {}
        self._lock = threading.RLock()

    def write(self, upserts: Sequence[Memory] = (), deletes: Sequence[Memory] = ()) -> None:
        with self._lock:
            staged = {user: dict(rows) for user, rows in self._rows.items()}
            for memory in upserts:
                staged.setdefault(memory.user_id, {})[memory.id] = memory
            for memory in deletes:
                staged.get(memory.user_id, {}).pop(memory.id, None)
            self._rows = {user: rows for user, rows in staged.items() if rows}

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        rows = self._rows.get(user_id, {})
        return [rows[i] for i in ids if i in rows]

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        found = [m for m in self._rows.get(user_id, {}).values() if flt.matches(m)]
        found.sort(key=lambda m: (m.updated_at, m.id), reverse=True)
        end = None if limit is None else offset + limit
        return found[offset:end]

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        found = [
            m for m in self._rows.get(user_id, {}).values()
            if flt.matches(m) and m.embedding is not None
        ]
        if not found or k <= 0:
            return []
        matrix = np.vstack([m.embedding for m in found if m.embedding is not None])
        sims = matrix @ vector.astype(np.float32)
        order = np.argsort(-sims, kind="stable")[:k]
        return [(found[i], float(sims[i])) for i in order]

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        found = [m for m in self._rows.get(user_id, {}).values() if flt.matches(m)]
        if not found or k <= 0:
            return []
        scores = LexicalIndex([m.content for m in found]).scores(text)
        order = [i for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0]
        return [(found[i], float(scores[i])) for i in order]

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        with self._lock:
            rows = self._rows.get(user_id, {})
            for memory_id in ids:
                if memory_id in rows:
                    m = rows[memory_id]
                    rows[memory_id] = m.evolve(access_count=m.access_count + 1, last_accessed_at=at)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        return sum(1 for m in self._rows.get(user_id, {}).values() if flt.matches(m))

    def centroid(self, user_id: str) -> Vector | None:
        vectors = [m.embedding for m in self._rows.get(user_id, {}).values() if m.embedding is not None]
        if not vectors:
            return None
        return np.mean(np.vstack(vectors), axis=0).astype(np.float32)

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        return {h: self._cache[(model_id, h)] for h in hashes if (model_id, h) in self._cache}

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        with self._lock:
            for h, v in vectors.items():
                self._cache[(model_id, h)] = np.asarray(v, dtype=np.float32)

    def users(self) -> list[str]:
        return sorted(self._rows)

    def close(self) -> None:
        """Nothing to release."""
