"""A big call's per-candidate reads of a working set's rows made once (issue 18, session 18
h13): the scorer reads the ages of rows found from the columns' microseconds, never making
a ``datetime`` (``store/found.py`` :func:`~engrain.store.found.when_micros`), to the same
float as from the built memories; and a search makes each candidate's id once, passing it
from the kept fields' lookup to the vectors' read and the rows found
(``Arrays.ids_of``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import MemoryFields
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.score import Query, gated_weights, present_relevance, score_gated
from engrain.recall.score_batch import gated_columns
from engrain.store import ALL, MemoryFilter
from engrain.store.columns import micros
from engrain.store.found import _UNREAD, Found, when_micros
from engrain.store.ids import IdColumn
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER as ANN_USER
from tests.test_ann import _indexed, _vectors
from tests.test_columnar import NOW, USER
from tests.test_found import varied  # noqa: F401 (a fixture)
from tests.test_row_reads import _loaded, db  # noqa: F401 (a fixture)

#: Times the ages are taken at: after every row, before some (age 0), in another zone.
NOWS = [
    NOW + timedelta(days=40, microseconds=7),
    NOW + timedelta(minutes=5),
    (NOW + timedelta(days=3, seconds=1)).astimezone(timezone(timedelta(hours=5, minutes=30))),
    NOW - timedelta(days=2),
]


def _found(path: Path) -> list[Found]:
    """Every row of the user as a row found, nothing built or read yet but their texts
    (a search's texts are read when first asked for, ``store/texts.py``: while the store
    is open)."""
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        (found,) = store.search_found(USER, np.ones(8, dtype=np.float32) / np.sqrt(8),
                                      [(14, ALL)])  # fmt: skip
        for fields, _ in found:
            assert fields.content
    rows = [f for f, _ in found]
    assert len(rows) == 14 and all(type(f) is Found for f in rows)
    return rows  # type: ignore[return-value]


def _query(now: datetime) -> Query:
    classification = Classification(
        complexity=Complexity.MODERATE, intent=Intent.DEBUGGING, domains=("work",), turn=0,
        has_code=False, references_history=False, signals=(),
    )  # fmt: skip
    return Query(classification, gated_weights(classification), now, ("home",))


def _bits(values: Sequence[float]) -> list[str]:
    return [v.hex() for v in values]


def test_when_micros_is_each_row_founds_when_and_none_for_a_memory(varied: Path) -> None:  # noqa: F811
    rows = _found(varied)
    built = [f.built() for f in rows[:3]]
    got = when_micros([*rows, *built])
    assert got[len(rows) :] == [None, None, None]
    assert got[: len(rows)] == [micros(f.when) for f in rows]
    assert any(f.event_at is not None for f in rows) and any(f.event_at is None for f in rows)


@pytest.mark.parametrize("now", NOWS)
def test_rows_found_are_scored_from_their_columns_bit_for_bit(varied: Path, now: datetime) -> None:  # noqa: F811
    """The totals and present relevances of rows found are those of their built memories
    (and ``score_gated``'s) to the last bit, and scoring them made no ``datetime``: their
    times are still unread."""
    rows = _found(varied)
    relevances = np.linspace(-0.1, 1.1, len(rows)).tolist()
    pool: list[tuple[MemoryFields, float, float]] = [
        (f, r, 0.2 * (i % 3)) for i, (f, r) in enumerate(zip(rows, relevances, strict=True))
    ]
    query = _query(now)
    totals, present = gated_columns(pool, query)
    assert all(f._event is _UNREAD and f._updated is _UNREAD for f in rows)
    memories = [(f.built(), r, b) for f, r, b in pool]
    want_totals, want_present = gated_columns(memories, query)
    assert _bits(totals.tolist()) == _bits(want_totals.tolist())
    assert _bits(present.tolist()) == _bits(want_present.tolist())
    scored = [score_gated(m, r, query.classification, query.weights, now, cooccurrence=b,
                          focus_areas=query.focus_areas).total for m, r, b in memories]  # fmt: skip
    assert _bits(totals.tolist()) == _bits(scored)
    assert _bits(present.tolist()) == _bits([present_relevance(m, r, now) for m, r, _ in memories])


def test_a_naive_now_is_scored_as_before(varied: Path) -> None:  # noqa: F811
    """A naive ``now`` cannot be taken from an aware time: the memory's own ``when`` is
    asked, which raises as ``score_gated`` raises."""
    rows = _found(varied)
    with pytest.raises(TypeError):
        gated_columns([(rows[0], 0.5, 0.0)], _query(NOW.replace(tzinfo=None)))
    assert NOW.tzinfo is UTC


def test_a_search_makes_each_candidates_id_once(
    db: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search without the vector matrix (an index holds them) makes a candidate's id
    once: its kept fields looked up, its vector read from the store and its row found all
    use it. The matches are those of the arrays' own reads."""
    made: Counter[int] = Counter()
    take = IdColumn.take

    def counted(self: IdColumn, rows: Any) -> list[str]:
        made.update(np.asarray(rows, dtype=np.intp).tolist())
        return take(self, rows)

    with closing(_indexed(db)) as store:
        arrays, _ = _loaded(store)
        monkeypatch.setattr(IdColumn, "take", counted)
        for seed in range(5):
            made.clear()
            query = _vectors(1, seed=20 + seed)[0]
            (found,) = store.search_found(ANN_USER, query, [(40, MemoryFilter(project="p1"))])
            assert len(found) == 40 and made, "the search read no rows' ids"
            assert max(made.values()) == 1, "an id made twice in one search"
            rows = [arrays.position[f.id] for f, _ in found]
            assert [f.id for f, _ in found] == arrays.ids.take(rows)
            for (f, _), vector in zip(found, arrays.vectors(np.asarray(rows)), strict=True):
                assert f.embedding is not None and np.array_equal(f.embedding, vector)
