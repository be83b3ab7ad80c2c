"""The SQL the PostgreSQL store sends, built in one place: the upsert, filters, the vector
search in its two forms, the candidates of BM25 (see the package docstring for why each
looks as it does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from engrain.model import Vector
from engrain.store.base import MemoryFilter
from engrain.store.postgres.codec import (
    EACH_ACCESS,
    INSERT_COLUMNS,
    SELECT_COLUMNS,
    VERSION,
    WITH_ACCESS,
)
from engrain.store.postgres.graphed import GRAPHED_VALUE

T = TypeVar("T")

#: Rows per statement when a list of keys is sent as arrays.
CHUNK = 5_000

#: Insert a memory row, or replace every column of the one with its key; the row takes its
#: user's ``graphed`` flag as the write leaves it (the last three parameters: the write's
#: change of the user's memories, the writer's threshold, the user's id; ``graphed.py``),
#: so the HNSW graphs get the rows of graphed users only.
UPSERT = (
    f"INSERT INTO memories ({', '.join(INSERT_COLUMNS)}, graphed) VALUES ("
    + ", ".join(
        "%s::text[]" if c == "domains" else "%s::json" if c == "provenance" else "%s"
        for c in INSERT_COLUMNS
    )
    + f", coalesce({GRAPHED_VALUE}, false)) ON CONFLICT (user_id, id) DO UPDATE SET "
    + ", ".join(
        f"{c} = EXCLUDED.{c}" for c in (*INSERT_COLUMNS, "graphed") if c not in ("user_id", "id")
    )
)

#: The memories of one user with these ids, each with its row version (last column).
FETCH = (
    f"SELECT {SELECT_COLUMNS}, {VERSION} FROM memories m {EACH_ACCESS} "
    "WHERE m.user_id = %s AND m.id = ANY(%s::text[])"
)

#: A user's revision and access clock, and every access row stamped after a given clock
#: (id, count, last access; none: one row of NULLs), in one snapshot.
CHANGES = (
    "SELECT (SELECT revision FROM revisions WHERE user_id = %s), "
    "(SELECT clock FROM access_clocks WHERE user_id = %s), "
    "a.id, a.access_count, a.last_accessed_at "
    "FROM (SELECT 1) AS one LEFT JOIN access a ON a.user_id = %s AND a.clock > %s"
)

#: Full rows of these ``(user_id, id)`` keys, locked for update in key order (a write's
#: patches read them so; :func:`engrain.store.postgres.writes.write_body`).
LOCK_FULL_ROWS = (
    f"SELECT {SELECT_COLUMNS} FROM memories m "
    "JOIN unnest(%s::text[], %s::text[]) AS k(u, i) ON m.user_id = k.u AND m.id = k.i "
    f"{EACH_ACCESS} ORDER BY m.user_id, m.id FOR UPDATE OF m"
)


def filter_sql(flt: MemoryFilter) -> tuple[str, list[Any]]:
    """``AND …`` clauses over the alias ``m`` for every field of ``flt``, and their values."""
    clauses: list[str] = []
    params: list[Any] = []
    if flt.project is not None:
        clauses.append("m.project = %s")
        params.append(flt.project)
    if flt.memory_types is not None:
        clauses.append("m.memory_type = ANY(%s::text[])")
        params.append([t.value for t in flt.memory_types])
    if flt.kinds is not None:
        clauses.append("m.kind = ANY(%s::text[])")
        params.append([k.value for k in flt.kinds])
    if flt.session_id is not None:
        clauses.append("m.session_id = %s")
        params.append(flt.session_id)
    if flt.key is not None:
        clauses.append("m.key = %s")
        params.append(flt.key)
    if not flt.include_compressed:
        clauses.append("NOT m.compressed")
    if not flt.include_muted:
        clauses.append("NOT m.muted")
    if not flt.include_superseded:
        clauses.append("m.superseded_by IS NULL")
    if flt.min_importance is not None:
        clauses.append("m.importance >= %s")
        params.append(float(flt.min_importance))
    if flt.pinned is not None:
        clauses.append("m.pinned = %s")
        params.append(bool(flt.pinned))
    return "".join(f" AND {c}" for c in clauses), params


def listing_sql(
    user_id: str, flt: MemoryFilter, limit: int | None, offset: int
) -> tuple[str, list[Any]]:
    """Ids and row versions of the user's memories passing ``flt``, most recently updated
    first (ties: the larger id first, so pages are stable)."""
    where, params = filter_sql(flt)
    text = (
        f"SELECT m.id, {VERSION} FROM memories m {WITH_ACCESS} "
        f"WHERE m.user_id = %s{where} "
        "ORDER BY m.updated_at DESC, m.id DESC LIMIT %s OFFSET %s"
    )
    return text, [user_id, *params, limit, max(0, offset)]


def search_sql(
    user_id: str, query: Vector, k: int, flt: MemoryFilter, *, indexed: bool
) -> tuple[str, list[Any]]:
    """The vector search: the HNSW form orders by the index's own expression; the exact
    form by a plain distance the index cannot serve (so the planner reads the user's rows
    through a b-tree), with insertion order breaking ties."""
    where, params = filter_sql(flt)
    dim = query.shape[0]
    if indexed:
        distance = f"(m.embedding::vector({dim}) <=> %s::vector({dim}))"
        # literals: they prove the partial indexes' predicates (a graphed user's rows are
        # all graphed, so ``graphed`` leaves out none of them: graphed.py)
        dims = f"vector_dims(m.embedding) = {dim} AND m.graphed"
        order = "distance"
    else:
        distance = "(m.embedding <=> %s::vector)"
        dims = f"vector_dims(m.embedding) = {int(dim)}"
        order = "distance, m.seq"
    # the k nearest first, then their access counts: the join never sits between the
    # index scan and its LIMIT
    text = (
        f"SELECT {SELECT_COLUMNS}, m.distance FROM ("
        f"SELECT m.*, {distance} AS distance FROM memories m "
        f"WHERE m.user_id = %s AND m.embedding IS NOT NULL AND {dims}{where} "
        f"ORDER BY {order} LIMIT %s"
        f") m {EACH_ACCESS} ORDER BY m.distance, m.seq"
    )
    return text, [query, user_id, *params, k]


def best_rows_sql(
    user_id: str, best: dict[int, float], flt: MemoryFilter, k: int
) -> tuple[str, list[Any]]:
    """Full rows of the ``k`` best of BM25's matches that pass ``flt`` (``best``: seq →
    score), best first, ties by id, each followed by its seq: the filter, the order and
    the rows in one round trip. Each match's row is read once, through the ``(user_id,
    seq)`` index (its heap row is visited to check the filter either way), and only the
    ``k`` kept are joined to their access counts: finding the kept rows again by id, as
    this did until session 22, cost ~0.6 ms more of the server's CPU a search at 100,000
    memories (``docs/postgres.md``, "Session 22 … (h3)"). ``best`` holds ~2 × ``k`` seqs,
    so the top-``k`` sort keeps few wide rows (sorting every match's full row cost ~1.5 ms
    more, session 11)."""
    where, params = filter_sql(flt)
    text = (
        f"SELECT {SELECT_COLUMNS}, m.seq FROM (SELECT m.*, k.score "
        f"FROM unnest(%s::text::bigint[], %s::text::float8[]) AS k(seq, score) "
        f"JOIN memories m ON m.user_id = %s AND m.seq = k.seq "
        f"WHERE true{where} ORDER BY k.score DESC, m.id LIMIT %s) m {EACH_ACCESS} "
        f"ORDER BY m.score DESC, m.id"
    )
    seqs, scores = array_literal(map(int, best)), array_literal(map(float, best.values()))
    return text, [seqs, scores, user_id, *params, k]


def array_literal(values: Iterable[int | float]) -> str:
    """``values`` as one PostgreSQL array literal (``{1,2.5,…}``), for a ``%s::text::…[]``
    parameter: psycopg dumps a Python list element by element (~0.45 ms of client CPU for
    BM25's ~110 seqs and scores), a string at once (~0.01 ms). ``repr`` of a float is the
    shortest text that reads back as the same double, so scores compare and order in SQL
    exactly as in Python."""
    return "{" + ",".join(map(repr, values)) + "}"


def keys(part: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``(user_id, id)`` keys as the two arrays ``unnest(%s::text[], %s::text[])`` takes."""
    return [u for u, _ in part], [i for _, i in part]


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most :data:`CHUNK`."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "<unparsable PostgreSQL URL>"
    params.pop("password", None)
    return make_conninfo("", **params)
