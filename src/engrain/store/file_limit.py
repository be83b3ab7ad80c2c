"""Naming a process's file-size limit when SQLite's "disk I/O error" is it (session 26).

A process may be limited in how large a file it writes (``RLIMIT_FSIZE``: ``ulimit -f``,
systemd's ``LimitFSIZE=``, a container's or a batch scheduler's setting). A write past the
limit fails with ``EFBIG`` (Python ignores ``SIGXFSZ`` from its start, so the process is
not killed), which SQLite reports as a bare "disk I/O error": the user is told the disk
failed when the cause is a setting of their own process, with nothing to tell them which.

:func:`limit_reached` names it when it is the cause: the process has a finite limit and one
of the store's files (the database, its ``-wal``, its ``-journal``) has grown to within one
write of it. A write that would cross the limit is cut at it by the kernel, and SQLite
writes again the rest, which then fails: so the file that met the limit is left at it, or
short of it by less than one of SQLite's writes (a page of at most 64 KiB, with a log
frame's header). Any other I/O error leaves the files far from a limit, or there is none,
and its message is left as the driver gave it.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

try:
    import resource
except ImportError:  # pragma: no cover - Windows has no resource limits of this kind
    resource = None  # type: ignore[assignment]

#: The most one of SQLite's writes adds to a file: its largest page and a log frame's
#: header (a file within this of the limit may have been stopped by it).
ONE_WRITE = 65_536 + 24
#: The store's files a write may grow, by their suffix after the database's name.
SUFFIXES = ("", "-wal", "-journal")


def file_size_limit() -> int | None:
    """This process's soft limit on the size of a file it writes, in bytes (``None``: no
    limit, or none this platform has)."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def limit_reached(path: Path) -> str | None:
    """What to tell the user when a write to the SQLite store at ``path`` failed with an
    I/O error because a file of the store reached this process's file-size limit; ``None``
    when there is no limit or no file of the store near it."""
    limit = file_size_limit()
    if limit is None:
        return None
    sizes: dict[Path, int] = {}
    for suffix in SUFFIXES:
        name = Path(f"{path}{suffix}")
        with suppress(OSError):  # no such file: nothing it could have met
            sizes[name] = os.stat(name).st_size
    if not sizes:
        return None
    name = max(sizes, key=lambda p: sizes[p])  # the one nearest the limit met it
    if sizes[name] < limit - ONE_WRITE:
        return None
    return (
        f"{name.name} has reached this process's file-size limit of {limit:,} bytes "
        "(RLIMIT_FSIZE, `ulimit -f`): raise or lift the limit for the process that opens "
        "the store; the disk itself may be fine"
    )
