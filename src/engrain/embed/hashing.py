"""A deterministic embedder for fast tests: feature hashing of words and character trigrams.

Texts that share words get similar vectors, so ranking tests mean something, but it is not a
language model; the real engine uses :class:`engrain.embed.minilm.MiniLMEmbedder`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from engrain.embed.base import Matrix

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Feature-hashing embedder (words weight 1.0, character trigrams 0.3)."""

    def __init__(self, dim: int = 384) -> None:
        self._dim = dim
        self.calls = 0
        self.texts_embedded = 0

    @property
    def model_id(self) -> str:
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self._dim, (1.0 if (value >> 63) & 1 else -1.0)

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            lowered = text.lower()
            for word in _WORD.findall(lowered):
                index, sign = self._bucket("w:" + word)
                out[row, index] += sign
            for i in range(len(lowered) - 2):
                index, sign = self._bucket("c:" + lowered[i : i + 3])
                out[row, index] += 0.3 * sign
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out
