"""A working set's saved image brought up to date from a process's own snapshot (issue 18).

The image of a large user's columns (``store/columns.py``) is stamped with the revision it
was read at, and every write of the user's rows bumps the revision, promotions included (a
memory's tenth use is a patch). Before this module the image went stale at the first such
write and was saved again only by the next process that read every row (~2.5 s of CPU at
100,000). A process that has only *patched* rows of its image (``UPDATE``: every row keeps
its rowid and its place) holds in its working set exactly what the rows hold, so it can
save the image itself: :func:`patched_columns` rebuilds the columns from the loaded ones
with the patched rows' new values, encoded by the same :class:`~engrain.store.columns.
ColumnsBuilder` a load from the rows uses (so both ways give the same bytes for the same
rows). The SQLite store decides when that is safe (no other process has committed since,
no row inserted, replaced or deleted) and stamps it (``SQLiteStore._refresh_image``).

**Without every text in memory**: the image holds no texts, only their digest, so the
refresh never builds the list of every text (nor of every id and hash): at 100,000
memories that list, its blob and the strings' objects were ~150 MB at the refresh's peak,
most of it kept by the allocator afterwards (a process serving a large user for over a
minute held ~440 MB instead of ~300, session 17). The ids and hashes are spliced (the
patched rows' bytes replaced in the blob), and the texts' digest is fed chunk by chunk
(:data:`DIGEST_CHUNK` texts read from the rows at a time), giving the same bytes as before.

This module is kept apart from ``store/columns.py`` on purpose: the image's header holds a
digest of that module's source, so editing it invalidates every saved image.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.model import Memory
from engrain.store.columns import (
    _ARRAYS,
    _CODES,
    _ENCODING,
    _STRINGS,
    Codes,
    Columns,
    ColumnsBuilder,
    Strings,
)
from engrain.store.ids import IdColumn
from engrain.store.rows import Rows
from engrain.store.texts import RowTexts

#: Texts read from the rows at a time for the digest of a refreshed image (~1.3 MB of text
#: at 100,000 memories' ~330 bytes a text).
DIGEST_CHUNK = 4_096


def patched_columns(
    rows: Rows, ids: IdColumn, encode: Callable[[Memory], tuple[Any, ...]]
) -> Columns | None:
    """The columns ``rows`` hold now, if they are the rows of their loaded table in order,
    some replaced in place by memories of the same id (patched); else ``None`` (a row was
    added or removed since the load, or the rows were not loaded as a table). ``ids`` are
    the rows' memory ids; ``encode`` makes the SQLite row of a memory (``MEMORY_COLUMNS``
    order)."""
    base = rows.base
    if base is None or len(rows) != len(base) or len(base.rowids) != len(base):
        return None
    source = rows.source
    replaced = np.flatnonzero(source < 0)
    kept = np.flatnonzero(source >= 0)
    if not np.array_equal(source[kept], kept):
        return None
    at = replaced.tolist()
    memories = [m for m in (rows.objects.get(str(ids[row])) for row in at) if m is not None]
    if len(memories) != len(at) or any(
        m.id != base.ids[row] for m, row in zip(memories, at, strict=True)
    ):
        return None
    if not at:
        return base  # the rows as loaded: the image's bytes need none of its texts
    builder = ColumnsBuilder(base.user_id)
    builder.add([(*encode(m), int(base.rowids[row])) for m, row in zip(memories, at, strict=True)])
    return _merged(base, builder.finish(), replaced)


def _merged(base: Columns, changed: Columns, rows: npt.NDArray[np.intp]) -> Columns:
    """``base`` with its ``rows`` taken from ``changed`` (one row each, in order), without
    the list of every string: blobs spliced, texts kept where they are (the rows' reader
    reads the patched rows' new texts) and their digest computed chunk by chunk."""
    at = rows.tolist()
    fields: dict[str, Any] = {}
    for name in _STRINGS:
        strings = getattr(base, name)
        new = [getattr(changed, name)[i] for i in range(len(at))]
        if isinstance(strings, Strings):
            fields[name] = spliced(strings, at, new)
        else:  # the rows' texts (store/texts.py): read from the rows, patched ones too
            fields[name] = strings
    for name in _CODES:
        items: list[Any] = getattr(base, name).objects().tolist()
        for i, row in enumerate(at):
            items[row] = getattr(changed, name)[i]
        fields[name] = Codes.of(items)
    for name in _ARRAYS:
        array = np.array(getattr(base, name), copy=True)
        array[rows] = getattr(changed, name)
        fields[name] = array
    texts = {row: changed.content[i] for i, row in enumerate(at)}
    return Columns(
        user_id=base.user_id, rowids=np.array(base.rowids, copy=True),
        content_digest=chunked_digest(len(base), _chunks(fields["content"], texts)), **fields,
    )  # fmt: skip


def spliced(strings: Strings, rows: Sequence[int], values: Sequence[str]) -> Strings:
    """``strings`` with entry ``rows[i]`` replaced by ``values[i]`` (rows ascending), in a
    blob of its own: the same as :meth:`Strings.of` of every entry, without them."""
    blob, bounds = strings.blob, strings.at
    encoded = [value.encode(*_ENCODING) for value in values]
    lengths = np.diff(bounds)
    lengths[list(rows)] = [len(value) + 1 for value in encoded]
    out = np.zeros(len(bounds), dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    pieces, start = [], int(bounds[0])
    for row, value in zip(rows, encoded, strict=True):
        pieces += [blob[start : int(bounds[row])], value]
        start = int(bounds[row + 1]) - 1  # the NUL after the entry starts the next piece
    pieces.append(blob[start : max(start, int(bounds[-1]) - 1)])
    return Strings(b"".join(pieces), out)


def chunked_digest(count: int, chunks: Iterator[list[str]]) -> bytes:
    """:func:`~engrain.store.columns.texts_digest` of ``count`` texts given in chunks (in
    order), without joining them all."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(count.to_bytes(8, "little"))
    first = True
    for chunk in chunks:
        if chunk:
            joined = "\0".join(chunk).encode(*_ENCODING)
            digest.update(joined if first else b"\0" + joined)
            first = False
    return digest.digest()


def _chunks(content: Strings | RowTexts, patched: Mapping[int, str]) -> Iterator[list[str]]:
    """The texts of ``content`` in chunks of :data:`DIGEST_CHUNK`, ``patched`` rows' taken
    from it (the rows' reader reads them anyway; a table holding its texts has them
    spliced already)."""
    rows = sorted(patched)
    for start in range(0, len(content), DIGEST_CHUNK):
        stop = min(start + DIGEST_CHUNK, len(content))
        if isinstance(content, RowTexts):
            chunk = content.read(range(start, stop))
        else:
            chunk = [content[row] for row in range(start, stop)]
        for row in rows[bisect_left(rows, start) : bisect_left(rows, stop)]:
            chunk[row - start] = patched[row]
        yield chunk


def same_rows(a: Rows, b: Rows) -> bool:
    """Whether ``b`` holds the same memories as ``a`` (only access counts may differ:
    counting uses keeps the other parts of a :class:`Rows`)."""
    return a.base is b.base and a.source is b.source and a.objects is b.objects
