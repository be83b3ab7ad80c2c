"""Issue 12's API gaps: time-neutral pins and mutes, usage on ``remember`` and on import,
superseding with any kind, dedup by kind, the spec's preference examples, and background
tier compiles on the request's own time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, Kind, MemoryType, NotFoundError, ValidationError
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore
from engrain.tiers import Tier

from .conftest import NOW, make_settings

OLD = NOW - timedelta(days=400)


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(settings=make_settings(tmp_path, correction_similarity=0.5),
               store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    yield e
    e.close()


def _id(engine: Engine, content: str, kind: str = "fact", **kw: Any) -> str:
    out = engine.remember(content, "ada", kind, **{"now": OLD, **kw})
    assert out.action == "stored", out
    return out.memory_id or ""


# -- pin, mute, update and time ------------------------------------------------------------


def test_pin_and_mute_leave_an_old_memory_old(eng: Engine) -> None:
    mid = _id(eng, "The billing service runs on port 8033")
    pinned = eng.pin(mid, "ada", now=NOW)
    assert pinned.pinned and pinned.updated_at == OLD
    assert eng.pin(mid, "ada").updated_at == OLD  # the wall clock does not date it either
    muted = eng.mute(mid, "ada", now=NOW)
    assert muted.muted and muted.updated_at == OLD
    assert eng.mute(mid, "ada", False, now=NOW).updated_at == OLD
    rated = eng.update(mid, "ada", usefulness=0.9, pinned=False, now=NOW)
    assert rated.usefulness == 0.9 and rated.updated_at == OLD


def test_an_edit_dates_the_memory_with_now(eng: Engine) -> None:
    mid = _id(eng, "The billing service runs on port 8033")
    later = NOW + timedelta(hours=3)
    edited = eng.update(mid, "ada", content="The billing service runs on port 8034", now=later)
    assert edited.updated_at == later
    # a flag together with an edit: the edit dates it
    assert eng.update(mid, "ada", importance=0.4, pinned=True, now=NOW).updated_at == NOW


def test_pin_and_mute_validate_now(eng: Engine) -> None:
    mid = _id(eng, "The billing service runs on port 8033")
    with pytest.raises(ValidationError, match="now"):
        eng.pin(mid, "ada", now="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="now"):
        eng.mute(mid, "ada", now=5)  # type: ignore[arg-type]
    assert not eng.get(mid, "ada").pinned and not eng.get(mid, "ada").muted


# -- usage and mutes on remember -----------------------------------------------------------


def test_remember_carries_usage_and_mute(eng: Engine) -> None:
    used = _id(eng, "Deploys go out on Tuesdays after the standup", "decision", access_count=12)
    quiet = _id(eng, "The staging database is reset every Sunday night", muted=True)
    assert eng.get(used, "ada").access_count == 12
    assert eng.get(quiet, "ada").muted and eng.get(quiet, "ada").access_count == 0
    ctx = eng.context("When is the staging database reset?", "ada", token_budget=800, now=NOW)
    assert quiet not in {m.id for m in ctx.memories}


@pytest.mark.parametrize(
    ("field", "value"),
    [("access_count", -1), ("access_count", 1.5), ("access_count", True),
     ("access_count", 2**70), ("muted", "no"), ("muted", 1)],
)  # fmt: skip
def test_remember_refuses_bad_usage_and_mute(eng: Engine, field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        eng.remember("Deploys go out on Tuesdays", "ada", **{field: value})  # type: ignore[arg-type]
    assert eng.list("ada") == []


def test_a_restatement_adds_its_pin_and_usage_never_removes_them(eng: Engine) -> None:
    first = _id(eng, "My timezone is EST", pinned=True, access_count=5)
    again = eng.remember("My timezone is EST timezone", "ada", access_count=9, now=NOW)
    assert again.action == "merged" and again.memory_id == first
    memory = eng.get(first, "ada")
    assert memory.pinned and memory.access_count == 9
    eng.remember("My timezone is EST", "ada", access_count=2, muted=True, now=NOW)
    memory = eng.get(first, "ada")
    assert memory.pinned and memory.access_count == 9 and memory.muted


# -- corrects= with any kind ---------------------------------------------------------------


def test_a_decision_supersedes_a_decision_and_stays_a_decision(eng: Engine) -> None:
    old = _id(eng, "We deploy the API with blue-green releases on ECS", "decision")
    out = eng.remember("We deploy the API with canary releases on ECS", "ada", "decision",
                       corrects=old, now=NOW)  # fmt: skip
    assert out.action == "stored" and out.reason == f"supersedes {old}"
    new = eng.get(out.memory_id or "", "ada")
    assert new.kind is Kind.DECISION and new.memory_type is MemoryType.SEMANTIC
    assert new.provenance.metadata["corrects"] == old
    assert eng.get(old, "ada").superseded_by == new.id
    assert eng.get(old, "ada").content.endswith("blue-green releases on ECS")  # not merged
    ctx = eng.context("How do we deploy the API on ECS?", "ada", token_budget=800, now=NOW)
    assert old not in {m.id for m in ctx.memories}


def test_corrects_names_an_existing_active_memory(eng: Engine) -> None:
    old = _id(eng, "We deploy with blue-green releases", "decision")
    eng.remember("We deploy with canary releases", "ada", "decision", corrects=old, now=NOW)
    with pytest.raises(ValidationError, match="superseded"):
        eng.remember("We deploy with rolling releases", "ada", "decision", corrects=old)
    with pytest.raises(NotFoundError):
        eng.remember("We deploy with rolling releases", "ada", "pattern", corrects="nope")


# -- dedup by kind -------------------------------------------------------------------------


def test_an_invariant_restating_a_pattern_is_not_merged_into_it(eng: Engine) -> None:
    pattern = _id(eng, "Wrap every Stripe call in the retry helper", "pattern")
    out = eng.remember("Wrap every Stripe call in the retry helper!", "ada", "invariant",
                       now=NOW)  # fmt: skip
    assert out.action == "stored" and out.memory_id != pattern
    kinds = sorted(m.kind.value for m in eng.list("ada"))
    assert kinds == ["invariant", "pattern"]


def test_near_duplicates_of_the_same_kind_still_merge(eng: Engine) -> None:
    pattern = _id(eng, "Wrap every Stripe call in the retry helper", "pattern")
    out = eng.remember("Wrap every Stripe call in the retry helper!", "ada", "pattern", now=NOW)
    assert out.action == "merged" and out.memory_id == pattern


def test_free_text_restating_a_learning_updates_it(eng: Engine) -> None:
    for other in ("Priya is the product manager", "Lunch is at noon on Fridays",
                  "The office wifi is called GuestNet"):  # fmt: skip
        _id(eng, other)  # so the restatement is novel enough to be kept
    rule = _id(eng, "Always run the Alembic migrations on Postgres 16 before deploying.",
               "invariant")  # fmt: skip
    report = eng.ingest("Always run the Alembic migrations on Postgres 16 before deploying!",
                        "ada", now=NOW)  # fmt: skip
    assert [o.action for o in report.outcomes] == ["merged"]
    assert report.outcomes[0].memory_id == rule
    assert eng.get(rule, "ada").kind is Kind.INVARIANT


# -- the spec's preference examples --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [("Communication style: direct, technical, no preamble.", "communication-style"),
     ("User prefers Jellyfin over Plex", "jellyfin-plex")],
)  # fmt: skip
def test_the_specs_preference_examples_are_procedural(eng: Engine, text: str, key: str) -> None:
    report = eng.ingest(text, "ada", now=NOW)
    [outcome] = report.outcomes
    assert outcome.action == "stored" and outcome.memory_type is MemoryType.PROCEDURAL
    memory = eng.get(outcome.memory_id or "", "ada")
    assert memory.kind is Kind.PREFERENCE and memory.key == key


def test_a_new_communication_style_replaces_the_old(eng: Engine) -> None:
    first = eng.ingest("Communication style: direct, technical, no preamble.", "ada", now=OLD)
    second = eng.ingest("Communication style: friendly and detailed, with examples.", "ada",
                        now=NOW)  # fmt: skip
    assert second.outcomes[0].action == "merged"
    assert second.outcomes[0].memory_id == first.outcomes[0].memory_id


# -- importing hand-written memories -------------------------------------------------------


def _said(content: str, **fields: Any) -> dict[str, Any]:
    return {"type": "remember", "user_id": "ada", "content": content, **fields}


def test_remember_records_import_usage_pins_mutes_and_time(eng: Engine) -> None:
    result = eng.import_records([
        _said("Invoice numbers are gapless per tenant", kind="invariant", pinned=True,
              access_count=14, at="2025-03-01T09:00:00Z", domains=["billing"]),
        _said("The v1 PDF renderer is retired", muted=True, at="2025-04-01T09:00:00+00:00"),
        _said("I prefer pytest with plain asserts", kind="preference", project="api"),
    ], now=NOW)  # fmt: skip
    assert (result.stored, result.merged, result.discarded) == (3, 0, 0)
    by_content = {m.content: m for m in eng.list("ada")}
    rule = by_content["Invoice numbers are gapless per tenant"]
    assert rule.kind is Kind.INVARIANT and rule.pinned and rule.access_count == 14
    assert rule.created_at == datetime(2025, 3, 1, 9, tzinfo=UTC) and rule.domains == ("billing",)
    assert by_content["The v1 PDF renderer is retired"].muted
    pref = by_content["I prefer pytest with plain asserts"]
    assert pref.memory_type is MemoryType.PROCEDURAL and pref.project == "api"
    assert pref.created_at == NOW


def test_remember_records_plan_in_order_like_sequential_calls(eng: Engine) -> None:
    result = eng.import_records([
        _said("The team lunch is at 12:00 on Fridays", at="2025-01-01T12:00:00Z"),
        _said("The team lunch is at 12:00 on Fridays!", at="2025-01-02T12:00:00Z"),
        _said("Actually, the team lunch moved to 12:30 on Fridays", kind="correction",
              at="2025-02-01T12:00:00Z"),
    ], now=NOW)  # fmt: skip
    assert (result.stored, result.merged) == (2, 1)
    memories = {m.kind: m for m in eng.list("ada")}
    assert memories[Kind.FACT].superseded_by == memories[Kind.CORRECTION].id


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"access_count": -3}, "access_count"), ({"pined": True}, "pined"),
     ({"at": "last tuesday"}, "at"), ({"kind": "whim"}, "kind"), ({"muted": "yes"}, "muted"),
     ({"user_id": None}, "user_id")],
)  # fmt: skip
def test_bad_remember_records_are_refused_and_nothing_is_written(
    eng: Engine, fields: dict[str, Any], named: str
) -> None:
    records = [_said("A fine first record"), _said("The second record", **fields)]
    with pytest.raises(ValidationError, match=f"record 2: .*{named}"):
        eng.import_records(records, now=NOW)
    assert eng.list("ada") == []


# -- background tier compiles use the request's time ---------------------------------------


def test_a_scheduled_tier_rebuild_compiles_as_of_the_requests_now(eng: Engine) -> None:
    then = datetime(2021, 6, 1, 12, tzinfo=UTC)
    decision = eng.remember("We chose PostgreSQL over MySQL for the ledger tables", "ada",
                            "decision", now=then - timedelta(days=2)).memory_id  # fmt: skip
    ctx = eng.context("Which database do the ledger tables use?", "ada", context_window=8_000,
                      now=then)  # fmt: skip
    assert ctx.fallback  # nothing compiled yet: tier 3 answered, a rebuild was scheduled
    eng.wait()
    compiled = eng.tier_cache.stored("ada", None)
    assert compiled is not None and compiled.compiled_at == then
    # as of then the decision is two days old, not years: it survives the decay filter
    assert decision in compiled.tiers[Tier.DNA].memory_ids
