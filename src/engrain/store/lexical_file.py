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
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

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


#: The arrays of a saved copy (:meth:`~engrain.store.lexical.LexicalIndex.to_held`).
HELD = ("terms", "offsets", "wide", "wide_tf", "gaps", "wide_docs", "tfs", "wide_tfs", "lengths")


def parsed(data: bytes | None, expected: bytes | None = None) -> Saved | None:
    """The index in ``data`` (``None``: none, or unreadable), not yet checked against the
    documents (:func:`matching` does); with ``expected``, a copy of other documents is not
    read further. Its postings are views of ``data`` (:func:`views`): nothing is copied
    or decoded."""
    if data is None:
        return None
    try:
        arrays = views(data)
        found = bytes(arrays["fingerprint"].tobytes())
        if expected is not None and found != expected:
            return None
        if any(name not in arrays for name in HELD):
            return None  # an earlier version's layout (of another tokenizer's fingerprint)
        index = LexicalIndex.from_held({name: arrays[name] for name in HELD})
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("saved BM25 index unreadable (%s): rebuilding", exc)
        return None
    return Saved(found, index)


def views(data: bytes) -> dict[str, npt.NDArray[Any]]:
    """The arrays of ``numpy.savez`` bytes (members stored, not compressed, as
    :func:`dump` writes them), each a read-only view of ``data`` where its bytes lie
    (copied only if they lie unaligned for its type): ``numpy.load`` would copy every one
    (and check each member's CRC-32: the bytes are checked whole where they are read, by
    SQLite or by their file's CRC, ``store/derived_files.py``). Raises ``ValueError`` for
    anything else (a compressed member, an object array, a member cut short)."""
    out: dict[str, npt.NDArray[Any]] = {}
    whole = memoryview(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"saved BM25 member {info.filename!r} is not a stored array")
            at = info.header_offset
            local = whole[at : at + _LOCAL_HEADER]
            if len(local) != _LOCAL_HEADER or bytes(local[:4]) != b"PK\x03\x04":
                raise ValueError("saved BM25 member header damaged")
            start = at + _LOCAL_HEADER + int.from_bytes(local[26:28], "little") \
                + int.from_bytes(local[28:30], "little")  # fmt: skip
            # the header alone (a BytesIO of the member would copy it)
            member = io.BytesIO(whole[start : start + min(info.file_size, _HEADER_MAX)])
            version = np.lib.format.read_magic(member)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(member)
                                     if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(member))  # fmt: skip
            count = math.prod(shape)
            if dtype.hasobject or fortran or member.tell() + count * dtype.itemsize \
                    > info.file_size:  # fmt: skip
                raise ValueError(f"saved BM25 member {info.filename!r} is not a plain array")
            array = np.frombuffer(data, dtype=dtype, count=count, offset=start + member.tell())
            if not array.flags.aligned:
                array = array.copy()
            array = array.reshape(shape)
            array.flags.writeable = False
            out[info.filename.removesuffix(".npy")] = array
    return out


#: A zip member's local header: 30 bytes, then its name and its extra field.
_LOCAL_HEADER = 30
#: The most bytes an array's ``.npy`` header is read from (``numpy.savez`` writes ~128).
_HEADER_MAX = 65_536


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
        **index.to_held(),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
