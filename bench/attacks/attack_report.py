"""How every attack script ends: the JSON summary printed (and written with ``--json``),
exit 0 only when ``summary["ok"]`` — the contract of ``../shared/reliability``'s scripts;
what the scripts that drive the CLI in a private directory share; and the hash-embedder
SQLite engine most attacks open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, NoReturn

from engrain import Engine
from engrain.config import Settings


def finish(summary: dict[str, Any], path: Path | None) -> NoReturn:
    """Print ``summary`` as JSON, write it to ``path`` if given, and exit 0 if it is ok."""
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)
    if path:
        path.write_text(text + "\n", encoding="utf-8")
    sys.exit(0 if summary["ok"] else 1)


def deep(levels: int) -> dict[str, Any]:
    """A mapping nested ``levels`` deep (the input a parser's depth limit refuses)."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def hash_settings(db: Path, **changes: Any) -> Settings:
    """The settings of the SQLite store ``db`` with the hash embedder and the data directory
    beside it, with ``changes`` (any other setting) on top."""
    return Settings(data_dir=db.parent, url=f"sqlite:///{db}", embedder="hash", **changes)


def hash_engine(db: Path, **changes: Any) -> Engine:
    """An engine on :func:`hash_settings` ``(db, **changes)``, warnings silenced (an attack
    provokes the ones the engine gives, and reads its findings from what it stored)."""
    warnings.simplefilter("ignore")
    return Engine(settings=hash_settings(db, **changes))


def private_environment(prefix: str) -> tuple[Path, dict[str, str]]:
    """A new temporary directory and this process's environment pointed at it (hash
    embedder, an approximate index at any size, data directory and home inside it)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update(ENGRAIN_EMBEDDER="hash", ENGRAIN_ANN_MIN_VECTORS="0",
                      ENGRAIN_DATA_DIR=str(root / "data"), HOME=str(root))  # fmt: skip
    return root, dict(os.environ)


def round_environment(d: Path) -> dict[str, str]:
    """The environment for one round's server and CLI in directory ``d``: no inherited
    ``ENGRAIN_*`` variable, a SQLite store ``d/store.db``, the hash embedder, data directory
    and home inside ``d``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env.update(ENGRAIN_URL=f"sqlite:///{d / 'store.db'}", ENGRAIN_EMBEDDER="hash",
               ENGRAIN_DATA_DIR=str(d), HOME=str(d))  # fmt: skip
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``engrain *args`` in a child process with ``env`` (5 minutes at most)."""
    return subprocess.run([sys.executable, "-m", "engrain.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def next_process(db: Path, user: str, env: dict[str, str]) -> tuple[bool, str]:
    """Whether a new process opens the SQLite store ``db``, writes a memory for ``user`` and
    gets it back from ``context()``; with the end of its error output when it does not."""
    script = (
        "from engrain import Engine\n"
        f"e = Engine('sqlite:///{db}')\n"
        f"e.remember('written by the next process', user_id={user!r})\n"
        f"assert 'next process' in e.context('what did the next process write?', "
        f"user_id={user!r}).text\n"
        "e.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    return done.returncode == 0, done.stderr[-300:]
