"""``update`` keeps a key one entry (docs/concurrency.md: a key, of its kind and project,
has one live memory; docs/reliability.md, session 29).

Before, ``update(memory_id, key=K)`` wrote K on the memory whatever held it already, and
so did a change of ``kind`` or ``project`` that moved a keyed memory into the entry
another live memory holds: two live memories under one key, the state every keyed write
path (``remember``, corrections, resolutions) had been made to prevent. Now such an update
is refused (``ValidationError`` naming the holder, nothing written); forgetting or
correcting the holder first is the user's choice. An update that leaves the memory's entry
as it is, or moves it to a free one, is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engrain import Engine
from engrain.errors import ValidationError

from .conftest import NOW

USER = "ada"


def _live_keys(engine: Engine) -> list[tuple[str | None, str, str | None]]:
    live = [(m.key, m.kind.value, m.project) for m in engine.list(USER) if m.superseded_by is None]
    return sorted(live, key=repr)


def _two(
    engine: Engine, kind: str = "preference", key: str = "theme", project: str | None = None
) -> tuple[str, str]:
    tabs = engine.remember("I indent with tabs", USER, "preference", key="indent", now=NOW)
    theme = engine.remember("I use the dark theme", USER, kind, key=key, project=project,
                            now=NOW)  # fmt: skip
    return tabs.memory_id or "", theme.memory_id or ""


MOVES: list[tuple[str, Callable[[Engine], tuple[str, dict[str, Any]]]]] = [
    ("key", lambda e: (_two(e)[1], {"key": "indent"})),
    ("kind", lambda e: (_two(e, kind="fact", key="indent")[1], {"kind": "preference"})),
    ("project", lambda e: (_two(e, key="indent", project="web")[1], {"project": None})),
]


@pytest.mark.parametrize(("change", "setup"), MOVES, ids=[m for m, _ in MOVES])
def test_an_update_into_a_held_key_is_refused_and_writes_nothing(
    engine: Engine, change: str, setup: Callable[[Engine], tuple[str, dict[str, Any]]]
) -> None:
    memory_id, fields = setup(engine)
    before = [m.to_dict() for m in engine.list(USER)]
    with pytest.raises(ValidationError, match="key 'indent' is held by memory"):
        engine.update(memory_id, USER, now=NOW, **fields)
    assert [m.to_dict() for m in engine.list(USER)] == before


def test_a_key_keeps_one_live_memory_after_updates(engine: Engine) -> None:
    tabs, theme = _two(engine)
    with pytest.raises(ValidationError):
        engine.update(theme, USER, key="indent", now=NOW)
    engine.forget(tabs, USER)  # the holder gone: the key is free
    engine.update(theme, USER, key="indent", now=NOW)
    assert _live_keys(engine) == [("indent", "preference", None)]
    out = engine.remember("I indent with spaces", USER, "preference", key="indent", now=NOW)
    assert out.memory_id == theme  # the one entry updated


def test_updates_that_keep_or_free_an_entry_are_unchanged(engine: Engine) -> None:
    tabs, theme = _two(engine)
    engine.update(tabs, USER, key="indent", content="I indent with two spaces", now=NOW)
    engine.update(theme, USER, key="colours", now=NOW)
    engine.update(theme, USER, project="web", now=NOW)
    engine.update(tabs, USER, key=None, now=NOW)
    engine.update(theme, USER, key="indent", now=NOW)  # another project's entry: free
    assert _live_keys(engine) == [("indent", "preference", "web"), (None, "preference", None)]


def test_a_superseded_memory_may_take_a_held_key(engine: Engine) -> None:
    """A superseded memory is never served: it holds no entry."""
    _, theme = _two(engine)
    engine.remember("I use the light theme", USER, "preference", corrects=theme, now=NOW)
    engine.update(theme, USER, key="indent", now=NOW)
    assert [k for k in _live_keys(engine) if k[0] == "indent"] == [("indent", "preference", None)]
