"""The embedder protocol and the factory that picks one from settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from engrain.errors import ConfigError

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors, always in batches."""

    @property
    def model_id(self) -> str:
        """A stable name of the model; cached vectors are keyed by it."""
        ...

    @property
    def dim(self) -> int:
        """The vector dimension."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """A ``(len(texts), dim)`` matrix of L2-normalised rows."""
        ...


def make_embedder(
    name: str,
    *,
    threads: int = 0,
    spinning: bool = True,
    split: bool = False,
    int8: bool | None = None,
) -> Embedder:
    """The embedder called ``name`` in settings: ``minilm`` or ``hash``; ``threads``,
    ``spinning``, ``split`` and ``int8`` are :class:`~engrain.embed.minilm.MiniLMEmbedder`'s."""
    if name == "minilm":
        from engrain.embed.minilm import MiniLMEmbedder

        return MiniLMEmbedder(threads=threads, spinning=spinning, split=split, int8=int8)
    if name == "hash":
        from engrain.embed.hashing import HashEmbedder

        return HashEmbedder()
    raise ConfigError(f"unknown embedder {name!r}; expected 'minilm' or 'hash'")
