"""Export → import is lossless: learned per-user state (co-occurrence, context records)
travels with the memories, so the copy answers ``context()`` as the original does, and a
second export is byte-identical to the first."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import ValidationError
from engrain.feedback import CONTEXTS, COOCCURRENCE, PAIRS
from engrain.model import Memory
from engrain.store import MemoryStore, Store
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

FACTS = [
    "The billing service runs on port 8033 behind nginx",
    "Billing invoices are generated nightly by the invoice-cron job",
    "Ada prefers Postgres over MySQL for the billing database",
    "The billing team deploys on Tuesdays after the standup",
    "Stripe webhooks for billing are verified with the signing secret",
    "Grafana dashboards for billing live in the ops folder",
]
QUESTIONS = ["How is billing deployed?", "Where do billing invoices come from?"]


def _lines(engine: Engine) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in engine.export_records()).encode()


def _taught(tmp_path: Path, store: Store) -> Engine:
    engine = Engine(settings=make_settings(tmp_path, auto_compress=False), store=store,
                    embedder=HashEmbedder())  # fmt: skip
    for n, fact in enumerate(FACTS):
        engine.remember(fact, "ada", now=NOW + timedelta(minutes=n))
    for question in QUESTIONS * 2:
        ctx = engine.context(question, "ada", now=NOW + timedelta(days=1))
        engine.feedback("ada", ctx.id, helpful=True)
    return engine


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_learned_state_survives_export_and_import(tmp_path: Path, backend: str) -> None:
    def fresh(name: str) -> Store:
        return MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / f"{name}.db")

    source = _taught(tmp_path, fresh("source"))
    first = _lines(source)
    records = [json.loads(x) for x in first.splitlines()]
    assert {r["type"] for r in records} == {"memory"}  # every line stays a memory
    assert "state" in records[0] and all("state" not in r for r in records[1:])
    states = records[0]["state"]
    assert {(s["namespace"], s["key"]) for s in states} >= {(COOCCURRENCE, PAIRS)}
    assert any(s["namespace"] == CONTEXTS for s in states)

    copy = Engine(settings=make_settings(tmp_path, auto_compress=False), store=fresh("copy"),
                  embedder=HashEmbedder())  # fmt: skip
    result = copy.import_records(json.loads(x) for x in first.splitlines())
    assert result.states == len(states)
    assert copy.store.get_state("ada", COOCCURRENCE, PAIRS) == source.store.get_state(
        "ada", COOCCURRENCE, PAIRS
    )
    assert _lines(copy) == first

    later = NOW + timedelta(days=2)
    for question in QUESTIONS:
        before = source.context(question, "ada", now=later)
        after = copy.context(question, "ada", now=later)
        assert after.text == before.text
        assert [m.id for m in after.memories] == [m.id for m in before.memories]


def test_an_older_reader_sees_only_memories(mem_engine: Engine) -> None:
    """Every export line is a memory a plain ``Memory.from_dict`` reads (unknown fields such
    as the carried state are ignored), so tools written for the memory format keep working."""
    mem_engine.remember("Ada deploys with Kubernetes", "ada", now=NOW)
    ctx = mem_engine.context("How does Ada deploy?", "ada", token_budget=500, now=NOW)
    mem_engine.feedback("ada", ctx.id, helpful=True)
    records = list(mem_engine.export_records("ada"))
    assert records[0]["state"]
    assert [Memory.from_dict(r).id for r in records] == [m.id for m in reversed(
        mem_engine.list("ada"))]  # fmt: skip


def test_a_corrupt_carried_state_writes_nothing(mem_engine: Engine) -> None:
    mem_engine.remember("Ada deploys with Kubernetes", "ada", now=NOW)
    [record] = mem_engine.export_records("ada")
    fresh = Engine(settings=mem_engine.settings, store=MemoryStore(), embedder=HashEmbedder())
    bad = {**record, "state": [{"namespace": COOCCURRENCE, "key": PAIRS, "value": "x"}]}
    with pytest.raises(ValidationError) as info:
        fresh.import_records([bad])
    assert info.value.message.startswith("record 1: state[0].value")
    assert fresh.store.users() == []


def test_a_corrupt_state_record_writes_nothing(mem_engine: Engine) -> None:
    mem_engine.remember("Ada deploys with Kubernetes", "ada", now=NOW)
    records = list(mem_engine.export_records("ada"))
    fresh = Engine(settings=mem_engine.settings, store=MemoryStore(), embedder=HashEmbedder())
    bad = {"type": "state", "user_id": "ada", "namespace": COOCCURRENCE, "key": PAIRS,
           "value": [1, 2]}  # fmt: skip
    with pytest.raises(ValidationError) as info:
        fresh.import_records([*records, bad])
    assert info.value.message.startswith(f"record {len(records) + 1}: value")
    assert fresh.store.users() == []
