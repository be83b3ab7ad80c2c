"""A file the CLI writes for the user (``engrain export FILE``): whole or not at all.

The records go to a temporary file beside ``FILE`` that replaces it only once every record
is written and flushed, so a disk that fills up, a store that fails mid-export or a ^C
never leaves a truncated export where the user asked for one (a truncated JSONL file
would import as fewer memories, silently), nor destroys an earlier export of that name.
Any failure removes the temporary file.

A process killed mid-export (SIGKILL, a power cut) runs no handler and leaves its temporary
file (``.FILE.XXXXXXXX.part``). The next export of ``FILE`` removes those whose writer is
gone: a writer holds an exclusive ``flock`` on its temporary file from its creation to its
rename, the kernel releases it when the process dies, so a temporary file whose lock can be
taken belongs to nobody. A writer checks, once it holds its lock, that its name still
names its file (a cleaner may have taken the lock between the creation and the lock, and
removed it) and makes another if not, so no export ever loses the file it writes.

What the failure is: a path the user can fix (no such directory, a directory, no
permission) is a usage error (exit 2, as before); the machine refusing the bytes (a full
disk or quota, an I/O error, a read-only mount, a file-size limit) is an
:class:`~engrain.errors.EngrainError` (exit 3), like a store failure.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import click

from engrain.errors import EngrainError

#: errno values that say the machine, not the path, refused the write.
MACHINE = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG}


@contextlib.contextmanager
def written(target: str) -> Iterator[IO[str]]:
    """A text stream whose content becomes ``target`` when the block ends without an
    error (``-``: stdout, and a target that exists but is no regular file, a device or a
    pipe: written as it goes). A symbolic link to a file gets its file replaced."""
    path = Path(target)
    if target == "-" or (path.exists() and not path.is_file()):
        try:
            with contextlib.ExitStack() as stack:
                direct = sys.stdout if target == "-" else stack.enter_context(
                    path.open("w", encoding="utf-8"))  # fmt: skip
                yield direct
        except OSError as exc:
            raise _failure(target, exc) from exc
        return
    path = path.resolve()
    try:
        _remove_abandoned(path)
        fd, name = _temporary(path)
    except OSError as exc:
        raise _failure(target, exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(name, 0o666 & ~umask)  # as open() would have made it
        os.replace(name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(name)
        if isinstance(exc, OSError):
            raise _failure(target, exc) from exc
        raise


#: The end of a temporary file's name: ``.FILE.`` + mkstemp's eight characters + this.
PART = ".part"


def _temporary(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, locked by this process (module docstring)."""
    while True:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PART)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits while a cleaner holds it, then checks
        if _names(name, fd):
            return fd, name
        os.close(fd)  # removed by a cleaner before it was locked: make another


def _names(name: str, fd: int) -> bool:
    """Whether ``name`` still names the open file ``fd``."""
    try:
        found = os.stat(name)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


def _remove_abandoned(path: Path) -> None:
    """Remove the temporary files of ``path`` left by exports whose process died."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}{re.escape(PART)}")
    for entry in os.scandir(path.parent):
        if not pattern.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(entry.path, fd):  # its writer is gone (the kernel freed its lock)
                os.unlink(entry.path)
        except OSError:  # locked: an export still writing it
            pass
        finally:
            os.close(fd)


def _failure(target: str, exc: OSError) -> Exception:
    message = f"cannot write {target}: {exc.strerror or exc}"
    if exc.errno in MACHINE:
        return EngrainError(message + " (nothing written)")
    return click.BadParameter(message)
