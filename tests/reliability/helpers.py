"""Shared pieces of the reliability suite: text that rarely merges, engines on a URL, what is
on disk counted without engrain, ledgers that survive a SIGKILL, and error tallies.

Spawned processes import this module by name (``tests.reliability.helpers``), so it holds
no fixtures and nothing that needs pytest.
"""

from __future__ import annotations

import collections
import logging
import random
import re
import sqlite3
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"


def _make_words(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < count:
        syllables = rng.randint(2, 4)
        words.add("".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)))
    return sorted(words)


#: Pronounceable pseudo-words: random sentences drawn from them share few bigrams, so the
#: near-duplicate merge rarely fires and nearly every remember stores a memory of its own.
WORDS = _make_words(4000)


def sentence(rng: random.Random, marker: str | None = None, words: int = 12) -> str:
    """A random sentence of pseudo-words with ``marker`` (a token naming its owner) inside."""
    parts = [rng.choice(WORDS) for _ in range(words)]
    parts[0] = parts[0].capitalize()
    if marker:
        parts.insert(rng.randrange(1, len(parts) + 1), marker)
    return " ".join(parts) + "."


def paragraph(rng: random.Random, marker: str | None = None, sentences: int = 3) -> str:
    """A few random sentences, each carrying ``marker``."""
    return " ".join(sentence(rng, marker) for _ in range(sentences))


def query(rng: random.Random) -> str:
    """A question made of random vocabulary words."""
    return "What do we know about " + " ".join(rng.sample(WORDS, 5)) + "?"


def open_engine(url: str, data_dir: Path, **overrides: Any) -> Any:  # -> engrain.Engine
    """An engine on ``url`` with the hash embedder and one ONNX thread (2-core machines)."""
    from engrain import Engine, Settings

    settings = Settings(url=url, embedder="hash", onnx_threads=1, data_dir=data_dir, **overrides)
    return Engine(settings=settings)


def open_async_engine(url: str, data_dir: Path, **overrides: Any) -> Any:
    """The ``AsyncEngine`` twin of :func:`open_engine`."""
    from engrain import AsyncEngine, Settings

    settings = Settings(url=url, embedder="hash", onnx_threads=1, data_dir=data_dir, **overrides)
    return AsyncEngine(settings=settings)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, else None."""
    return Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None


def stored_ids(url: str) -> set[tuple[str, str]]:
    """Every ``(user_id, id)`` in the store, read with the driver, without engrain."""
    path = sqlite_path(url)
    if path is not None:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {(u, i) for u, i in db.execute("SELECT user_id, id FROM memories")}
        finally:
            db.close()
    import psycopg

    with psycopg.connect(url) as conn:
        return {(u, i) for u, i in conn.execute("SELECT user_id, id FROM memories")}


def integrity_check(path: Path) -> str:
    """``PRAGMA integrity_check`` of a SQLite file (``"ok"`` when healthy)."""
    db = sqlite3.connect(str(path))
    try:
        return "; ".join(str(r[0]) for r in db.execute("PRAGMA integrity_check").fetchall())
    finally:
        db.close()


def error_key(exc: BaseException) -> str:
    """The exception's type and message with numbers and temp paths blanked, so that alike
    failures add up to one count."""
    message = getattr(exc, "message", None) or str(exc)
    message = re.sub(r"\d+", "N", re.sub(r"/tmp/\S+", "<path>", message))
    return f"{type(exc).__module__}.{type(exc).__name__}: {message[:100]}"


@dataclass
class Tally:
    """Thread-safe counts of operations and errors, with one traceback per kind of error."""

    ops: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, op: str) -> None:
        """Count a call that returned."""
        with self.lock:
            self.ops[op] += 1

    def failed(self, op: str, exc: BaseException) -> None:
        """Count a call that raised something it should not have."""
        key = f"{op}: {error_key(exc)}"
        with self.lock:
            self.errors[key] += 1
            self.examples.setdefault(key, traceback.format_exc()[-1500:])

    def merge(self, other: dict[str, Any]) -> None:
        """Add the counts another process wrote as JSON (see :meth:`to_dict`)."""
        self.ops.update(other.get("ops", {}))
        self.errors.update(other.get("errors", {}))
        for key, text in other.get("examples", {}).items():
            self.examples.setdefault(key, text)

    def to_dict(self) -> dict[str, Any]:
        """The counts, JSON-ready."""
        return {"ops": dict(self.ops), "errors": dict(self.errors), "examples": self.examples}

    def report(self) -> str:
        """The counts and the first few tracebacks, for an assertion message."""
        shown = "\n".join(f"--- {k}\n{v}" for k, v in list(self.examples.items())[:3])
        return f"errors {dict(self.errors)}\n{shown}"


class Ledger:
    """An append-only file of ``user id`` lines, each flushed after the call that wrote the
    id returned: what a process reported committed survives its SIGKILL."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, tag: str, user: str, ids: Iterable[str]) -> None:
        """Record ``ids`` of ``user`` under ``tag`` (``C`` committed, ``I`` import started,
        ``B`` import batch committed) and flush."""
        with self._lock:
            self._file.write("".join(f"{tag}\t{user}\t{i}\n" for i in ids))
            self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    @staticmethod
    def read(paths: Iterable[Path]) -> list[tuple[str, str, str]]:
        """The complete lines of these ledgers as ``(tag, user, id)``; a line cut by a kill
        is not a report."""
        rows = []
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
                tag, user, memory_id = line.split("\t")
                rows.append((tag, user, memory_id))
        return rows


def missing(engine: Any, expected: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(user, id)`` pairs of ``expected`` the engine's store does not return."""
    lost = []
    for user, ids in expected.items():
        wanted = sorted(ids)
        found = {m.id for m in engine.store.get(user, wanted)} if wanted else set()
        lost += [(user, i) for i in wanted if i not in found]
    return lost


class LoggedErrors(logging.Handler):
    """Counts the errors engrain only logs (a failed background job: tier compilation,
    compression); use as a context manager around a run."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        """Count one logged error by logger, type and message."""
        exc = record.exc_info[1] if record.exc_info else None
        what = error_key(exc) if exc else record.getMessage()[:100]
        self.counts[f"{record.name}: {what}"] += 1

    def __enter__(self) -> LoggedErrors:
        logging.getLogger("engrain").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("engrain").removeHandler(self)
