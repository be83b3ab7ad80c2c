"""The metadata keys engrain writes itself are engrain's (docs/reliability.md, session 29).

A memory's provenance metadata holds the caller's metadata and four keys engrain keeps
there: ``history`` (the texts a near-duplicate merge replaced), ``conflicts_with`` (the
memories it is flagged against), ``corrects`` (the memory it superseded) and
``distinct_from`` (the pairs a person kept apart). Before, a caller could send any of them
in ``metadata``: ``{"conflicts_with": 5}`` was stored, and from then on every
``context()`` that met the memory, ``review()`` and even ``forget()`` of it raised a bare
``TypeError`` (the memory could not be deleted); ``{"history": 5}`` made the next
near-duplicate ``remember`` raise one, and ``{"history": "text"}`` had its string split
into characters by the merge. Now a caller's metadata naming one of them is refused
(``ValidationError``, nothing written) on every path that takes metadata, an exported
record must hold them in the shape engrain writes, and a memory stored before this rule
(or by another writer of the table) with a malformed one is read as having none of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engrain import Engine
from engrain.corrections import CONFLICTS_WITH, CORRECTS
from engrain.errors import ValidationError
from engrain.model import Provenance
from engrain.review import DISTINCT_FROM
from engrain.store.base import Patch

from .conftest import NOW

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

USER = "ada"
FACT = "Ada deploys the billing service with Kubernetes on Fridays"
#: Values no writer of engrain's own keys makes: each broke a call before.
MALFORMED: list[Any] = [5, True, "abc", {"x": 1}, [1, 2], 2.5]
#: The keys engrain writes in a memory's provenance metadata.
ENGINE_KEYS = ("history", CONFLICTS_WITH, CORRECTS, DISTINCT_FROM)


def test_the_reserved_keys_are_the_ones_engrain_writes() -> None:
    from engrain.model import ENGINE_METADATA

    assert set(ENGINE_KEYS) == ENGINE_METADATA


def _snapshot(engine: Engine) -> list[dict[str, Any]]:
    return [m.to_dict() for m in engine.list(USER)]


CALLS: list[tuple[str, Callable[[Engine, str, dict[str, Any]], object]]] = [
    ("remember", lambda e, i, m: e.remember(FACT + "!", USER, metadata=m, now=NOW)),
    (
        "ingest",
        lambda e, i, m: e.ingest(
            "I moved the billing cron to Tuesdays at 9.", USER, metadata=m, now=NOW
        ),
    ),
    (
        "ingest_conversation",
        lambda e, i, m: e.ingest_conversation(
            [{"speaker": "ada", "text": "We moved to Tuesdays."}], USER, metadata=m, now=NOW
        ),
    ),
    (
        "ingest_conversations",
        lambda e, i, m: e.ingest_conversations(
            [{"user_id": USER, "turns": [{"speaker": "ada", "text": "Tuesdays."}], "metadata": m}]
        ),
    ),
    ("update", lambda e, i, m: e.update(i, USER, metadata=m, now=NOW)),
    (
        "import",
        lambda e, i, m: e.import_records(
            [{"type": "remember", "user_id": USER, "content": FACT + "?", "metadata": m}], now=NOW
        ),
    ),
    (
        "import text",
        lambda e, i, m: e.import_records(
            [{"type": "text", "user_id": USER, "text": "The cron runs at 9.", "metadata": m}]
        ),
    ),
]


@pytest.mark.parametrize("key", ENGINE_KEYS)
@pytest.mark.parametrize(("call", "run"), CALLS, ids=[c for c, _ in CALLS])
def test_a_callers_metadata_naming_an_engine_key_is_refused_and_writes_nothing(
    engine: Engine, call: str, run: Callable[[Engine, str, dict[str, Any]], object], key: str
) -> None:
    mid = engine.remember(FACT, USER, now=NOW).memory_id or ""
    before = _snapshot(engine)
    with pytest.raises(ValidationError, match=f"metadata.*{key}"):
        run(engine, mid, {"team": "ops", key: 5})
    assert _snapshot(engine) == before


def test_a_callers_other_metadata_is_still_kept(engine: Engine) -> None:
    mid = engine.remember(FACT, USER, metadata={"team": "ops"}, now=NOW).memory_id or ""
    engine.update(mid, USER, metadata={"ticket": "OPS-1"}, now=NOW)
    assert engine.get(mid, USER).provenance.metadata == {"team": "ops", "ticket": "OPS-1"}


@pytest.mark.parametrize(
    ("key", "value"),
    [(CONFLICTS_WITH, 5), (CONFLICTS_WITH, "abc"), (CONFLICTS_WITH, [1]), (CORRECTS, 5),
     (CORRECTS, ["a"]), (DISTINCT_FROM, {"a": 1}), ("history", "text"), ("history", [1])],
)  # fmt: skip
def test_an_exported_record_must_hold_the_engine_keys_as_engrain_writes_them(
    engine: Engine, key: str, value: object
) -> None:
    engine.remember(FACT, USER, now=NOW)
    record = next(iter(engine.export_records(USER)))
    record["provenance"]["metadata"][key] = value
    record["id"] = "edited"
    before = _snapshot(engine)
    with pytest.raises(ValidationError, match=f"record 1: provenance.metadata.{key}"):
        engine.import_records([record])
    assert _snapshot(engine) == before


def test_an_export_with_every_engine_key_imports_as_it_was(engine: Engine) -> None:
    """The shapes engrain writes pass the import's check: a merge's history, a conflict's
    flags, a correction's link and a pair kept apart."""
    engine.remember(FACT, USER, now=NOW)
    engine.remember(FACT + "!", USER, now=NOW)  # merged: a history
    a = engine.remember("The staging database listens on port 5432", USER, now=NOW)
    b = engine.remember("The staging database listens on port 6543", USER, now=NOW)
    engine.resolve(a.memory_id or "", b.memory_id or "", USER, "both", now=NOW)
    c = engine.remember("Deploys use Helm charts from the ops repo", USER, now=NOW)
    engine.remember("Deploys use plain manifests", USER, corrects=c.memory_id, now=NOW)
    records = list(engine.export_records(USER))
    keys = {k for r in records for k in r["provenance"]["metadata"]}
    assert {"history", DISTINCT_FROM, CORRECTS} <= keys
    engine.forget([r["id"] for r in records], USER)
    engine.import_records(records)
    assert list(engine.export_records(USER)) == records


@pytest.mark.parametrize("value", MALFORMED, ids=repr)
def test_a_stored_memory_with_malformed_engine_keys_still_answers_and_can_be_forgotten(
    engine: Engine, value: object
) -> None:
    """As an older engrain (which let a caller write them) or another writer of the table
    left it: read as holding none of them."""
    mid = engine.remember(FACT, USER, now=NOW).memory_id or ""
    meta = {k: value for k in ENGINE_KEYS}
    engine.store.write(patches=[Patch(USER, mid, {"provenance": Provenance((), meta)})])
    assert "billing" in engine.context("How do we deploy the billing service?", USER,
                                       now=NOW).text  # fmt: skip
    assert "(conflict" not in engine.context("How is billing deployed?", USER, now=NOW).text
    assert engine.review(USER) == []
    assert engine.relations(mid, USER).conflicts == []
    merged = engine.remember(FACT + "!", USER, now=NOW)  # a near-duplicate: a merge
    assert merged.memory_id == mid
    history = engine.get(mid, USER).provenance.metadata["history"]
    assert history == [{"content": FACT, "updated_at": NOW.isoformat()}]
    assert engine.forget(mid, USER) == 1
    assert engine.list(USER) == []
