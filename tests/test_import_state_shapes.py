"""An imported state document of a namespace engrain reads holds what engrain writes there
(``records.py``; docs/reliability.md, session 29).

Before, a ``state`` record (or the ``state`` list an exported memory record carries) was
checked only as a JSON object: ``{"pairs": 5}`` as the learned co-occurrence made every
later ``context()`` and ``forget()`` of the user raise a bare ``TypeError`` (nothing of
theirs could be deleted), a context record without ``memory_ids`` or ``at`` made
``feedback()`` and ``contexts()`` raise ``KeyError``, and a ``tiers`` document (a cache,
never exported) made every small-window ``context()`` and ``tiers()`` raise one. Now a
document of ``cooccurrence`` or ``contexts`` in another shape is refused (``ValidationError``
naming the record and field, nothing written); a ``tiers`` document is not imported (the
tiers are compiled again from the memories, as after any import); other namespaces are
kept as given. A real export still imports whole.
"""

from __future__ import annotations

from typing import Any

import pytest

from engrain import Engine
from engrain.errors import ValidationError

from .conftest import NOW

USER = "ada"
TEXTS = ["Ada deploys with Kubernetes on Fridays", "Ada writes the Helm charts for deploys"]

BAD: list[tuple[str, str, Any]] = [
    ("cooccurrence", "pairs", {"pairs": 5}),
    ("cooccurrence", "pairs", {"pairs": {"a": 5}}),
    ("cooccurrence", "pairs", {"pairs": {"a": {"b": "3"}}}),
    ("cooccurrence", "pairs", {"pairs": {"a": {"b": -1}}}),
    ("cooccurrence", "pairs", {"pairs": {"a": {"b": True}}}),
    ("cooccurrence", "other", {"pairs": {}}),
    ("contexts", "c1", {"memory_ids": 5, "at": NOW.isoformat()}),
    ("contexts", "c1", {"memory_ids": [1], "at": NOW.isoformat()}),
    ("contexts", "c1", {"at": NOW.isoformat()}),
    ("contexts", "c1", {"memory_ids": ["x"]}),
    ("contexts", "c1", {"memory_ids": ["x"], "at": "yesterday"}),
    ("contexts", "c1", {"memory_ids": ["x"], "at": NOW.isoformat(), "feedback": 5}),
    ("contexts", "c1", {"memory_ids": ["x"], "at": NOW.isoformat(), "feedback": [2.0]}),
    ("contexts", "c1", {"memory_ids": ["x"], "at": NOW.isoformat(), "learned": "yes"}),
]


def _taught(engine: Engine) -> list[str]:
    return [engine.remember(t, USER, now=NOW).memory_id or "" for t in TEXTS]


def _everything(engine: Engine) -> list[Any]:
    return [list(engine.export_records(USER)), engine.store.states(USER)]


@pytest.mark.parametrize(("namespace", "key", "value"), BAD, ids=[repr(b[2]) for b in BAD])
def test_a_state_document_in_another_shape_is_refused_and_writes_nothing(
    engine: Engine, namespace: str, key: str, value: Any
) -> None:
    _taught(engine)
    before = _everything(engine)
    record = {"type": "state", "user_id": USER, "namespace": namespace, "key": key,
              "value": value}  # fmt: skip
    with pytest.raises(ValidationError, match="record 1: "):
        engine.import_records([record])
    carried = {**next(iter(engine.export_records(USER))), "id": "copy",
               "state": [{"namespace": namespace, "key": key, "value": value}]}  # fmt: skip
    with pytest.raises(ValidationError, match=r"record 1: state\[0\]"):
        engine.import_records([carried])
    assert _everything(engine) == before
    # and every call that reads the documents still answers
    assert engine.context("How does Ada deploy?", USER, now=NOW).text
    assert engine.contexts(USER)


def test_a_tiers_document_is_not_imported(engine: Engine) -> None:
    ids = _taught(engine)
    result = engine.import_records([{"type": "state", "user_id": USER, "namespace": "tiers",
                                     "key": "__all__", "value": {"x": 1}}])  # fmt: skip
    assert result.states == 0
    assert engine.store.states(USER, "tiers") == []
    block = engine.context("How does Ada deploy?", USER, now=NOW, context_window=8000)
    assert {m.id for m in block.memories} <= set(ids)
    assert engine.tiers(USER, now=NOW).tiers


def test_learned_state_round_trips_and_other_namespaces_are_kept(engine: Engine) -> None:
    _taught(engine)
    block = engine.context("How does Ada deploy with Helm and Kubernetes?", USER, now=NOW)
    engine.feedback(USER, block.context_id, helpful=True)
    engine.feedback(USER, block.context_id, score=0.25)
    engine.import_records([{"type": "state", "user_id": USER, "namespace": "notes",
                            "key": "k", "value": {"anything": [1, "two"]}}])  # fmt: skip
    records = list(engine.export_records(USER))
    namespaces = {doc["namespace"] for doc in records[0]["state"]}
    assert namespaces == {"contexts", "cooccurrence", "notes"}
    engine.forget([r["id"] for r in records], USER)
    engine.import_records(records)
    assert list(engine.export_records(USER)) == records
