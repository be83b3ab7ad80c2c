"""The kept memories and rows found of a snapshot (``store/rows.py`` ``Decoded``): the copy
a counted use makes for the next snapshot leaves the old one as it was, and a full one drops
the older half of what it keeps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engrain.model import Kind, Memory, MemoryType
from engrain.store import rows
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


def test_a_full_cache_drops_the_older_half_of_each_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "DECODED_MAX", 10)
    decoded = Decoded()
    built = decoded.keep_many([_memory(i) for i in range(4)])
    decoded.keep_found([_memory(i) for i in range(100, 106)])
    assert len(decoded) == 10
    held_entries, held_found = decoded._entries, decoded._found  # what a reader holds
    kept = decoded.keep(_memory(4))  # one more: m0-m1 and m100-m102 dropped, m4 kept
    assert kept.id == "m4"
    assert list(decoded._entries) == ["m2", "m3", "m4"]
    assert list(decoded._found) == ["m103", "m104", "m105"]
    assert decoded.get_many(["m1", "m2", "m3"]) == [None, built[2], built[3]]
    assert decoded.fields_many(["m102", "m103"])[0] is None
    # the tables a reader held are not changed: it reads what it read before
    assert list(held_entries) == ["m0", "m1", "m2", "m3"]
    assert list(held_found) == [f"m{i}" for i in range(100, 106)]
    # building a memory of a row found takes the row's place (not one more)
    decoded.keep(_memory(104))
    assert list(decoded._entries) == ["m2", "m3", "m4", "m104"]
    assert list(decoded._found) == ["m103", "m105"]
    assert len(decoded) == 6


def test_keep_many_across_a_drop_keeps_the_newest_and_returns_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows, "DECODED_MAX", 4)
    decoded = Decoded()
    memories = [_memory(i) for i in range(7)]
    out = decoded.keep_many(memories)
    assert out == memories and all(a is b for a, b in zip(out, memories, strict=True))
    # m0-m3 fill it; m4 drops m0-m1 (m2-m4); m5 fits (m2-m5); m6 drops m2-m3 (m4-m6)
    assert list(decoded._entries) == ["m4", "m5", "m6"]
    assert decoded.keep(_memory(5)) is memories[5]  # the one kept for its id is returned


def test_more_found_than_half_room_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "DECODED_MAX", 10)
    decoded = Decoded()
    decoded.keep_many([_memory(i) for i in range(8)])
    decoded.keep_found([_memory(i) for i in range(100, 106)])  # 6 more: halving leaves 4
    assert list(decoded._entries) == ["m4", "m5", "m6", "m7"]
    assert list(decoded._found) == [f"m{i}" for i in range(100, 106)]
    decoded.keep_found([_memory(i) for i in range(200, 208)])  # 8: 5 after halving is too many
    assert decoded._entries == {}
    assert list(decoded._found) == [f"m{i}" for i in range(200, 208)]
