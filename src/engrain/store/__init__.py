"""Stores, chosen by URL scheme: ``sqlite:///path``, ``postgresql://…``, ``chroma://path``,
``chroma+http://host:port?state=…``, ``memory://``, or a
scheme a third-party package registers through the ``engrain.stores`` entry point group.

Nothing named in a URL is ever imported or called: a scheme is looked up among the
built-in backends and the installed entry points, and anything else is refused with a
:class:`~engrain.errors.ConfigError` that lists the schemes known.

A package adds a backend by declaring, in its ``pyproject.toml``::

    [project.entry-points."engrain.stores"]
    mystore = "mypackage.store:open_mystore"

where ``open_mystore(url: str) -> Store`` receives the whole URL (``mystore://…``).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from urllib.parse import unquote

from engrain.errors import ConfigError, EngrainError, StoreError
from engrain.store.base import ALL, KeyClaim, MemoryFilter, Patch, State, Store
from engrain.store.memory import MemoryStore

__all__ = [
    "ALL",
    "ENTRY_POINT_GROUP",
    "KeyClaim",
    "MemoryFilter",
    "MemoryStore",
    "Patch",
    "State",
    "Store",
    "known_schemes",
    "open_store",
    "sqlite_path",
    "sqlite_url",
]

#: The entry point group third-party backends register their URL scheme in.
ENTRY_POINT_GROUP = "engrain.stores"

StoreFactory = Callable[[str], Store]


def _sqlite(url: str) -> Store:
    from engrain.store.sqlite import SQLiteStore

    return SQLiteStore(sqlite_path(url))


def sqlite_path(url: str) -> Path:
    """The file a ``sqlite:///`` URL names; :class:`ConfigError` for a URL that names none."""
    # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute.db, the path
    # percent-decoded (a file whose name holds '?', '#' or '%' is spelled %3F, %23, %25)
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    if not path:
        raise ConfigError(f"sqlite URL has no path: {url!r} (sqlite:///relative/or/abs.db)")
    # SQLite's own URI options (?mode=ro, ?immutable=1) are not read here: taken as part of
    # the file name, they would open (and create) another, empty store instead of the one
    # the caller meant, read-only or not, and write to it
    if "?" in path or "#" in path:
        raise ConfigError(
            f"a sqlite URL takes a file path only, no query or fragment: {url!r} (options such "
            "as ?mode=ro are not supported; spell '?' and '#' in a file name %3F and %23)"
        )
    decoded = unquote(path, errors="surrogateescape")
    if "\x00" in decoded:
        raise ConfigError(f"a sqlite URL's path holds a NUL character: {url!r}")
    return Path(decoded)


def sqlite_url(path: Path | str) -> str:
    """The ``sqlite:///`` URL of a file path, whatever characters its name holds (the
    inverse of the URL's decoding: ``%``, ``?`` and ``#`` are escaped)."""
    text = str(path).replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    return f"sqlite:///{text}"


def _memory(url: str) -> Store:
    if url not in ("memory://", "memory:"):
        raise ConfigError(f"a memory store URL takes nothing after the scheme: {url!r}")
    return MemoryStore()


def _postgres(url: str) -> Store:
    try:
        from engrain.store.postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(
            f"the PostgreSQL backend needs {exc.name or 'psycopg'}: pip install 'engrain[postgres]'"
        ) from exc
    return PostgresStore(url)


def _chroma(url: str) -> Store:
    try:
        from engrain.store.chroma import open_chroma
    except ImportError as exc:
        raise ConfigError(
            f"the Chroma backend needs {exc.name or 'chromadb'}: pip install 'engrain[chroma]'"
        ) from exc
    return open_chroma(url)


#: The backends engrain ships, by URL scheme.
BUILT_IN: dict[str, StoreFactory] = {
    "sqlite": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
    "memory": _memory,
    "chroma": _chroma,
    "chroma+http": _chroma,
    "chroma+https": _chroma,
}


def _registered() -> dict[str, EntryPoint]:
    """The installed ``engrain.stores`` entry points by name (not loaded yet)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_schemes() -> list[str]:
    """Every URL scheme :func:`open_store` accepts: built in and registered, sorted."""
    return sorted(BUILT_IN.keys() | _registered().keys())


def open_store(url: str) -> Store:
    """The store a URL names.

    * ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs`` also works) — the default.
    * ``postgresql://user:password@host:5432/dbname`` (or ``postgres://``) — PostgreSQL with
      pgvector, for many users and many processes; needs ``pip install 'engrain[postgres]'``.
    * ``chroma://relative/or/abs/dir`` — vectors in an embedded Chroma, rows in a SQLite
      sidecar inside that directory; ``chroma+http://host:port?state=/path/state.db`` — a
      Chroma server, the sidecar where ``state`` says; needs ``pip install 'engrain[chroma]'``
      (``docs/chroma.md``).
    * ``memory://`` — in-process, gone when the process ends (tests, experiments).
    * ``<scheme>://…`` — a third-party backend whose package registered ``<scheme>`` in the
      ``engrain.stores`` entry point group; its factory is called with the whole URL.

    Any other URL is a :class:`ConfigError` listing the known schemes.
    """
    if not isinstance(url, str):
        raise ConfigError(f"a store URL is a string, not {type(url).__name__}")
    scheme, sep, _ = url.partition(":")
    if not sep or not scheme:
        raise ConfigError(f"store URL {url!r} has no scheme; known: {', '.join(known_schemes())}")
    factory = BUILT_IN.get(scheme)
    if factory is not None:
        return factory(url)
    entry = _registered().get(scheme)
    if entry is None:
        raise ConfigError(
            f"unknown store URL scheme {scheme!r}; known: {', '.join(known_schemes())}"
        )
    return _open_registered(scheme, entry, url)


def _open_registered(scheme: str, entry: EntryPoint, url: str) -> Store:
    """Load an installed entry point (the package's author chose what it names, not the
    URL) and build the store with it."""
    try:
        factory = entry.load()
    except Exception as exc:  # a broken plugin: its own error, whatever it is
        raise ConfigError(
            f"the store backend registered for {scheme!r} failed to load: {exc}"
        ) from exc
    if not callable(factory):
        raise ConfigError(f"the store backend registered for {scheme!r} is not callable")
    try:
        store = factory(url)
    except EngrainError:
        raise
    except Exception as exc:  # the URL may hold a password: not repeated here
        raise StoreError(f"the {scheme!r} store backend failed to open: {exc}") from exc
    if not isinstance(store, Store):
        raise ConfigError(f"the backend registered for {scheme!r} does not return a Store")
    return store
