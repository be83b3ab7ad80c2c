"""A large PostgreSQL user's held pool graph kept in a file between processes (issue 18,
session 21).

Each process that serves a large user builds its own graph (``held_graph.py``): ~55 s of
one core at 100,000 memories, before which that user's pool searches walk the database's
graph. Here a process that built (or brought up to date) a graph writes it to a file in a
cache directory, and the next process serving the user reads it (~0.1 s) and brings it up
to date instead of building one (:func:`~engrain.store.postgres.held_graph.restored`).

**Named for the table it indexes.** A file is named by the server's system identifier
(``pg_control_system()``), the database's oid and the ``memories`` table's oid (so two
schemas of one database, or a table dropped and made again, never share a file), and a
hash of the user id; its head repeats the three numbers and the user id in full, and holds
the revision the graph is current at, all under a CRC-32, followed by
:meth:`~engrain.store.ann.VectorIndex.dump`'s own framed copy (magic, length, CRC-32).

**Never trusted, only used.** A file that is torn, corrupt, of another table, user or
dimension, or written by another format is ignored (and replaced by the next build); one
that reads is still checked against the database in one snapshot before a search uses it
(``held_graph.restored``: every row the user has must be in the graph, a sample of them
with their vectors, the revision no newer than the user's), then caught up from its
revision through ``row_changes`` as a held graph is. And as for any held graph, only which
rows are looked at comes from it: the database scores the candidates and every row changed
since, filter applied.

**Processes.** A file is written whole to a temporary file in the same directory and moved
over the old one (``os.replace``): a reader sees the old copy or the new one, never a torn
one; with several writers the last one wins, and each copy is right for its revision.
A file is never changed in place, so a reader maps it and reads the graph in place
(session 22: :meth:`~engrain.store.ann.VectorIndex.viewed`): its pages are the file's,
shared by every process serving the user (~53 MB at 100,000 memories, against ~66 MB of
each process's own memory for a copy), and a file moved over keeps its old pages for the
processes that map them until they let go. A graph that must be patched (rows changed
since the file's revision) is copied in first (``VectorIndex.patch``), after its bytes are
checked against their CRC again. A file someone else writes or cuts short *in place* (a
``cp`` over it, an editor, a restore with ``rsync --inplace``) changes the pages a process
walks, and usearch trusts its neighbour lists: the process faulted (SIGSEGV, session 26's
``bench/attacks/derived_files.py``). So a view is read only while :func:`unchanged` (its
descriptor's length and modification time as when it was mapped, one ``fstat`` before each
read); once not, the graph is dropped, the call served by SQL and the file read again or a
graph built. A change landing *during* one walk (~1-2 ms) can still fault the process.
Only a regular file is opened (a pipe's open waited for a writer forever). The
directory is made readable by its owner only (the files hold the memories' vectors).
Failing to read or write a file is logged and costs a build, never a call.

Where (``ENGRAIN_PG_GRAPH_DIR``, or ``PostgresStore(graph_dir=…)``): unset,
``$XDG_CACHE_HOME/engrain/pg-graphs`` else ``~/.cache/engrain/pg-graphs``; ``off``: no
file (every process builds its own graph).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import stat
import struct
import time
import weakref
import zlib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psycopg

from engrain.store.ann import VectorIndex
from engrain.store.postgres.codec import Conn
from engrain.store.postgres.schema import INDEXED_DIM
from engrain.store.replace_file import replace_file

log = logging.getLogger(__name__)

_MAGIC = b"ENGPGGR1"
#: magic, system identifier, database oid, table oid, revision, the user id's length
_HEAD = struct.Struct("<8sQIIQH")
_CRC = struct.Struct("<I")
#: What names the table a file's graph indexes: the server, the database, ``memories``.
IDENTITY = (
    "SELECT (SELECT system_identifier FROM pg_control_system()), "
    "(SELECT oid FROM pg_database WHERE datname = current_database()), "
    "'memories'::regclass::oid"
)
#: A temporary file older than this is a writer's that died: removed by the next save.
STALE_SECONDS = 3_600.0
_SUFFIX = ".graph"


def graph_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where graphs are kept: ``ENGRAIN_PG_GRAPH_DIR`` (``off``, ``no``, ``false``,
    ``none``: nowhere), else ``$XDG_CACHE_HOME/engrain/pg-graphs``, else
    ``~/.cache/engrain/pg-graphs``; nowhere if that is not an absolute path (no home)."""
    env = os.environ if environ is None else environ
    raw = env.get("ENGRAIN_PG_GRAPH_DIR", "").strip()
    if raw.lower() in ("off", "no", "false", "none"):
        return None
    if raw:
        return Path(raw).expanduser()
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(cache):
        return None  # no home directory to keep them in (and a relative one is nobody's)
    return Path(cache) / "engrain" / "pg-graphs"


def unchanged(fd: int, mapped: os.stat_result) -> bool:
    """Whether the file open as ``fd`` is still as it was when mapped (``mapped``: its
    ``fstat`` then): same length, not written since. Every write in place moves its
    modification time (and cutting it short its length); a file moved over it is another
    file, which the descriptor does not follow."""
    try:
        now = os.fstat(fd)
    except OSError:
        return False
    return now.st_size == mapped.st_size and now.st_mtime_ns == mapped.st_mtime_ns


@dataclass(frozen=True)
class Kept:
    """A graph read from a file: the user's rows as of ``revision`` (to be checked)."""

    revision: int
    index: VectorIndex


@dataclass(frozen=True)
class GraphFiles:
    """The graph files of one ``memories`` table (``identity``: system identifier,
    database oid, table oid) in ``directory``."""

    directory: Path
    identity: tuple[int, int, int]

    @classmethod
    def of(cls, conn: Conn, directory: Path) -> GraphFiles | None:
        """The files of the table ``conn`` reads; ``None`` if its identity cannot be read
        (a role that may not call ``pg_control_system()``: no file is trusted without it)."""
        try:
            with conn.cursor() as cur:
                row = cur.execute(IDENTITY).fetchone()
        except psycopg.Error as exc:
            log.info("no pool graph files: the database's identity is unreadable (%s)", exc)
            return None
        if row is None or any(value is None for value in row):
            return None
        return cls(directory, (int(row[0]), int(row[1]), int(row[2])))

    def path(self, user_id: str) -> Path:
        """The file of ``user_id``'s graph."""
        user = hashlib.blake2b(user_id.encode(), digest_size=12).hexdigest()
        system, database, table = self.identity
        return self.directory / f"{system}-{database}-{table}-{user}{_SUFFIX}"

    def read(self, user_id: str) -> Kept | None:
        """The user's graph as last saved, if its file is whole and this table's and user's
        (``None`` otherwise: the caller builds one)."""
        try:
            # never a pipe or a device (opening a pipe would wait for a writer forever)
            fd = os.open(self.path(user_id), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("pool graph file unreadable (%s): building one", exc)
            return None
        try:
            mapped = os.fstat(fd)  # before the map and the CRC: a change after is seen
            if not stat.S_ISREG(mapped.st_mode):
                log.warning("pool graph file %s is not a regular file: building one",
                            self.path(user_id).name)  # fmt: skip
                os.close(fd)
                return None
            data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:  # ValueError: an empty file (nothing to map)
            os.close(fd)
            log.warning("pool graph file unreadable (%s): building one", exc)
            return None
        head = self._head(data, user_id)
        if head is None:
            os.close(fd)
            log.warning("pool graph file %s is not this table's or is damaged: building one",
                        self.path(user_id).name)  # fmt: skip
            return None
        revision, start = head
        # read in place: the file's pages, shared by the processes serving the user; read
        # only while the file is as it was mapped (``unchanged``), its descriptor kept
        index = VectorIndex.viewed(
            memoryview(data)[start:], INDEXED_DIM, lambda: unchanged(fd, mapped)
        )
        if index is None:
            os.close(fd)
            return None  # torn, damaged, another dimension, or not an int8 graph
        weakref.finalize(index, os.close, fd)
        return Kept(revision, index)

    def _head(self, data: bytes | mmap.mmap, user_id: str) -> tuple[int, int] | None:
        """The revision a file's head names and where its index starts, if the head is
        whole and names this table and user."""
        if len(data) < _HEAD.size:
            return None
        magic, system, database, table, revision, length = _HEAD.unpack_from(data)
        end = _HEAD.size + length
        if magic != _MAGIC or len(data) < end + _CRC.size:
            return None
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(memoryview(data)[:end]):
            return None
        if (system, database, table) != self.identity or data[_HEAD.size : end] != user_id.encode():
            return None
        return revision, end + _CRC.size

    def write(self, user_id: str, revision: int, index: VectorIndex) -> tuple[int, int] | None:
        """Keep ``index`` (the user's rows as of ``revision``) for the next process: written
        whole beside the old file, then moved over it. The copy written (its CRC-32 and
        length, as ``VectorIndex.saved`` names one); ``None``: a failure, logged, never
        raised."""
        user = user_id.encode()
        head = _HEAD.pack(_MAGIC, *self.identity, revision, len(user)) + user
        target = self.path(user_id)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._sweep(target)

            def whole(out: BinaryIO) -> tuple[int, int]:
                out.write(head)
                out.write(_CRC.pack(zlib.crc32(head)))
                return index.write_to(out)

            copy = replace_file(target, whole)
        except OSError as exc:
            log.warning("pool graph file not written (%s): the next process builds one", exc)
            return None
        return copy

    def _sweep(self, target: Path) -> None:
        """Remove temporary copies of ``target`` left by writers that died."""
        now = time.time()
        for stale in self.directory.glob(f"{target.name}*.tmp"):
            with suppress(OSError):  # another process removed it first
                if now - stale.stat().st_mtime > STALE_SECONDS:
                    stale.unlink()
