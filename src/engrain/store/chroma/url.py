"""Chroma store URLs, parsed and checked before anything is opened.

* ``chroma://data/chroma`` (relative) or ``chroma:///srv/chroma`` (absolute): an embedded
  ``PersistentClient`` in that directory; the sidecar defaults to ``engrain.db`` inside it.
* ``chroma+http://host:port?state=/path/state.db`` (or ``chroma+https://``): a Chroma
  server; ``state`` names the local SQLite sidecar and is required (a server holds no file
  of ours).

Both take ``collection=`` (default ``engrain``); the server form also ``tenant=`` and
``database=``. Anything else in the query is refused, so a typo is not silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from engrain.errors import ConfigError

#: The URL schemes this backend answers.
SCHEMES = ("chroma", "chroma+http", "chroma+https")
DEFAULT_COLLECTION = "engrain"
#: The sidecar's file name inside an embedded Chroma directory.
SIDECAR_NAME = "engrain.db"

# Chroma's own rule for collection names, checked here so a bad name is a ConfigError
# before any client starts; 35 of Chroma's 512 characters name the user (index.py)
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,475}[A-Za-z0-9]$")
_EMBEDDED_KEYS = frozenset({"collection", "state"})
_SERVER_KEYS = frozenset({"collection", "state", "tenant", "database"})


@dataclass(frozen=True)
class ChromaTarget:
    """Where a Chroma store lives: an embedded directory (``path``) or a server
    (``host``/``port``/``ssl``), the collection, and the SQLite sidecar."""

    collection: str
    sidecar: Path
    path: Path | None = None
    host: str | None = None
    port: int | None = None
    ssl: bool = False
    tenant: str | None = None
    database: str | None = None

    @property
    def embedded(self) -> bool:
        """Whether Chroma runs in this process (``chroma://``)."""
        return self.path is not None

    def describe(self) -> str:
        """A short name for messages (never a password: Chroma URLs carry none)."""
        where = str(self.path) if self.path is not None else f"{self.host}:{self.port}"
        return f"Chroma at {where}, collection {self.collection!r}"


def parse_url(url: str) -> ChromaTarget:
    """The target a ``chroma://`` or ``chroma+http(s)://`` URL names; :class:`ConfigError`
    for anything malformed."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ConfigError(
            f"not a Chroma store URL: {url!r} (chroma://path or chroma+http://host:port)"
        )
    location, _, query = rest.partition("?")
    options = _options(url, query, _EMBEDDED_KEYS if scheme == "chroma" else _SERVER_KEYS)
    collection = options.get("collection", DEFAULT_COLLECTION)
    if not _COLLECTION_NAME.match(collection) or ".." in collection:
        raise ConfigError(
            f"Chroma collection name {collection!r} is not valid: 3-477 characters of "
            "letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
        )
    state = options.get("state")
    if scheme == "chroma":
        if not location:
            raise ConfigError(f"chroma URL has no path: {url!r} (chroma://relative/or/abs)")
        path = Path(location)
        sidecar = Path(state) if state else path / SIDECAR_NAME
        return ChromaTarget(collection=collection, sidecar=sidecar, path=path)
    if not state:
        raise ConfigError(
            f"{scheme} URL {url!r} needs ?state=/path/state.db: the local SQLite file that "
            "keeps the rows, state, revisions and keys beside the server's vectors"
        )
    host, port = _host_port(url, scheme, location)
    return ChromaTarget(
        collection=collection,
        sidecar=Path(state),
        host=host,
        port=port,
        ssl=scheme == "chroma+https",
        tenant=options.get("tenant"),
        database=options.get("database"),
    )


def _options(url: str, query: str, allowed: frozenset[str]) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError(f"malformed query in store URL {url!r}: {exc}") from exc
    if unknown := sorted(parsed.keys() - allowed):
        known = ", ".join(sorted(allowed))
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} in {url!r}; known: {known}")
    if repeated := sorted(k for k, v in parsed.items() if len(v) > 1):
        raise ConfigError(f"option(s) {', '.join(repeated)} given twice in {url!r}")
    return {k: v[0] for k, v in parsed.items()}


def _host_port(url: str, scheme: str, location: str) -> tuple[str, int]:
    location = location.rstrip("/")
    if not location or "/" in location or "@" in location:
        raise ConfigError(f"{scheme} URL {url!r} must be {scheme}://host:port")
    try:
        parts = urlsplit(f"//{location}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"bad host or port in {url!r}: {exc}") from exc
    if not host:
        raise ConfigError(f"{scheme} URL {url!r} has no host")
    return host, port if port is not None else (443 if scheme == "chroma+https" else 8000)
