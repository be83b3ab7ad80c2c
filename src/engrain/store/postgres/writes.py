"""The write transactions of the PostgreSQL store: :func:`write_body` (upserts, patches,
deletes and state in one transaction) and :func:`access_body` (access counting).

Everything a write needs from the items it is given (rows, tokens, JSON) is computed before
the transaction opens, so a bad item changes nothing; what depends on the rows as they are
(a patch's current row) is read inside it, under the row lock. Locks are always taken in
the same order — the users' revision rows sorted, then the memory rows sorted by
``(user_id, id)`` — so concurrent writes queue instead of deadlocking.

The store runs these bodies in pipeline mode (``PostgresStore._transaction``): a statement
whose result the body does not read is only queued, so a write of new memories waits for
the server twice — for its row locks, and at the commit — and a statement the server
refuses aborts the whole transaction as before. Postings are sent as arrays in one
``INSERT … SELECT FROM unnest(…)`` per :data:`~engrain.store.postgres.sql.CHUNK` rows
(``COPY`` cannot run inside a pipeline).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engrain.errors import ValidationError
from engrain.model import Memory
from engrain.store.base import LAZY_NAMESPACES, KeyClaim, Patch, State, counted, lazy_commit
from engrain.store.lexical import tokenize
from engrain.store.postgres import bm25, graphed, postings
from engrain.store.postgres.bm25 import Changes
from engrain.store.postgres.codec import Conn, from_row, to_row, utc
from engrain.store.postgres.deferred import Uses
from engrain.store.postgres.postings import BlockFormat
from engrain.store.postgres.sql import LOCK_FULL_ROWS, UPSERT, chunks, filter_sql, keys

Key = tuple[str, str]
#: A memory's row, its term counts and its token count.
Prepared = tuple[tuple[Any, ...], Counter[str], int]


def prepare(memory: Memory) -> Prepared:
    """The row, term counts and length of ``memory``; :class:`ValidationError` if a field
    does not have its type (a patch's value, say)."""
    try:
        counts = Counter(tokenize(memory.content))
        length = sum(counts.values())
        return to_row(memory, length), counts, length
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"memory {memory.id} has a field of the wrong type: {exc}") from exc


def write_body(
    upserts: Sequence[Memory],
    deletes: Sequence[Memory],
    state: Sequence[State],
    patches: Sequence[Patch],
    claims: Sequence[KeyClaim] = (),
    graph_from: int = 0,
) -> Callable[[Conn], None]:
    """The transaction of :meth:`Store.write`, prepared: a function of an open
    transaction's connection, safe to run again after a rollback. A user this write takes
    to ``graph_from`` memories or more has its rows put in the HNSW graphs
    (``graphed.py``; the store passes its ``exact_search_below``; 0: every user's)."""
    staged: dict[Key, Memory] = {(m.user_id, m.id): counted(m) for m in upserts}  # last wins
    prepared = {key: prepare(memory) for key, memory in staged.items()}
    removed = {(m.user_id, m.id) for m in deletes}
    plain = [s for s in state if s.change is None]
    latest = {(s.user_id, s.namespace, s.key): s.encoded() for s in plain}  # last wins
    # sorted, like every set of rows a write locks: concurrent writes never deadlock
    documents = [(*where, latest[where]) for where in sorted(latest)]
    changes = sorted((s for s in state if s.change is not None),
                     key=lambda s: (s.user_id, s.namespace, s.key))  # fmt: skip
    live_patches = [p for p in patches if p.where not in removed]  # a delete here wins
    to_read = sorted({p.where for p in live_patches} - staged.keys())
    changed = sorted({u for u, _ in staged} | {u for u, _ in removed}
                     | {p.user_id for p in live_patches} | {c.user_id for c in claims})  # fmt: skip
    touched = sorted(staged.keys() | removed | set(to_read))
    now = datetime.now(UTC)
    lazy = lazy_commit(upserts, deletes, state, patches)

    def body(db: Conn) -> None:
        with db.cursor(binary=True) as cur:
            if lazy:  # context records, promotions: no wait for the WAL flush (lazy_commit)
                cur.execute("SET LOCAL synchronous_commit = off")
            # 1. Queue behind other writers of these users (sorted: no deadlock).
            cur.executemany(
                "INSERT INTO revisions (user_id, revision, graphed) VALUES (%s, 1, %s) "
                "ON CONFLICT (user_id) DO UPDATE SET revision = revisions.revision + 1",
                [(u, graph_from <= 0) for u in changed],
            )
            # 1b. The claims, checked once we hold the user's revision row: every writer of
            #     the user queues on it, and READ COMMITTED reads their last commit.
            _check_claims(cur, claims)
            # 2. Lock the rows this write replaces, patches or deletes, in key order; a row
            #    deleted by a concurrent forget is gone once we get its lock.
            old: dict[Key, tuple[str, int, int]] = {}
            for part in chunks(touched):
                cur.execute(
                    "SELECT m.user_id, m.id, m.content, m.doc_length, m.seq FROM memories m "
                    "JOIN unnest(%s::text[], %s::text[]) AS k(u, i) "
                    "ON m.user_id = k.u AND m.id = k.i "
                    "ORDER BY m.user_id, m.id FOR UPDATE OF m",
                    keys(part),
                )
                old.update({(u, i): (c, n, s) for u, i, c, n, s in cur.fetchall()})
            # 3. Patches, on the rows as they are now (we hold their locks) or as this
            #    write's upserts leave them; rows that do not exist are skipped.
            current: dict[Key, Memory] = dict(staged)
            for part in chunks([k for k in to_read if k in old]):
                cur.execute(LOCK_FULL_ROWS, keys(part))
                current.update(((m.user_id, m.id), m) for m in map(from_row, cur.fetchall()))
            rows = dict(prepared)
            for patch in live_patches:
                if (memory := current.get(patch.where)) is not None:
                    current[patch.where] = counted(patch.apply(memory))
                    rows[patch.where] = prepare(current[patch.where])
            written = {k: current[k] for k in rows}
            _replace(cur, rows, written, removed, old, graph_from)
            if changed:  # users this write takes past the threshold enter the graphs
                cur.execute(graphed.FLIP, (changed, graph_from))
            # 4. Stamp the rows this write changed with its revision (working sets read
            #    them as a delta); after the rows, so ``gone`` is what the write left.
            _stamp_changes(cur, sorted(rows.keys() | removed))
            _write_state(cur, [*documents, *_resolved(cur, changes)], now)

    return body


def _check_claims(cur: Any, claims: Sequence[KeyClaim]) -> None:
    """Check each claim against the live rows under its key (index ``memories_user_key``);
    :class:`KeyChangedError` rolls the transaction back."""
    for claim in claims:
        clauses, params = filter_sql(claim.filter)
        if claim.by_id:
            clauses, params = f" AND m.id = %s{clauses}", [claim.found, *params]
        cur.execute(f"SELECT m.id FROM memories m WHERE m.user_id = %s{clauses}",
                    [claim.user_id, *params])  # fmt: skip
        claim.check(row[0] for row in cur.fetchall())


#: Writers of one state document by a ``change`` queue on this transaction-scoped lock
#: (taken last, in key order, by no one else: no deadlock), then read it as it is.
LOCK_DOCUMENT = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
READ_DOCUMENT = "SELECT value FROM state WHERE user_id = %s AND namespace = %s AND key = %s"


def _resolved(cur: Any, changes: Sequence[State]) -> Documents:
    """Each ``change`` document resolved against the document as it is once this
    transaction holds its lock (READ COMMITTED: the read sees every commit before it)."""
    documents = []
    for change in changes:
        where = (change.user_id, change.namespace, change.key)
        cur.execute(LOCK_DOCUMENT, (json.dumps(where),))
        cur.execute(READ_DOCUMENT, where)
        found = cur.fetchall()
        doc = change.resolved(dict(found[0][0]) if found else None)
        documents.append((doc.user_id, doc.namespace, doc.key, doc.encoded()))
    return documents


#: The rows a write changed, each stamped with its user's revision as the write leaves it
#: (the write holds the revision row: the value it bumped) and whether it is gone now.
STAMP_CHANGES = (
    "INSERT INTO row_changes (user_id, id, revision, gone) "
    "SELECT k.u, k.i, r.revision, m.id IS NULL "
    "FROM unnest(%s::text[], %s::text[]) AS k(u, i) "
    "JOIN revisions r ON r.user_id = k.u "
    "LEFT JOIN memories m ON m.user_id = k.u AND m.id = k.i "
    "ORDER BY k.u, k.i "
    "ON CONFLICT (user_id, id) DO UPDATE SET revision = EXCLUDED.revision, gone = EXCLUDED.gone"
)


def _stamp_changes(cur: Any, changed: Sequence[Key]) -> None:
    """Record in ``row_changes`` that these rows (sorted: locks in key order) changed at
    this write's revision (migration 008; no result read)."""
    for part in chunks(changed):
        cur.execute(STAMP_CHANGES, keys(part))


#: Put one state document (its value JSON text), and delete one.
PUT_STATE = (
    "INSERT INTO state (user_id, namespace, key, value, updated_at) "
    "VALUES (%s, %s, %s, %s::json, %s) ON CONFLICT (user_id, namespace, key) "
    "DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
)
DELETE_STATE = "DELETE FROM state WHERE user_id = %s AND namespace = %s AND key = %s"
#: Documents as ``(user_id, namespace, key, JSON text or None)``, sorted.
Documents = Sequence[tuple[str, str, str, str | None]]


def _write_state(cur: Any, documents: Documents, now: datetime) -> None:
    """Put the documents with a value and delete those without (no result read)."""
    cur.executemany(PUT_STATE, [(u, ns, k, v, now) for u, ns, k, v in documents if v is not None])
    cur.executemany(DELETE_STATE, [(u, ns, k) for u, ns, k, v in documents if v is None])


def _replace(
    cur: Any,
    rows: dict[Key, Prepared],
    written: dict[Key, Memory],
    removed: set[Key],
    old: dict[Key, tuple[str, int, int]],
    graph_from: int,
) -> None:
    """Write ``rows`` and delete ``removed`` (whose existing rows, ``old``: content, length
    and seq, are locked), keeping posting blocks, access rows and each user's document
    statistics in step; a row is graphed if its user is, or will be once this write's
    memories count (``graph_from``: the threshold; ``graphed.py``)."""
    for key in removed:
        rows.pop(key, None)  # upserted then deleted in the same write: deleted
    stale = [k for k in old if k in removed or (k in rows and old[k][0] != rows[k][0][3])]
    fresh = [k for k in rows if k not in old or k in stale]
    delta: Counter[tuple[str, str]] = Counter()
    for key in stale:
        delta[(key[0], "documents")] -= 1
        delta[(key[0], "total_length")] -= old[key][1]
    for key in fresh:
        delta[(key[0], "documents")] += 1
        delta[(key[0], "total_length")] += rows[key][2]
    for part in chunks(sorted(removed)):
        cur.execute(
            "DELETE FROM memories m USING unnest(%s::text[], %s::text[]) AS k(u, i) "
            "WHERE m.user_id = k.u AND m.id = k.i",
            keys(part),
        )
    if rows:
        cur.executemany(
            UPSERT,
            [(*rows[k][0], delta[(k[0], "documents")], graph_from, k[0]) for k in sorted(rows)],
        )
    # access counts are replaced with the memory (we hold its row lock)
    for part in chunks(sorted(old)):
        cur.execute(
            "DELETE FROM access a USING unnest(%s::text[], %s::text[]) AS k(u, i) "
            "WHERE a.user_id = k.u AND a.id = k.i",
            keys(part),
        )
    accesses = [
        (u, i, int(m.access_count), utc(m.last_accessed_at))
        for (u, i), m in sorted(written.items())
        if (u, i) in rows and (m.access_count or m.last_accessed_at is not None)
    ]
    cur.executemany(
        "INSERT INTO access (user_id, id, access_count, last_accessed_at) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, id) DO UPDATE SET "
        "access_count = EXCLUDED.access_count, "
        "last_accessed_at = EXCLUDED.last_accessed_at",
        accesses,
    )
    df = _write_postings(cur, rows, old, stale, fresh)
    _count_terms(cur, df)
    users = sorted({u for u, _ in delta})
    cur.executemany(
        "UPDATE revisions SET documents = documents + %s, "
        "total_length = total_length + %s WHERE user_id = %s",
        [
            (delta[(u, "documents")], delta[(u, "total_length")], u)
            for u in users
            if delta[(u, "documents")] or delta[(u, "total_length")]
        ],
    )


def _write_postings(
    cur: Any,
    rows: dict[Key, Prepared],
    old: dict[Key, tuple[str, int, int]],
    stale: Sequence[Key],
    fresh: Sequence[Key],
) -> Counter[Key]:
    """Take the postings of ``stale`` memories (their content as ``old`` holds it) out of
    their blocks and put those of ``fresh`` ones (``rows``; written already, so each has
    its seq) in, rewriting each block touched once; the change of each term's document
    frequency, by ``(user_id, term)`` (0 included: the term's postings changed)."""
    df: Counter[Key] = Counter()
    changes: Changes = defaultdict(dict)
    for user_id, memory_id in sorted(stale):
        content, _, seq = old[(user_id, memory_id)]
        for term in Counter(tokenize(content)):
            changes[(user_id, term)][seq] = None
            df[(user_id, term)] -= 1
    seqs = {key: old[key][2] for key in fresh if key in old}  # an upsert keeps the seq
    for part in chunks(sorted(k for k in fresh if k not in old)):
        cur.execute(
            "SELECT m.user_id, m.id, m.seq FROM memories m "
            "JOIN unnest(%s::text[], %s::text[]) AS k(u, i) ON m.user_id = k.u AND m.id = k.i",
            keys(part),
        )
        seqs.update({(u, i): int(s) for u, i, s in cur.fetchall()})
    for key in sorted(fresh):
        _, counts, length = rows[key]
        for term, tf in counts.items():
            changes[(key[0], term)][seqs[key]] = (tf, length)
            df[(key[0], term)] += 1
    # new memories' postings follow every posting of their terms: appended to the last
    # block in SQL where it has room; the rest (edits, deletes, full or missing blocks)
    # read and rewrite their blocks
    fresh_seqs = {seqs[k] for k in fresh if k not in old}
    fmt = postings.current()
    appendable = sorted(
        key
        for key, change in changes.items()
        if all(value is not None and seq in fresh_seqs for seq, value in change.items())
        and bm25.appendable(change, fmt)
    )
    appended: set[Key] = set()
    for part in chunks(appendable):
        # every key's postings in seq order, one after the other, encoded at once
        columns = bm25.added_postings(changes, part)
        blob, ends = fmt.pack(columns[:, 0], columns[:, 1], columns[:, 2])
        stops = np.cumsum([len(changes[key]) for key in part])
        offsets = [0, *(int(ends[i - 1]) for i in stops[:-1])]
        sizes = [int(ends[i - 1]) - o for i, o in zip(stops, offsets, strict=True)]
        cur.execute(
            bm25.append_sql(fmt),
            (blob, [u for u, _ in part], [t for _, t in part], offsets, sizes,
             [min(changes[key]) for key in part]),
        )  # fmt: skip
        appended.update((u, t) for u, t in cur.fetchall())
    rewrite_blocks(cur, {key: change for key, change in changes.items() if key not in appended})
    return df


def rewrite_blocks(cur: Any, changes: Changes, fmt: BlockFormat | None = None) -> None:
    """Apply ``changes`` to the posting blocks (of ``fmt``, this tree's by default): each
    block a change falls in is read, rewritten once and split past
    :data:`~engrain.store.postgres.bm25.BLOCK` postings (a term without a block gets its
    first); a removal of a posting that is not there changes nothing. Document frequencies
    are the caller's."""
    fmt = fmt or postings.current()
    points = [(u, t, seq) for (u, t), change in sorted(changes.items()) for seq in change]
    blocks: list[Any] = []
    for points_part in chunks(points):
        cur.execute(bm25.blocks_of_sql(fmt), tuple(list(c) for c in zip(*points_part, strict=True)))
        blocks.extend(cur.fetchall())
    dropped, written = bm25.changed_blocks(changes, blocks, fmt)
    for dropped_part in chunks(sorted(dropped)):
        cur.execute(
            bm25.delete_blocks_sql(fmt), tuple(list(c) for c in zip(*dropped_part, strict=True))
        )
    for written_part in chunks(written):
        blob, offsets, sizes = bm25.packed([data for *_, data in written_part])
        cur.execute(
            bm25.insert_blocks_sql(fmt),
            (blob, [w[0] for w in written_part], [w[1] for w in written_part],
             [w[2] for w in written_part], offsets, sizes),
        )  # fmt: skip


def _count_terms(cur: Any, df: Counter[Key]) -> None:
    """Add ``df`` (``(user_id, term)`` → change, 0 included) to the users' document
    frequencies and give each of these terms a new stamp, in key order (the writers of one
    user already queue on its revision row); a term no document holds any more loses its
    row."""
    changes = sorted(df.items())  # a term whose postings changed gets a new stamp
    for part in chunks(changes):
        users, terms, deltas = (
            [u for (u, _), _ in part],
            [t for (_, t), _ in part],
            [n for _, n in part],
        )
        cur.execute(
            "INSERT INTO term_stats (user_id, term, df) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) ORDER BY 1, 2 "
            "ON CONFLICT (user_id, term) DO UPDATE SET df = term_stats.df + EXCLUDED.df, "
            "stamp = EXCLUDED.stamp",
            (users, terms, deltas),
        )
        if any(n < 0 for n in deltas):
            cur.execute(
                "DELETE FROM term_stats s USING unnest(%s::text[], %s::text[]) AS k(u, t) "
                "WHERE s.user_id = k.u AND s.term = k.t AND s.df <= 0",
                (users, terms),
            )


#: The whole of an access count, one statement (so the write is one round trip: BEGIN,
#: this and COMMIT travel together in a pipeline). Locks in the order every writer takes
#: them: the memories first, in id order, with a shared lock (they must exist and stay
#: while we count; ``count(*)`` reads them all before the clock is touched), then the
#: user's access clock, held until commit (counts of one user commit in clock order, so a
#: reader that saw clock c has seen every count stamped ≤ c), then the access rows in id
#: order. A memory that does not exist is not counted, and no id existing changes nothing.
ACCESS_COUNT = (
    "WITH present AS MATERIALIZED ("
    "SELECT m.id FROM memories m WHERE m.user_id = %(user)s "
    "AND m.id = ANY(%(ids)s::text[]) ORDER BY m.id FOR KEY SHARE), "
    "c AS (INSERT INTO access_clocks (user_id, clock) "
    "SELECT %(user)s, 1 WHERE (SELECT count(*) FROM present) > 0 "
    "ON CONFLICT (user_id) DO UPDATE SET clock = access_clocks.clock + 1 "
    "RETURNING clock) "
    "INSERT INTO access (user_id, id, access_count, last_accessed_at, clock) "
    "SELECT %(user)s, x.id, x.n, %(at)s, c.clock "
    "FROM unnest(%(ids)s::text[], %(counts)s::bigint[]) AS x(id, n) "
    "JOIN present p ON p.id = x.id CROSS JOIN c "
    "ORDER BY x.id ON CONFLICT (user_id, id) DO UPDATE SET "
    "access_count = access.access_count + EXCLUDED.access_count, "
    "last_accessed_at = EXCLUDED.last_accessed_at, clock = EXCLUDED.clock"
)


def access_body(user_id: str, ids: Sequence[str], at: datetime) -> Callable[[Conn], None]:
    """The transaction of :meth:`Store.record_access`: an atomic increment per id (once per
    occurrence) of memories that exist; a deleted one is not brought back
    (:data:`ACCESS_COUNT`: one statement, no result read, so one round trip)."""
    times = Counter(ids)
    wanted = sorted(times)
    params = {"user": user_id, "ids": wanted, "counts": [times[i] for i in wanted], "at": utc(at)}

    def body(db: Conn) -> None:
        with db.cursor(binary=True) as cur:
            # Every context() counts its accesses: do not wait for the WAL flush. A crash
            # can lose the last fraction of a second of counts, never a memory.
            cur.execute("SET LOCAL synchronous_commit = off")
            cur.execute(ACCESS_COUNT, params)

    return body


def uses_body(
    user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State]
) -> Callable[[Conn], None]:
    """The transaction of :meth:`Store.record_uses`: :func:`access_body`'s count and the
    ``state`` documents together, no result read (one round trip in a pipeline). The
    count goes first, so locks are taken in the writers' order (memories, then state
    rows). The commit skips the WAL flush when every document is of
    :data:`LAZY_NAMESPACES` (a ``context()``'s record), as each would alone; any other
    document waits for it. Documents are encoded here: a bad one raises before the
    transaction opens."""
    latest = {(s.user_id, s.namespace, s.key): s.encoded() for s in state}  # last wins
    documents = [(*where, latest[where]) for where in sorted(latest)]
    lazy = all(s.namespace in LAZY_NAMESPACES for s in state)
    times = Counter(ids)
    wanted = sorted(times)
    params = {"user": user_id, "ids": wanted, "counts": [times[i] for i in wanted], "at": utc(at)}
    now = datetime.now(UTC)

    def body(db: Conn) -> None:
        with db.cursor(binary=True) as cur:
            if lazy:
                cur.execute("SET LOCAL synchronous_commit = off")
            if wanted:
                cur.execute(ACCESS_COUNT, params)
            _write_state(cur, documents, now)

    return body


def deferred_body(batch: Sequence[Uses]) -> Callable[[Conn], None]:
    """The transaction of the counts handed over by calls that returned (``deferred.py``):
    :data:`ACCESS_COUNT` once per call, each as :func:`access_body` sends it, in the order
    the calls handed them over, the users sorted (two batches never take two users' access
    clocks in opposite orders); no result read (one round trip), no WAL flush waited for."""
    ordered = sorted(batch, key=lambda uses: uses.user_id)  # stable: each user's calls in order
    statements = []
    for uses in ordered:
        wanted = sorted(uses.counts)
        statements.append(
            {
                "user": uses.user_id,
                "ids": wanted,
                "counts": [uses.counts[i] for i in wanted],
                "at": utc(uses.at),
            }
        )

    def body(db: Conn) -> None:
        with db.cursor(binary=True) as cur:
            cur.execute("SET LOCAL synchronous_commit = off")
            for params in statements:
                cur.execute(ACCESS_COUNT, params)

    return body
