"""A working set's ids without a string per row: row → id and id → row (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest

from engrain.store import ids as ids_module
from engrain.store.columns import Strings
from engrain.store.ids import IdColumn, IdPositions

IDS = ["mem-a", "mem-b", "é-unicode", "", "mem-c", "x" * 300]


def test_a_column_gives_each_rows_id_and_arrays_of_ids() -> None:
    column = IdColumn.of(IDS)
    assert len(column) == len(IDS)
    assert [column[i] for i in range(len(IDS))] == IDS
    assert column[-1] == IDS[-1]
    assert column[np.int64(2)] == "é-unicode"
    picked = column[np.array([4, 0])]
    assert picked.dtype == object and picked.tolist() == ["mem-c", "mem-a"]
    assert column[np.array([True, False, True, False, False, False])].tolist() == [
        "mem-a",
        "é-unicode",
    ]
    assert column.tolist() == IDS and list(column) == IDS
    assert column.take([5, 1]) == [IDS[5], "mem-b"]
    assert column.take(np.array([2, 2])) == ["é-unicode", "é-unicode"] and column.take([]) == []
    with pytest.raises(IndexError):
        column[len(IDS)]


def test_a_column_over_a_tables_blob_holds_no_copy() -> None:
    strings = Strings.of(IDS)
    column = IdColumn(strings)
    assert column.strings is strings
    assert column.nbytes == len(strings.blob) + strings.at.nbytes


def test_extended_and_kept_columns_are_new_and_right() -> None:
    column = IdColumn.of(IDS)
    longer = column.extended(["new-1", "new-2"])
    assert longer.tolist() == [*IDS, "new-1", "new-2"]
    assert column.tolist() == IDS  # unchanged
    assert IdColumn.of([]).extended(["only"]).tolist() == ["only"]
    assert column.extended([]) is column
    keep = np.array([True, False, True, True, False, True])
    assert column.kept(keep).tolist() == ["mem-a", "é-unicode", "", IDS[5]]
    assert column.kept(np.zeros(len(IDS), dtype=bool)).tolist() == []


def test_same_compares_ids_and_their_order() -> None:
    column = IdColumn.of(["a", "bc", "d"])
    assert column.same(["a", "bc", "d"])
    assert not column.same(["a", "b", "cd"])  # same bytes once joined, other entries
    assert not column.same(["a", "d", "bc"])
    assert not column.same(["a", "bc"])
    assert IdColumn.of([]).same([])


def test_positions_find_every_row_and_nothing_else() -> None:
    column = IdColumn.of(IDS)
    positions = IdPositions(column)
    assert len(positions) == len(IDS)
    assert list(positions) == IDS
    for row, memory_id in enumerate(IDS):
        assert positions[memory_id] == row
        assert positions.get(memory_id) == row
        assert memory_id in positions
    assert positions.get("missing") is None
    assert positions.get("missing", -1) == -1
    assert "missing" not in positions
    assert 3 not in positions  # not a string
    with pytest.raises(KeyError):
        positions["missing"]
    found = positions.rows_of(["mem-c", "missing", "mem-a", "mem-c"])
    assert found.tolist() == [4, -1, 0, 4]
    assert positions.rows_of([]).tolist() == []
    assert IdPositions(IdColumn.of([])).rows_of(["a"]).tolist() == [-1]
    assert dict(positions.items()) == {m: i for i, m in enumerate(IDS)}


def test_ids_sharing_a_hash_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id hashed alike: only the comparison of the ids themselves picks the row."""
    many = [f"id-{i}" for i in range(50)]

    def same_hash(_: object) -> int:
        return 7

    monkeypatch.setattr(ids_module, "hash", same_hash, raising=False)
    positions = IdPositions(IdColumn.of(many))
    assert [positions.get(m) for m in many] == list(range(50))
    assert positions.get("id-50") is None
    assert positions.rows_of(["id-49", "id-0", "nope"]).tolist() == [49, 0, -1]


def test_positions_hold_far_less_than_a_dict_and_strings() -> None:
    many = [f"{i:032x}" for i in range(20_000)]
    column = IdColumn.of(many)
    positions = IdPositions(column)
    # 32 bytes of id, 8 of offset, 12 of position; a dict and a str per row: ~150
    assert column.nbytes + positions.nbytes < 20_000 * 60
    assert positions.rows_of(many[::-1]).tolist() == list(range(20_000))[::-1]


@pytest.mark.parametrize("collide", [False, True])
def test_positions_extended_and_kept_are_those_of_the_new_column(
    collide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Merged in (a write's new ids) or renumbered (a delete), without hashing every id
    again: each id finds its new row, a dropped one none; with every hash alike too."""
    if collide:
        monkeypatch.setattr(ids_module, "hash", lambda _: 11, raising=False)
    column = IdColumn.of(IDS)
    positions = IdPositions(column)
    longer = column.extended(["new-2", "new-1", "mem-a2"])
    grown = positions.extended(longer, ["new-2", "new-1", "mem-a2"])
    assert [grown[i] for i in longer.tolist()] == list(range(len(longer)))
    assert list(grown) == longer.tolist() and len(grown) == len(IDS) + 3
    assert positions.get("new-1") is None  # the old positions are unchanged
    keep = np.array([False, True, True, False, True, True, False, True, True])
    shorter = longer.kept(keep)
    kept = grown.kept(shorter, keep)
    assert [kept[i] for i in shorter.tolist()] == list(range(int(keep.sum())))
    assert kept.get("mem-a") is None and kept.get("new-2") is None and kept.get("") is None
    assert kept.rows_of(["mem-a2", "mem-a", "é-unicode"]).tolist() == [5, -1, 1]
