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

This module is kept apart from ``store/columns.py`` on purpose: the image's header holds a
digest of that module's source, so editing it invalidates every saved image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.model import Memory
from engrain.store.columns import (
    _ARRAYS,
    _CODES,
    _STRINGS,
    Codes,
    Columns,
    ColumnsBuilder,
    Strings,
    texts_digest,
)
from engrain.store.ids import IdColumn
from engrain.store.rows import Rows
from engrain.store.texts import materialized


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
        return materialized(base)
    builder = ColumnsBuilder(base.user_id)
    builder.add([(*encode(m), int(base.rowids[row])) for m, row in zip(memories, at, strict=True)])
    return _merged(base, builder.finish(), replaced)


def _merged(base: Columns, changed: Columns, rows: npt.NDArray[np.intp]) -> Columns:
    """``base`` with its ``rows`` taken from ``changed`` (one row each, in order)."""
    fields: dict[str, Any] = {}
    for name in _STRINGS:
        values = getattr(base, name).all()
        for i, row in enumerate(rows.tolist()):
            values[row] = getattr(changed, name)[i]
        fields[name] = Strings.of(values)
    for name in _CODES:
        items: list[Any] = getattr(base, name).objects().tolist()
        for i, row in enumerate(rows.tolist()):
            items[row] = getattr(changed, name)[i]
        fields[name] = Codes.of(items)
    for name in _ARRAYS:
        array = np.array(getattr(base, name), copy=True)
        array[rows] = getattr(changed, name)
        fields[name] = array
    content: Strings = fields["content"]
    return Columns(
        user_id=base.user_id, rowids=np.array(base.rowids, copy=True),
        content_digest=texts_digest(len(content), content.blob), **fields,
    )  # fmt: skip


def same_rows(a: Rows, b: Rows) -> bool:
    """Whether ``b`` holds the same memories as ``a`` (only access counts may differ:
    counting uses keeps the other parts of a :class:`Rows`)."""
    return a.base is b.base and a.source is b.source and a.objects is b.objects
