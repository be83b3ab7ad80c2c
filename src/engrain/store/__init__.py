"""Stores, chosen by URL: ``sqlite:///path``, ``postgresql://…``, ``memory://``, or a dotted
path to a class."""

from __future__ import annotations

import importlib
from pathlib import Path

from engrain.errors import ConfigError
from engrain.store.base import ALL, MemoryFilter, Patch, State, Store
from engrain.store.memory import MemoryStore

__all__ = ["ALL", "MemoryFilter", "MemoryStore", "Patch", "State", "Store", "open_store"]


def open_store(url: str) -> Store:
    """The store a URL names.

    * ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs`` also works) — the default.
    * ``postgresql://user:password@host:5432/dbname`` (or ``postgres://``) — PostgreSQL with
      pgvector, for many users and many processes; needs ``pip install 'engrain[postgres]'``.
    * ``memory://`` — in-process, gone when the process ends (tests, experiments).
    * ``package.module:ClassName`` or ``package.module.ClassName`` — a third-party backend,
      constructed with the URL's remainder after ``?`` (if any) as its only argument.
    """
    if url.startswith("sqlite://"):
        from engrain.store.sqlite import SQLiteStore

        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute.db
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ConfigError(f"sqlite URL has no path: {url!r}")
        return SQLiteStore(Path(path))
    if url in ("memory://", "memory:"):
        return MemoryStore()
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from engrain.store.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"the PostgreSQL backend needs {exc.name or 'psycopg'}: "
                "pip install 'engrain[postgres]'"
            ) from exc
        return PostgresStore(url)
    dotted, _, arg = url.partition("?")
    module_name, sep, attr = dotted.partition(":")
    if not sep:
        module_name, _, attr = dotted.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"unrecognised store URL {url!r}")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load store class {dotted!r}: {exc}") from exc
    try:
        store = cls(arg) if arg else cls()
    except TypeError as exc:  # not a class, or one that takes other arguments
        raise ConfigError(f"cannot construct store {dotted!r}: {exc}") from exc
    if not isinstance(store, Store):
        raise ConfigError(f"{dotted!r} does not implement the engrain Store protocol")
    return store
