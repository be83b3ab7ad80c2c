"""A write stopped by the process's file-size limit says so (``store/file_limit.py``).

SQLite reports ``EFBIG`` as a bare "disk I/O error"; the store adds which file reached the
process's ``RLIMIT_FSIZE`` and what to do, keeping the driver's words. The limit is set in
a child process (this one keeps writing files), as a server's ``LimitFSIZE=`` would be.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engrain.store import sqlite_connection

resource = pytest.importorskip("resource")

_CHILD = r"""
import json, resource, sys, warnings
warnings.simplefilter("ignore")
from pathlib import Path
from engrain import Engine
from engrain.config import Settings
from engrain.errors import EngrainError
db = Path(sys.argv[1])
engine = Engine(settings=Settings(data_dir=db.parent, url=f"sqlite:///{db}", embedder="hash"))
engine.remember("the first memory, before the limit", user_id="ada")
before = len(engine.list(user_id="ada"))
largest = max(p.stat().st_size for p in db.parent.glob(db.name + "*"))
resource.setrlimit(resource.RLIMIT_FSIZE, (largest + 8192, resource.RLIM_INFINITY))
error = None
for i in range(400):
    try:
        engine.remember(f"memory {i}: " + "words of a long memory " * 200, user_id="ada")
    except EngrainError as exc:
        error = {"code": exc.code, "message": str(exc), "listed": len(engine.list(user_id="ada"))}
        break
    before += 1
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
engine.remember("written once the limit is lifted", user_id="ada")
print(json.dumps({"error": error, "before": before}))
engine.close()
"""


def test_a_write_past_the_file_size_limit_names_the_limit(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    done = subprocess.run([sys.executable, "-c", _CHILD, str(db)], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    error = result["error"]
    assert error is not None, "the limit stopped no write"
    assert error["code"] == "store_error"
    assert "disk I/O error" in error["message"]  # the driver's words are kept
    assert "file-size limit" in error["message"] and "ulimit -f" in error["message"]
    assert error["listed"] == result["before"]  # the failed call wrote nothing


def test_an_io_error_far_from_any_limit_keeps_the_drivers_message(tmp_path: Path) -> None:
    from engrain.store import file_limit

    db = tmp_path / "store.db"
    sqlite3.connect(db).close()
    assert file_limit.file_size_limit() is None  # this process has no limit
    error = sqlite3.OperationalError("disk I/O error")
    assert sqlite_connection.reason(error, db) == "disk I/O error"
