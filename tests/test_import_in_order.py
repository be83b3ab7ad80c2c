"""An import plans its records in order, as sequential calls would (``records.py``;
docs/reliability.md, session 29).

Before, two things an import did differed from the same records imported one call each:
a ``memory`` record (an exported memory, restored as it is) was written at the end but
never shown to the records after it, so a ``remember`` record restating it was stored as a
second copy instead of updating it, and one correcting it (``corrects=`` its id) was
refused with ``NotFoundError``; and a record's near-duplicate was looked for among all the
memories earlier records staged, of any project, so a ``remember`` record of project
``b`` was merged into an earlier one of project ``a`` (its project lost), where a call of
its own finds duplicates only in its project. Each test compares one import with the
same records imported one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore, Store
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

USER = "ada"
FACT = "The staging database of the billing service listens on port 5432"


def _shape(engine: Engine) -> list[tuple[Any, ...]]:
    """What a user sees of the memories: content, project, key, and which is superseded
    (by the content of the memory superseding it)."""
    memories = engine.list(USER)
    content = {m.id: m.content for m in memories}
    return sorted(
        (m.content, m.project, m.key, content.get(m.superseded_by or ""), m.access_count)
        for m in memories
    )


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[[str], Engine]]:
    def engine(kind: str) -> Engine:
        store: Store = (
            MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / f"{len(made)}.db")
        )
        made.append(
            Engine(
                settings=make_settings(tmp_path, auto_compress=False),
                store=store,
                embedder=HashEmbedder(),
            )
        )
        return made[-1]

    made: list[Engine] = []
    yield engine
    for e in made:
        e.close()


def _exported(make: Callable[[str], Engine], kind: str, **fields: Any) -> dict[str, Any]:
    source = make(kind)
    source.remember(FACT, USER, now=NOW, **fields)
    return next(iter(source.export_records(USER)))


def _both_ways(
    make: Callable[[str], Engine], kind: str, records: list[dict[str, Any]]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    together, one_by_one = make(kind), make(kind)
    together.import_records(records, now=NOW)
    for record in records:
        one_by_one.import_records([record], now=NOW)
    return _shape(together), _shape(one_by_one)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_restatement_of_a_restored_memory_updates_it(
    make: Callable[[str], Engine], kind: str
) -> None:
    restored = _exported(make, kind, access_count=3)
    said = {"type": "remember", "user_id": USER, "content": FACT + "."}
    together, one_by_one = _both_ways(make, kind, [restored, said])
    assert together == one_by_one == [(FACT + ".", None, None, None, 3)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_correction_of_a_restored_memory_supersedes_it(
    make: Callable[[str], Engine], kind: str
) -> None:
    restored = _exported(make, kind)
    fix = {"type": "remember", "user_id": USER, "kind": "correction",
           "content": "The staging database now listens on port 6543",
           "corrects": restored["id"]}  # fmt: skip
    together, one_by_one = _both_ways(make, kind, [restored, fix])
    assert together == one_by_one
    assert [s[3] for s in together] == [None, "The staging database now listens on port 6543"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_near_duplicates_of_two_projects_stay_two_memories(
    make: Callable[[str], Engine], kind: str
) -> None:
    records = [
        {"type": "remember", "user_id": USER, "content": FACT, "project": "a"},
        {"type": "remember", "user_id": USER, "content": FACT + ".", "project": "b"},
    ]
    together, one_by_one = _both_ways(make, kind, records)
    assert together == one_by_one == [(FACT, "a", None, None, 0), (FACT + ".", "b", None, None, 0)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_export_imported_with_a_restatement_keeps_every_other_field(
    make: Callable[[str], Engine], kind: str
) -> None:
    """The restored memory a later record merges into keeps what the merge does not set
    (its pin, its id, its times of use), as after two calls."""
    restored = _exported(make, kind, pinned=True, access_count=7)
    said = {"type": "remember", "user_id": USER, "content": FACT + "!"}
    engine = make(kind)
    result = engine.import_records([restored, said], now=NOW)
    assert (result.memories, result.stored, result.merged) == (1, 0, 1)
    [memory] = engine.list(USER)
    assert (memory.id, memory.pinned, memory.access_count) == (restored["id"], True, 7)
    assert memory.provenance.metadata["history"][0]["content"] == FACT
