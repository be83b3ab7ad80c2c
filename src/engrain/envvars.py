"""The ``ENGRAIN_*`` variables read outside :class:`~engrain.config.Settings` that take a
number or a switch (``ENGRAIN_ANN_MIN_VECTORS``, ``ENGRAIN_PG_*``) or one of a few named
values (``ENGRAIN_PG_POOL_INDEX``, :func:`choice`), read by one rule.

Unset or blank: the caller's default. ``on`` / ``yes`` / ``true``: :data:`ON`; ``off`` /
``no`` / ``false`` (and the words a variable's documentation names, such as ``exact``):
:data:`OFF`; a whole number of zero or more: that number. Anything else raises
:class:`~engrain.errors.ConfigError` naming the variable and its value: a typo such as
``ENGRAIN_ANN_MIN_VECTORS=20k`` must not quietly run with the default.
:func:`engrain.config.load_settings` checks every variable of :data:`COUNTS` and
:data:`CHOICES` with the settings, so a bad one is reported where the other bad settings
are, before a store opens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import Enum
from typing import Final

from engrain.errors import ConfigError


class Switch(Enum):
    """A variable turned on or off by a word rather than given a number."""

    ON = "on"
    OFF = "off"


ON: Final = Switch.ON
OFF: Final = Switch.OFF
_ON_WORDS = frozenset({"on", "yes", "true"})
_OFF_WORDS = frozenset({"off", "no", "false"})

#: Each variable read by :func:`count`, with the extra words it takes for ``off`` and what
#: its number counts (for the error message).
COUNTS: Final[Mapping[str, tuple[frozenset[str], str]]] = {
    "ENGRAIN_ANN_MIN_VECTORS": (frozenset({"none", "exact"}), "a vector count"),
    "ENGRAIN_PG_LEARNINGS_MB": (frozenset(), "a size in MiB"),
    "ENGRAIN_PG_PROJECTED_MB": (frozenset(), "a size in MiB"),
    "ENGRAIN_PG_WORKING_SET": (frozenset(), "a memory count"),
}


def count(name: str, environ: Mapping[str, str] | None = None) -> int | Switch | None:
    """The value of the variable ``name`` (one of :data:`COUNTS`): ``None`` when unset or
    blank, :data:`ON`, :data:`OFF`, or a whole number of zero or more. Raises
    :class:`ConfigError` for any other text."""
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip().lower()
    if not value:
        return None
    if value in _ON_WORDS:
        return ON
    off_words, what = COUNTS[name]
    if value in _OFF_WORDS or value in off_words:
        return OFF
    if value.isascii() and value.isdigit():
        return int(value)
    raise ConfigError(
        f"invalid environment variable {name}={raw[:40]!r}: expected {what} (a whole number, "
        "0 or more), on or off"
    )


#: Each variable read by :func:`choice`: its values, the first its default, each with the
#: words that name it.
CHOICES: Final[Mapping[str, Mapping[str, frozenset[str]]]] = {
    "ENGRAIN_PG_POOL_INDEX": {
        "graph": frozenset({"graph", "on", "hnsw"}),
        "projection": frozenset({"projection", "off"}),
    },
    "ENGRAIN_DEFER_USES": {
        "on": frozenset({"on", "yes", "true"}),
        "off": frozenset({"off", "no", "false"}),
    },
}


def choice(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the variable ``name`` (one of :data:`CHOICES`): its first value when
    unset or blank, else the value one of whose words it is (any case). Raises
    :class:`ConfigError` for any other text."""
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip().lower()
    values = CHOICES[name]
    if not value:
        return next(iter(values))
    for named, words in values.items():
        if value in words:
            return named
    raise ConfigError(
        f"invalid environment variable {name}={raw[:40]!r}: expected {' or '.join(values)}"
    )


def problems(environ: Mapping[str, str]) -> dict[str, str]:
    """Each variable of :data:`COUNTS` and :data:`CHOICES` in ``environ`` whose value does
    not parse, with the line :class:`ConfigError` says of it."""
    found = {}
    for name, read in [*((n, count) for n in COUNTS), *((n, choice) for n in CHOICES)]:
        try:
            read(name, environ)
        except ConfigError as exc:
            found[name] = exc.message
    return found
