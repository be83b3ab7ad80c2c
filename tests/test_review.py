"""The inspector's engine-side reads and writes, without a browser: the review queue of
conflicting and duplicate pairs and their resolution in one transaction (``review.py``),
the recent contexts with their feedback (``activity.py``) and the write-free preview of a
context (``preview.py``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.corrections import CONFLICT_KINDS
from engrain.embed import HashEmbedder
from engrain.errors import NotFoundError, StoreError, ValidationError
from engrain.store import MemoryStore
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings

LATER = NOW + timedelta(hours=1)


def _pair(engine: Engine, user: str = "ada") -> tuple[str, str]:
    """Two conflicting facts (the second newer); their ids, older first."""
    old = engine.remember("The API listens on port 8080", user, now=NOW).memory_id
    new = engine.remember("The API listens on port 9090", user, now=LATER).memory_id
    assert old and new
    return old, new


def _snapshot(engine: Engine, user: str = "ada") -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "embedding"} for r in engine.export_records(user)]


def test_a_conflict_is_queued_once_newest_first_with_its_reason(mem_engine: Engine) -> None:
    old, new = _pair(mem_engine)
    queue = mem_engine.review("ada")
    assert [(p.ids, p.reason, p.detail) for p in queue] == [
        ((new, old), "conflict", "different numbers")
    ]
    assert mem_engine.review("bob") == []


def test_near_duplicates_are_queued_but_different_subjects_are_not(mem_engine: Engine) -> None:
    a = mem_engine.remember("Deploys happen on Fridays after the standup", "ada", "decision",
                            now=NOW).memory_id  # fmt: skip
    b = mem_engine.remember("Deploys happen on Fridays after standup", "ada", "fact",
                            now=LATER).memory_id  # fmt: skip
    mem_engine.remember("Service 3 runs on port 8033", "ada", now=NOW)
    mem_engine.remember("Service 5 runs on port 8033", "ada", now=LATER)
    queue = mem_engine.review("ada")
    assert [(p.ids, p.reason) for p in queue] == [((b, a), "duplicate")]
    assert queue[0].similarity >= 0.85


def test_the_queue_keeps_to_the_project(mem_engine: Engine) -> None:
    mem_engine.remember("The API listens on port 8080", "ada", project="web", now=NOW)
    mem_engine.remember("The API listens on port 9090", "ada", project="web", now=LATER)
    assert len(mem_engine.review("ada", project="web")) == 1
    assert mem_engine.review("ada", project="billing") == []
    assert len(mem_engine.review("ada", limit=1)) == 1


def test_keep_forgets_the_other_and_clears_the_flag(engine: Engine) -> None:
    old, new = _pair(engine)
    done = engine.resolve(new, old, "ada", "keep")
    assert done.forgotten == (old,) and done.kept == (new,)
    with pytest.raises(NotFoundError):
        engine.get(old, "ada")
    assert "conflicts_with" not in engine.get(new, "ada").provenance.metadata
    assert engine.review("ada") == []


def test_correct_supersedes_the_other_which_is_never_injected_again(engine: Engine) -> None:
    old, new = _pair(engine)
    done = engine.resolve(new, old, "ada", "correct", now=LATER)
    assert done.superseded == (old,)
    corrected, kept = engine.get(old, "ada"), engine.get(new, "ada")
    assert corrected.superseded_by == new
    assert kept.provenance.metadata.get("corrects") == old
    assert "conflicts_with" not in kept.provenance.metadata
    assert "conflicts_with" not in corrected.provenance.metadata
    assert engine.review("ada") == []
    ctx = engine.context("Which port does the API listen on?", "ada", token_budget=500)
    assert "9090" in ctx.text and "8080" not in ctx.text


def test_keeping_both_clears_the_flag_and_the_pair_does_not_come_back(
    mem_engine: Engine,
) -> None:
    old, new = _pair(mem_engine)
    mem_engine.resolve(new, old, "ada", "both")
    assert mem_engine.review("ada") == []
    for memory_id in (old, new):
        assert "conflicts_with" not in mem_engine.get(memory_id, "ada").provenance.metadata
    a = mem_engine.remember("Deploys happen on Fridays after the standup", "ada", "decision",
                            now=NOW).memory_id  # fmt: skip
    b = mem_engine.remember("Deploys happen on Fridays after standup", "ada", "fact",
                            now=LATER).memory_id  # fmt: skip
    assert a and b and len(mem_engine.review("ada")) == 1
    mem_engine.resolve(b, a, "ada", "both")
    assert mem_engine.review("ada") == []
    assert mem_engine.get(a, "ada").provenance.metadata["distinct_from"] == [b]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"resolution": "merge"}, ValidationError),
        ({"other_id": "missing"}, NotFoundError),
        ({"user_id": "bob"}, NotFoundError),
        ({"same": True}, ValidationError),
    ],
)
def test_a_refused_resolution_writes_nothing(
    mem_engine: Engine, change: dict[str, Any], error: type[Exception]
) -> None:
    old, new = _pair(mem_engine)
    args: dict[str, Any] = {"memory_id": new, "other_id": old, "user_id": "ada",
                            "resolution": "keep"}  # fmt: skip
    if change.pop("same", False):
        args["other_id"] = new
    args.update(change)
    before = _snapshot(mem_engine)
    with pytest.raises(error):
        mem_engine.resolve(**args)
    assert _snapshot(mem_engine) == before


def test_correcting_a_superseded_memory_is_refused(mem_engine: Engine) -> None:
    old, new = _pair(mem_engine)
    third = mem_engine.remember("Billing runs nightly", "ada", now=LATER).memory_id
    assert third
    mem_engine.resolve(new, old, "ada", "correct")
    before = _snapshot(mem_engine)
    with pytest.raises(ValidationError, match="already superseded"):
        mem_engine.resolve(third, old, "ada", "correct")
    assert _snapshot(mem_engine) == before


def test_a_resolution_is_one_write_and_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    store = MemoryStore()
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    old, new = _pair(eng)
    before = _snapshot(eng)
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        raise StoreError("disk full")

    store.write = failing  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        eng.resolve(new, old, "ada", "correct")
    assert calls == [1]
    del store.write
    assert _snapshot(eng) == before


# -- activity ----------------------------------------------------------------------------------


def test_contexts_come_back_newest_first_with_their_feedback(engine: Engine) -> None:
    _pair(engine)
    engine.remember("Deploys happen on Fridays", "ada", "decision", now=NOW)
    first = engine.context("Which port does the API listen on?", "ada", token_budget=500,
                           now=NOW)  # fmt: skip
    second = engine.context("When do deploys happen?", "ada", token_budget=500, now=LATER)
    engine.feedback("ada", first.id, helpful=True)
    records = engine.contexts("ada")
    assert [r.id for r in records] == [second.id, first.id]
    assert records[1].feedback == (1.0,)
    assert records[0].feedback == ()
    assert [m.id for m in records[1].memories] == [m.id for m in first.memories]
    assert records[1].at == NOW
    assert engine.contexts("bob") == []
    assert [r.id for r in engine.contexts("ada", limit=1)] == [second.id]


def test_contexts_keep_to_the_project_and_count_forgotten_memories(mem_engine: Engine) -> None:
    web = mem_engine.remember("The web API listens on port 8080", "ada", project="web", now=NOW)
    mem_engine.remember("Billing invoices are gapless", "ada", project="billing", now=NOW)
    ctx = mem_engine.context("Which port does the web API listen on?", "ada", project="web",
                             token_budget=500, now=NOW)  # fmt: skip
    assert ctx.memories
    assert [r.id for r in mem_engine.contexts("ada", project="web")] == [ctx.id]
    assert mem_engine.contexts("ada", project="billing") == []
    mem_engine.forget([web.memory_id or ""], "ada")
    assert mem_engine.contexts("ada")[0].forgotten == 1


# -- preview -----------------------------------------------------------------------------------


def test_a_preview_writes_nothing_and_shows_what_context_gives(engine: Engine) -> None:
    _pair(engine)
    message = "Which port does the API listen on?"
    before = _snapshot(engine)
    revision = engine.store.revision("ada")
    shown = engine.preview(message, "ada", token_budget=500, now=LATER)
    assert _snapshot(engine) == before
    assert engine.store.revision("ada") == revision
    assert engine.contexts("ada") == []
    assert shown.tier == 3 and not shown.fallback and shown.budget == 500
    assert shown.gated.decisions and any(d.selected for d in shown.gated.decisions)
    served = engine.context(message, "ada", token_budget=500, now=LATER)
    assert shown.text == served.text
    assert [m.id for m in shown.memories] == [m.id for m in served.memories]


def test_a_small_model_previews_its_tier(mem_engine: Engine) -> None:
    mem_engine.remember("Always run the linter before committing", "ada", "invariant", now=NOW)
    message = "How should I prepare a commit for review in this repository?"
    stale = mem_engine.preview(message, "ada", model="gpt-4", now=LATER)
    assert (stale.tier, stale.fallback, stale.budget) == (1, True, 480)
    mem_engine.tiers("ada", rebuild=True, now=LATER)
    fresh = mem_engine.preview(message, "ada", model="gpt-4", now=LATER)
    assert (fresh.tier, fresh.fallback) == (1, False)
    assert fresh.text == mem_engine.context(message, "ada", model="gpt-4", now=LATER).text
    assert "linter" in fresh.text
    with pytest.raises(ValidationError):
        mem_engine.preview(message, "ada", context_window=0)


def _scanned(engine: Engine, user: str = "ada") -> set[frozenset[str]]:
    """The conflicting pairs a pass over every active memory finds (the reference)."""
    active = {
        m.id: m
        for m in engine.store.query(user)
        if m.superseded_by is None and not m.compressed and m.kind in CONFLICT_KINDS
    }
    return {frozenset((m.id, other)) for m in active.values()
            for other in m.provenance.metadata.get("conflicts_with") or ()
            if other in active and other != m.id}  # fmt: skip


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_the_conflicts_found_are_exactly_a_full_scans_after_each_change(
    backend: str, tmp_path: Path
) -> None:
    """New conflicts, each resolution, a forget, an edit and a mute: after every change the
    queue's conflicts are the pairs a scan of every memory finds."""
    store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "r.db")
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    try:
        for i in range(6):
            for port in (8000 + i, 9000 + i):
                engine.remember(f"Service {i} listens on port {port}", "ada", now=LATER)
        engine.remember("Coffee is served at nine", "ada", now=NOW)

        def check() -> list[tuple[str, str]]:
            found = [p.ids for p in engine.review("ada") if p.reason == "conflict"]
            assert {frozenset(i) for i in found} == _scanned(engine)
            assert len(found) == len(set(found))
            return found

        pairs = check()
        assert len(pairs) == 6
        steps = [
            lambda a, b: engine.resolve(a, b, "ada", "keep"),
            lambda a, b: engine.resolve(a, b, "ada", "both"),
            lambda a, b: engine.resolve(a, b, "ada", "correct"),
            lambda a, b: engine.forget(a, "ada"),
            lambda a, b: engine.update(b, "ada", content="Service listens on port 7000"),
            lambda a, b: engine.mute(a, "ada", muted=True),
        ]
        for step in steps:
            first, second = check()[0]
            step(first, second)
            check()
        engine.remember("Service 9 listens on port 8009", "ada", now=LATER)
        engine.remember("Service 9 listens on port 9009", "ada", now=LATER)
        check()
    finally:
        engine.close()


@pytest.mark.parametrize(
    "value", [10**5000, -(10**4400), 7, None], ids=["5000-digits", "minus-4401", "7", "None"]
)
def test_a_resolution_that_is_no_name_is_invalid_input_even_past_the_digit_limit(
    value: object,
) -> None:
    """An int too long to print (found by the hypothesis sweep of session 25: ``resolve``
    with ``resolution=`` a 5,000-digit int raised a bare ``ValueError`` from the message)."""
    from engrain.review import Resolution

    with pytest.raises(ValidationError, match="must be one of keep, correct, both, not "):
        Resolution.parse(value)
