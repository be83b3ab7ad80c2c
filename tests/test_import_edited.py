"""An export edited by hand and imported back: what a careless or hostile edit may not do.

A vector is a cache of its content: one no model could have made (scaled, zeroed, of
another length) is made again from the content, so it can neither outrank every other
memory of its user nor hide its own. A number a float32 vector cannot hold is refused. A
memory (a user's id) written twice in one import is refused, naming both records: one copy
would silently replace the other. Each refusal writes nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ValidationError
from engrain.store import MemoryStore

from .conftest import NOW, make_settings

TOPICS = [
    "the billing service listens on port 8033",
    "invoices are built nightly by cron",
    "deploys happen on Tuesdays after standup",
    "grafana boards live in the ops folder",
    "stripe webhooks are verified with the signing secret",
    "ada prefers postgres",
]


@pytest.fixture
def taught(tmp_path: Path) -> Engine:
    engine = Engine(settings=make_settings(tmp_path, auto_compress=False), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    for topic in TOPICS:
        engine.remember(topic, "bob", now=NOW)
    engine.remember("alice keeps the vault code", "alice", now=NOW)
    return engine


def _rows(engine: Engine) -> list[tuple[str, str, str]]:
    return sorted((m.user_id, m.id, m.content) for u in engine.users() for m in engine.list(u))


def _edited(engine: Engine, content: str, vector: list[float]) -> dict[str, Any]:
    """Bob's first exported memory as a new memory: another id and content, ``vector``."""
    record = copy.deepcopy(next(iter(engine.export_records("bob"))))
    record.pop("state", None)
    record.update(id="edited", content=content, embedding=vector)
    return record


@pytest.mark.parametrize("scale", [1e30, -1e30, 1e-30, 0.0, 2.0])
def test_a_vector_no_model_made_is_made_again_from_its_content(
    taught: Engine, scale: float
) -> None:
    """Base kept the vector as written: at length 1e30 the edited memory came first for
    every question of its user (and, at 0, never for its own words)."""
    dim = taught.embedder.dim
    vector = list(np.full(dim, scale / np.sqrt(dim)))
    taught.import_records([_edited(taught, "zebra crossings near the office", vector)])
    stored = taught.get("edited", "bob").embedding
    assert stored is not None
    expected = taught.embedder.embed(["zebra crossings near the office"])[0]
    assert np.allclose(stored, expected, atol=1e-6)
    for topic in TOPICS:
        assert taught.recall(topic, "bob").memories[0].content == topic


def test_an_exported_vector_is_kept_as_written(taught: Engine) -> None:
    record = next(iter(taught.export_records("bob")))
    original = np.asarray(record["embedding"], dtype=np.float32)
    record = {**record, "embedding": [float(x) * (1 + 1e-5) for x in record["embedding"]]}
    taught.import_records([record])
    stored = taught.get(record["id"], "bob").embedding
    assert stored is not None and np.allclose(stored, original * (1 + 1e-5), atol=1e-7)


def test_a_number_a_float32_vector_cannot_hold_is_refused_and_nothing_is_written(
    taught: Engine,
) -> None:
    before = _rows(taught)
    vector = [1e39] + [0.0] * (taught.embedder.dim - 1)
    with pytest.raises(ValidationError, match=r"^record 1: embedding holds a number beyond"):
        taught.import_records([_edited(taught, "walrus tusks", vector)])
    assert _rows(taught) == before


def test_a_memory_twice_in_one_import_is_refused(taught: Engine) -> None:
    """Base stored the last copy: a duplicated line silently replaced the first."""
    records = [r for r in taught.export_records("bob")]
    changed = {**records[2], "content": "deploys happen on Fridays"}
    before = _rows(taught)
    with pytest.raises(ValidationError) as caught:
        taught.import_records([*records, changed])
    assert caught.value.message == (
        f"record {len(records) + 1}: id: memory {records[2]['id']!r} of user 'bob' is already "
        "in this import (an import holds each memory once)"
    )
    assert _rows(taught) == before


def test_one_id_for_two_users_is_two_memories(taught: Engine) -> None:
    """Memory ids are per user: the same id under another user is another memory, and
    importing it never touches the first user's."""
    alice = next(iter(taught.export_records("alice")))
    bobs = {**alice, "user_id": "bob", "content": "bob wrote this under alice's id"}
    bobs.pop("state", None)
    taught.import_records([bobs, {**alice, "state": []}])
    assert taught.get(alice["id"], "alice").content == "alice keeps the vault code"
    assert taught.get(alice["id"], "bob").content == "bob wrote this under alice's id"
