"""Embeddings cached by content hash, so identical text is never embedded twice."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from engrain.embed.base import Embedder, Matrix
from engrain.errors import StoreError
from engrain.model import Vector, content_hash

log = logging.getLogger(__name__)


class EmbeddingCache(Protocol):
    """Where cached vectors live (the store implements it)."""

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """The vectors known for ``hashes`` under ``model_id``."""
        ...

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Remember ``vectors`` (content hash → vector) under ``model_id``."""
        ...


class CachedEmbedder:
    """Wraps an embedder: looks every text up by content hash first, embeds only the rest
    (each distinct text once, in one batch), and writes the new vectors back."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache, queries: int = 256) -> None:
        self.inner = embedder
        self._cache = cache
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._query_slots = queries
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str], *, keep: bool = True) -> Matrix:
        """The texts' vectors: cached ones read, the rest embedded (and written to the
        cache unless ``keep`` is false)."""
        hashes = [content_hash(t) for t in texts]
        known = self._cache.cached_embeddings(self.model_id, sorted(set(hashes)))
        missing: dict[str, str] = {}
        for h, text in zip(hashes, texts, strict=True):
            if h not in known and h not in missing:
                missing[h] = text
        if missing:
            fresh = self.inner.embed(list(missing.values()))
            new = {h: fresh[i] for i, h in enumerate(missing)}
            if keep:
                self._keep(new)
            known.update(new)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, h in enumerate(hashes):
            out[row] = known[h]
        return out

    def _keep(self, vectors: dict[str, Vector]) -> None:
        """Write ``vectors`` to the store's cache, if it can: the cache only saves work,
        so a store that cannot take the write (a full disk, a read-only mount, a server
        gone) leaves the call that embedded them to go on, and the next call embeds them
        again. The call's own writes, if any, still fail as they should."""
        try:
            self._cache.cache_embeddings(self.model_id, vectors)
        except StoreError as exc:
            log.warning("embeddings not cached: %s", exc)

    def embed_query(self, text: str) -> Vector:
        """One query vector. Recent queries are kept in a small in-process LRU (a message is
        often explained, then answered); the store's cache is left to memory texts."""
        with self._lock:
            vector = self._queries.get(text)
            if vector is not None:
                self._queries.move_to_end(text)
                return vector
        fresh: Vector = self.inner.embed([text])[0]
        with self._lock:
            self._queries[text] = fresh
            if len(self._queries) > self._query_slots:
                self._queries.popitem(last=False)
        return fresh
