"""A file the CLI writes for the user (``engrain export FILE``): whole or not at all.

The records go to a temporary file beside ``FILE`` that replaces it only once every record
is written and flushed, so a disk that fills up, a store that fails mid-export or a ^C
never leaves a truncated export where the user asked for one (a truncated JSONL file
would import as fewer memories, silently), nor destroys an earlier export of that name.
Any failure removes the temporary file.

What the failure is: a path the user can fix (no such directory, a directory, no
permission) is a usage error (exit 2, as before); the machine refusing the bytes (a full
disk or quota, an I/O error, a read-only mount, a file-size limit) is an
:class:`~engrain.errors.EngrainError` (exit 3), like a store failure.
"""

from __future__ import annotations

import contextlib
import errno
import os
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
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
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


def _failure(target: str, exc: OSError) -> Exception:
    message = f"cannot write {target}: {exc.strerror or exc}"
    if exc.errno in MACHINE:
        return EngrainError(message + " (nothing written)")
    return click.BadParameter(message)
