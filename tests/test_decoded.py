"""The kept memories and rows found of a snapshot (``store/rows.py`` ``Decoded``): the copy
a counted use makes for the next snapshot leaves the old one as it was."""

from __future__ import annotations

from datetime import UTC, datetime

from engrain.model import Kind, Memory, MemoryType
from engrain.store.rows import Decoded

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def _memory(i: int) -> Memory:
    return Memory(id=f"m{i}", user_id="u", content=f"note {i}", memory_type=MemoryType.SEMANTIC,
                  kind=Kind.FACT, created_at=NOW, updated_at=NOW)  # fmt: skip


def test_carried_is_a_copy_without_the_dropped_and_with_the_put() -> None:
    built = {f"m{i}": _memory(i) for i in range(0, 40)}
    found = {f"m{i}": _memory(i) for i in range(40, 100)}
    old = Decoded(dict(built), dict(found))
    for i in range(40, 70):  # entries removed first: the copy must still hold the rest
        old._found.pop(f"m{i}")
    put = {"m1": _memory(1001), "m80": _memory(1080)}
    new = old.carried(drop=["m2", "m71", "missing"], put=put)

    # the old snapshot's readers see what they saw
    assert old.get("m2") is built["m2"] and old.get("m1") is built["m1"]
    assert old.fields_many(["m71", "m80"]) == [found["m71"], found["m80"]]
    assert len(old) == 40 + 30
    # the new one: dropped gone, put set (its row found left out), the others carried
    assert new.get("m2") is None and new.fields_many(["m71"]) == [None]
    assert new.get("m1") is put["m1"] and new.fields_many(["m80"]) == [put["m80"]]
    assert new.fields_many(["m3", "m72", "m99"]) == [built["m3"], found["m72"], found["m99"]]
    assert len(new) == 40 - 1 + 1 + 30 - 1 - 1
    # and they no longer share a table: keeping in one does not show in the other
    new.keep_found([_memory(500)])
    assert old.fields_many(["m500"]) == [None]
