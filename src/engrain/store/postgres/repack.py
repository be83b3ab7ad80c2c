"""Migration 014: every posting block repacked at 7 bytes a posting (``postings.PACKED``).

Before it a posting was 14 bytes, 8 of them its seq (``postings.LEGACY_RECORD``): at
1,000,000 memories more than half of the BM25 statement's server CPU was sending the
blocks, and the client as long receiving them (docs/postgres.md, "Session 26: BM25 with
dynamic pruning"). Packed, a posting keeps the low 32 bits of its seq (the block's
``first_seq`` holds the high ones), its tf in one byte and its memory's length in two,
escaped where they do not fit (``postings.py``): half the bytes, the same postings, so
the same BM25 scores bit for bit.

**What it does.** It creates ``packed_blocks`` (the columns of ``posting_blocks``), reads
every legacy block with a server-side cursor (:data:`BATCH` at a time), converts them in
numpy and copies them in (``COPY``), adds the primary key, drops ``posting_blocks`` and
puts in its place a view of that name whose ``data`` column and writes raise
:data:`UPGRADE` (:data:`GUARD`).

**Safe to interrupt, one migrator at a time.** Like every migration it runs in one
transaction under the migrator's advisory lock: a second process opening the database
meanwhile waits at the lock and then finds 014 applied; a migrator killed at any point
(``kill -9``, a lost connection) commits nothing, so the database is as it was (legacy
blocks, 013) and the next ``engrain migrate`` or open runs it again from the start. It
first takes ``revisions`` in ``EXCLUSIVE`` mode: a writer's transaction starts by bumping
its users' revision rows (``writes.write_body``), so writers wait there, holding nothing,
until the commit; readers go on reading the legacy blocks until the drop, then wait for the
commit (measured at load ~15: 3.4–3.8 s at 100,000 memories, 49 s at 1,000,000;
docs/postgres.md, "Session 27: fewer bytes a posting").

**Older processes get an error, never a wrong answer.** A tree before 014 refuses to open
the database (``store.base.pending_migrations``: "written by a newer engrain"). A process
of such a tree that was already running reads and writes ``posting_blocks``: the view makes
each of its BM25 reads (with a matching term) and each of its posting writes fail with
:data:`UPGRADE` (a ``StoreError``; the write rolled back whole), rather than misread packed
bytes as legacy ones.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from engrain.store.postgres import bm25, postings
from engrain.store.postgres.codec import Conn

#: The migration's name.
MIGRATION: Final = "014_packed_postings"
#: Legacy blocks read per round trip of the cursor.
BATCH: Final = 5_000
#: What a process of a tree before 014 gets from ``posting_blocks`` once it has run.
UPGRADE: Final = (
    "the BM25 postings of this database were repacked by migration 014 (table packed_blocks): "
    "this process runs an older engrain; upgrade it and restart"
)
#: The function and view that stand where ``posting_blocks`` was.
GUARD: Final = f"""
CREATE FUNCTION engrain_postings_moved() RETURNS bytea LANGUAGE plpgsql VOLATILE AS $$
BEGIN RAISE EXCEPTION '{UPGRADE}'; END $$;
CREATE FUNCTION engrain_postings_moved_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '{UPGRADE}'; END $$;
CREATE VIEW posting_blocks AS
    SELECT user_id, term, first_seq, engrain_postings_moved() AS data FROM packed_blocks;
CREATE TRIGGER posting_blocks_moved INSTEAD OF INSERT OR UPDATE OR DELETE ON posting_blocks
    FOR EACH ROW EXECUTE FUNCTION engrain_postings_moved_write()"""


def migrate(db: Conn) -> None:
    """Migration 014, in the migrator's transaction: repack every posting block."""
    db.execute("LOCK TABLE revisions IN EXCLUSIVE MODE")
    db.execute(
        """CREATE TABLE packed_blocks (
            user_id text COLLATE "C" NOT NULL,
            term text COLLATE "C" NOT NULL,
            first_seq bigint NOT NULL,
            data bytea NOT NULL
        ) WITH (fillfactor = 50)"""
    )
    # as posting_blocks: in the row, uncompressed, room on the page for a rewrite (HOT)
    db.execute("ALTER TABLE packed_blocks ALTER COLUMN data SET STORAGE PLAIN")
    with db.cursor(name="repack") as blocks, db.cursor() as out:
        blocks.itersize = BATCH
        blocks.execute("SELECT user_id, term, first_seq, data FROM posting_blocks")
        while batch := blocks.fetchmany(BATCH):
            with out.copy(
                "COPY packed_blocks (user_id, term, first_seq, data) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "int8", "bytea"])
                for row in repacked(batch):
                    copy.write_row(row)
    db.execute("ALTER TABLE packed_blocks ADD PRIMARY KEY (user_id, term, first_seq)")
    db.execute("ANALYZE packed_blocks")
    # last: readers of the legacy blocks wait from here to the commit only
    db.execute("DROP TABLE posting_blocks")
    db.execute(GUARD)


def repacked(
    blocks: list[tuple[str, str, int, bytes]],
) -> list[tuple[str, str, int, bytes]]:
    """Legacy blocks ``(user_id, term, first_seq, data)`` as packed ones, the same postings
    in the same blocks (one cut in two where it spans a multiple of 2**32 seqs), converted
    all at once."""
    datas = [bytes(data) for *_, data in blocks]
    found = postings.legacy_unpack([], datas)
    blob, ends = postings.pack(found.seqs, found.tfs, found.lengths)
    counts = np.cumsum([len(d) // postings.LEGACY_RECORD.itemsize for d in datas]).tolist()
    out: list[tuple[str, str, int, bytes]] = []
    start = 0
    for (user_id, term, _, _), stop in zip(blocks, counts, strict=True):
        seqs = found.seqs[start:stop]
        if not len(seqs):
            continue
        if int(seqs[0]) >> postings.EPOCH_BITS == int(seqs[-1]) >> postings.EPOCH_BITS:
            low = int(ends[start - 1]) if start else 0
            out.append((user_id, term, int(seqs[0]), blob[low : int(ends[stop - 1])]))
        else:  # the records of a block across epochs hold no base: packed again, cut
            for a, b in postings.bounds(seqs, bm25.BLOCK, postings.PACKED):
                data, _ = postings.pack(seqs[a:b], found.tfs[start + a : start + b],
                                        found.lengths[start + a : start + b])  # fmt: skip
                out.append((user_id, term, int(seqs[a]), data))
        start = stop
    return out
