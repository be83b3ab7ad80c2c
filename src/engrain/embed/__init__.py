"""Embedders: the :class:`Embedder` protocol, the local all-MiniLM-L6-v2, a test embedder."""

from engrain.embed.base import Embedder, make_embedder
from engrain.embed.cache import CachedEmbedder
from engrain.embed.hashing import HashEmbedder

__all__ = ["CachedEmbedder", "Embedder", "HashEmbedder", "make_embedder"]
