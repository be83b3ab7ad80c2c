"""A file written whole under a temporary name in its directory, then moved over its name
(``os.replace``): a reader sees the old file (or none) or the new one, never a torn one. The
derived indexes beside a SQLite database (``derived_files``) and PostgreSQL's held graphs
(``postgres/graph_file``) are kept this way."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")


def replace_file(target: Path, write: Callable[[BinaryIO], T]) -> T:
    """Write ``target`` through ``write`` (given the open temporary file) and move it over
    ``target``; what ``write`` returned. On any failure the temporary file is removed and the
    error raised; ``target`` is as it was."""
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            result = write(out)
        os.replace(name, target)
    except BaseException:
        with suppress(OSError):  # another process removed it first
            os.unlink(name)
        raise
    return result
