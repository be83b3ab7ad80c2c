"""A large user's BM25 index kept between processes (issue 18), as ``numpy.savez`` bytes.

Building the index tokenizes every memory (2.5 s at 100,000 memories, most of a cold
start); reading it back from arrays takes a small fraction of that. The saved copy (the
SQLite store keeps it in its ``derived_indexes`` table, written in one transaction) is only
an accelerator and never trusted on its word: it holds a fingerprint of what it was built
from (every document's text, in order, and the source of ``store/lexical.py``, so a change
of the tokenizer invalidates it) and is used only when that equals the fingerprint of the
working set being loaded. It is read without pickle; a copy that does not load, or does not
match, is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import io
import logging
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engrain.store import lexical
from engrain.store.columns import texts_digest
from engrain.store.lexical import LexicalIndex

log = logging.getLogger(__name__)

#: Users with fewer memories build their index in the call (under ~120 ms): no file.
PERSIST_MIN_DOCUMENTS = 5_000


@lru_cache(maxsize=1)
def _tokenizer_digest() -> bytes:
    """A digest of the module that tokenizes and builds the index."""
    return hashlib.blake2b(Path(lexical.__file__).read_bytes(), digest_size=16).digest()


def fingerprint(documents: Sequence[str]) -> bytes:
    """What an index of ``documents`` depends on: their texts in order and the tokenizer."""
    joined = "\0".join(documents).encode("utf-8", "surrogatepass")
    return fingerprint_of(texts_digest(len(documents), joined))


def fingerprint_of(digest: bytes) -> bytes:
    """:func:`fingerprint` of the documents whose :func:`~engrain.store.columns.
    texts_digest` is ``digest`` (a working set loaded as columns keeps it: no text is
    hashed to check a saved index)."""
    return hashlib.blake2b(_tokenizer_digest() + digest, digest_size=32).digest()


def load(data: bytes | None, documents: Sequence[str]) -> LexicalIndex | None:
    """The index :func:`dump` made if it was built from exactly ``documents``, else
    ``None`` (none saved, unreadable, damaged, or of other documents)."""
    return load_matching(data, fingerprint(documents), len(documents))


def load_matching(data: bytes | None, expected: bytes, count: int) -> LexicalIndex | None:
    """:func:`load` for ``count`` documents whose :func:`fingerprint` is ``expected``."""
    return matching(parsed(data, expected), expected, count)


@dataclass(frozen=True)
class Saved:
    """A saved index read back, and the fingerprint of what it was built from."""

    fingerprint: bytes
    index: LexicalIndex


def parsed(data: bytes | None, expected: bytes | None = None) -> Saved | None:
    """The index in ``data`` (``None``: none, or unreadable), not yet checked against the
    documents (:func:`matching` does); with ``expected``, a copy of other documents is not
    read further."""
    if data is None:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            found = bytes(saved["fingerprint"].tobytes())
            if expected is not None and found != expected:
                return None
            index = LexicalIndex.from_arrays(
                {name: saved[name] for name in ("terms", "offsets", "docs", "tfs", "lengths")}
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("saved BM25 index unreadable (%s): rebuilding", exc)
        return None
    return Saved(found, index)


def matching(saved: Saved | None, expected: bytes, count: int) -> LexicalIndex | None:
    """The index of ``saved`` if it was built from ``count`` documents whose
    :func:`fingerprint` is ``expected``, else ``None``."""
    if saved is None or saved.fingerprint != expected or saved.index.size != count:
        return None
    return saved.index


def dump(index: LexicalIndex, expected: bytes) -> bytes:
    """``index`` with ``expected``, the :func:`fingerprint` of the documents it was built
    from, as bytes. The caller knows it already (it checked the saved copy against it):
    taken, not computed again, so a save holds neither the documents nor their joined
    texts (~0.6 GB at 1,000,000 memories beside the copy being written)."""
    arrays: dict[str, Any] = {
        "fingerprint": np.frombuffer(expected, dtype=np.uint8),
        **index.to_arrays(),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
