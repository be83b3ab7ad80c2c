"""``engrain.wire``: every result type survives JSON both ways (what a client rebuilds
equals what the engine returned), and every dump fits the server's response model."""

from __future__ import annotations

import json
from typing import Any

from engrain import Engine, wire
from engrain.errors import (
    InputTooLargeError,
    KeyChangedError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
)
from engrain.server import models as m

from .conftest import NOW


def through_json(data: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(data))
    return loaded


def test_every_result_type_round_trips(mem_engine: Engine) -> None:
    e = mem_engine
    out = e.remember("I prefer tabs over spaces", "ada", "preference", now=NOW)
    report = e.ingest("We shipped version 2 of the billing service on Monday. "
                      "The rollout took three hours.", "ada", now=NOW)  # fmt: skip
    conv = e.ingest_conversation([{"speaker": "ada", "text": "My cat Pixel hates rain."}],
                                 "ada", now=NOW)  # fmt: skip
    ctx = e.context("How should I indent this file?", "ada", token_budget=800, now=NOW)
    gated = e.explain("How should I indent this file?", "ada", now=NOW)
    rec = e.recall("indentation", "ada", now=NOW)
    memory = e.get(out.memory_id or "", "ada")
    fb = e.feedback("ada", ctx.id, helpful=True) if ctx.memories else None
    tiers = e.tiers("ada", rebuild=True, now=NOW)
    imported = e.import_records(e.export_records("ada"))
    pairs = [
        (wire.dump_outcome, wire.load_outcome, out, m.OutcomeOut),
        (wire.dump_ingest_report, wire.load_ingest_report, report, m.IngestReportOut),
        (wire.dump_ingest_report, wire.load_ingest_report, conv, m.IngestReportOut),
        (wire.dump_context, wire.load_context, ctx, m.ContextOut),
        (wire.dump_gated, wire.load_gated, gated, m.GatedOut),
        (wire.dump_recall, wire.load_recall, rec, m.RecallOut),
        (wire.dump_memory, wire.load_memory, memory, m.MemoryOut),
        (wire.dump_tiers, wire.load_tiers, tiers, m.TiersOut),
        (wire.dump_import, wire.load_import, imported, m.ImportOut),
    ]
    if fb is not None:
        pairs.append((wire.dump_feedback, wire.load_feedback, fb, m.FeedbackOut))
    for dump, load, value, model in pairs:
        data = through_json(dump(value))
        model.model_validate(data)  # the OpenAPI document describes what is sent
        assert load(data) == value, dump.__name__
    assert gated.decisions and wire.load_gated(through_json(wire.dump_gated(gated))).decisions


def test_tier_memories_survive(mem_engine: Engine) -> None:
    mem_engine.remember("Always run the linter before committing", "ada", "invariant", now=NOW)
    tiers = mem_engine.tiers("ada", rebuild=True, now=NOW)
    back = wire.load_tiers(through_json(wire.dump_tiers(tiers)))
    assert back.memories == tiers.memories and back.memories


def test_errors_come_back_as_their_class() -> None:
    for error in (NotFoundError("gone"), PermissionDeniedError("no"),
                  InputTooLargeError("big"), StoreError("down"),
                  KeyChangedError("again")):  # fmt: skip
        back = wire.load_error(through_json(error.to_dict()), error.http_status)
        assert type(back) is type(error) and back.message == error.message
    unknown = wire.load_error({"error": "os.system", "message": "x"}, 404)
    assert type(unknown) is NotFoundError  # a code is looked up in the tree, never imported
