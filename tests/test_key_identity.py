"""A key the caller gives ``remember`` is an identity (docs/decisions.md, session 23).

An item with an explicit key K updates the live memory holding K or is stored as a new
memory holding K; it never merges into a near-duplicate holding another key (or none).
Before, a keyed ``remember`` under a key no memory held fell through to the near-duplicate
merge: a text close to another key's memory of the same kind updated *that* memory, which
kept its own key, so K never existed and the other key's memory silently changed content
(docs/concurrency.md, "Noticed, left alone"). A keyless item still merges into a keyed
near-duplicate: a restated preference updates the one entry. Each test runs on the
in-memory, SQLite and PostgreSQL stores (``engine``), and over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from engrain import Engine
from engrain.model import Memory

from .conftest import NOW
from .test_server import Service

pytestmark = pytest.mark.filterwarnings("ignore::engrain.validate.UserIdWarning")

USER = "ada"
DEPLOY = "We deploy the web app every Friday afternoon"


def _live(engine: Engine, user: str = USER) -> list[Memory]:
    return [m for m in engine.list(user) if m.superseded_by is None]


def _history(memory: Memory) -> list[str]:
    return [h["content"] for h in memory.provenance.metadata.get("history", [])]


def test_a_near_duplicate_under_another_key_is_a_memory_of_its_own(engine: Engine) -> None:
    first = engine.remember(DEPLOY, USER, "fact", key="deploy-day", now=NOW)
    second = engine.remember(DEPLOY + "!", USER, "fact", key="release-day", now=NOW)
    assert (first.action, second.action) == ("stored", "stored")
    assert second.memory_id != first.memory_id
    by_key = {m.key: m for m in _live(engine)}
    assert sorted(by_key) == ["deploy-day", "release-day"]
    assert by_key["deploy-day"].content == DEPLOY  # the other key's memory is untouched
    assert _history(by_key["deploy-day"]) == []
    assert by_key["release-day"].content == DEPLOY + "!"


def test_a_near_duplicate_procedural_item_under_another_key_is_kept(engine: Engine) -> None:
    engine.remember("run the tests with make test", USER, "golden_path", key="test", now=NOW)
    out = engine.remember("run the tests with make test.", USER, "golden_path", key="check",
                          now=NOW)  # fmt: skip
    assert out.action == "stored"
    assert sorted(m.key or "" for m in _live(engine)) == ["check", "test"]


def test_a_keyed_item_does_not_merge_into_a_keyless_near_duplicate(engine: Engine) -> None:
    """The keyless memory cannot take the key (nothing claims it for that memory), and
    merging into it would leave the key held by no memory."""
    engine.remember(DEPLOY, USER, "fact", now=NOW)
    out = engine.remember(DEPLOY + "!", USER, "fact", key="deploy-day", now=NOW)
    assert out.action == "stored"
    assert sorted((m.key or "", m.content) for m in _live(engine)) == [
        ("", DEPLOY), ("deploy-day", DEPLOY + "!")]  # fmt: skip


def test_a_keys_new_value_replaces_it_even_when_it_disagrees(engine: Engine) -> None:
    """A fact under a key it already holds updates that memory, the old value in its
    history: before, a disagreeing value was stored beside it, two live memories under one
    key (both flagged as conflicting)."""
    first = engine.remember("The team deploys on Friday", USER, "fact", key="deploy-day", now=NOW)
    second = engine.remember("The team does not deploy on Friday", USER, "fact",
                             key="deploy-day", now=NOW)  # fmt: skip
    assert (second.action, second.memory_id) == ("merged", first.memory_id)
    (memory,) = _live(engine)
    assert (memory.key, memory.content) == ("deploy-day", "The team does not deploy on Friday")
    assert _history(memory) == ["The team deploys on Friday"]


def test_a_keyless_restatement_still_updates_the_keyed_memory(engine: Engine) -> None:
    first = engine.remember("I prefer dark mode in every editor", USER, "preference",
                            key="theme", now=NOW)  # fmt: skip
    again = engine.remember("I prefer dark mode in every editor.", USER, "preference", now=NOW)
    fact = engine.remember(DEPLOY, USER, "fact", key="deploy-day", now=NOW)
    fact_again = engine.remember(DEPLOY + "!", USER, "fact", now=NOW)
    assert (again.action, again.memory_id) == ("merged", first.memory_id)
    assert (fact_again.action, fact_again.memory_id) == ("merged", fact.memory_id)
    assert sorted((m.key, m.content) for m in _live(engine)) == [
        ("deploy-day", DEPLOY + "!"), ("theme", "I prefer dark mode in every editor.")]  # fmt: skip


def test_an_import_keeps_near_duplicate_records_under_their_keys(engine: Engine) -> None:
    records = [
        {"type": "remember", "user_id": USER, "content": DEPLOY, "kind": "fact",
         "key": "deploy-day"},
        {"type": "remember", "user_id": USER, "content": DEPLOY + "!", "kind": "fact",
         "key": "release-day"},
    ]  # fmt: skip
    engine.import_records(records, now=NOW)
    assert sorted(m.key or "" for m in _live(engine)) == ["deploy-day", "release-day"]


def test_a_restatement_of_a_muted_memory_stays_muted(engine: Engine) -> None:
    """The rule kept (docs/decisions.md): a mute is the user's word on that memory, and a
    restatement never unmutes it (``Item.carried``); the new text is the memory's content,
    the old one in its history, and ``Outcome`` names the muted memory."""
    text = "The staging database listens on port 5433 for tests"
    first = engine.remember(text, USER, "fact", now=NOW)
    assert first.memory_id is not None
    engine.mute(first.memory_id, USER)
    again = engine.remember(text + "!", USER, "fact", now=NOW)
    assert (again.action, again.memory_id) == ("merged", first.memory_id)
    (memory,) = _live(engine)
    assert memory.muted and memory.content == text + "!"


def test_over_http_a_near_duplicate_under_another_key_is_kept(tmp_path: Path) -> None:
    svc = Service(tmp_path)
    try:
        outs = [
            svc.call("POST", "/v1/memories", "bob", json={"user_id": "bob", "content": text,
                                                          "kind": "fact", "key": key})
            for text, key in ((DEPLOY, "deploy-day"), (DEPLOY + "!", "release-day"))
        ]  # fmt: skip
        assert [r.status_code for r in outs] == [201, 201], [r.text for r in outs]
        assert [r.json()["action"] for r in outs] == ["stored", "stored"]
        listed = svc.call("GET", "/v1/memories", "bob", params={"user_id": "bob"})
        assert listed.status_code == 200, listed.text
        body = listed.json()
        items = body["memories"] if isinstance(body, dict) else body
        assert sorted((m["key"], m["content"]) for m in items) == [
            ("deploy-day", DEPLOY), ("release-day", DEPLOY + "!")]  # fmt: skip
    finally:
        svc.close()
