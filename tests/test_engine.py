"""The engine's public behaviour over every backend, with the deterministic embedder."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from engrain import (
    EmptyInputError,
    Engine,
    InputTooLargeError,
    Kind,
    MemoryType,
    NotFoundError,
    StoreError,
    Turn,
    UnknownValueError,
    ValidationError,
)
from engrain.embed import HashEmbedder
from engrain.model import KIND_DEFAULT_CONFIDENCE
from engrain.store import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

# -- the learning path ---------------------------------------------------------------------


def test_remember_stores_as_given(engine: Engine) -> None:
    out = engine.remember("Always validate input with Zod", "ada", "invariant", domains=["API"],
                          project="shop", now=NOW)  # fmt: skip
    assert out.action == "stored"
    memory = engine.get(out.memory_id or "", "ada")
    assert memory.content == "Always validate input with Zod"
    assert memory.kind is Kind.INVARIANT
    assert memory.memory_type is MemoryType.SEMANTIC
    assert memory.domains == ("api",)
    assert memory.project == "shop"
    assert memory.created_at == NOW
    assert memory.embedding is not None and memory.embedding.shape == (384,)


@pytest.mark.parametrize(
    ("kind", "confidence"),
    [("preference", 1.0), ("fact", 1.0), ("correction", 1.0), ("context", 0.8)],
)
def test_default_confidence_per_kind_follows_adr_002(
    mem_engine: Engine, kind: str, confidence: float
) -> None:
    assert KIND_DEFAULT_CONFIDENCE[Kind(kind)] == confidence
    out = mem_engine.remember(f"a {kind} worth keeping", "ada", kind, now=NOW)
    assert mem_engine.get(out.memory_id or "", "ada").confidence == confidence


def test_remember_near_duplicate_updates_existing(engine: Engine) -> None:
    first = engine.remember("My timezone is EST", "ada", now=NOW)
    later = NOW + timedelta(days=1)
    second = engine.remember("My timezone is EST timezone", "ada", now=later)
    assert second.action == "merged" and second.memory_id == first.memory_id
    memories = engine.list("ada")
    assert len(memories) == 1
    assert memories[0].content == "My timezone is EST timezone"
    assert memories[0].updated_at == later
    assert memories[0].provenance.metadata["history"][0]["content"] == "My timezone is EST"


def test_dedup_only_against_same_kind(engine: Engine) -> None:
    engine.remember("My timezone is EST", "ada", "fact", now=NOW)
    assert engine.remember("My timezone is EST", "ada", "event", now=NOW).action == "stored"
    # same memory type (semantic), another kind: kept apart, each with its own kind
    assert engine.remember("My timezone is EST", "ada", "invariant", now=NOW).action == "stored"
    assert engine.remember("My timezone is EST!", "ada", "fact", now=NOW).action == "merged"


def test_procedural_memories_are_a_key_value_store(engine: Engine) -> None:
    a = engine.remember("I prefer tabs over spaces", "ada", "preference", now=NOW)
    b = engine.remember("Use four spaces, never tabs", "ada", "preference", key="tabs-spaces",
                        now=NOW + timedelta(hours=1))  # fmt: skip
    assert b.action == "merged" and b.memory_id == a.memory_id
    [memory] = engine.list("ada", memory_type="procedural")
    assert memory.key == "tabs-spaces"
    assert memory.content == "Use four spaces, never tabs"


# -- the ingest path -----------------------------------------------------------------------


def test_ingest_reports_every_chunk(engine: Engine) -> None:
    report = engine.ingest(
        "I prefer concise answers with code first.\n\nWe deployed the billing service to "
        "Frankfurt on 3 March after the Postgres 16 upgrade.",
        "ada", "s1", now=NOW,
    )  # fmt: skip
    assert [o.action for o in report.outcomes] == ["stored"]  # merged into one chunk (< 50)
    [memory] = engine.list("ada")
    assert memory.memory_type is MemoryType.PROCEDURAL  # a preference signal routes it
    assert memory.session_id == "s1"


def test_ingest_discards_low_importance_with_a_reason(mem_engine: Engine) -> None:
    for i in range(3):
        mem_engine.ingest(f"ok sounds good see you then {i}", "ada", now=NOW)
    count = len(mem_engine.list("ada"))
    report = mem_engine.ingest("ok sounds good see you then", "ada", now=NOW)
    [outcome] = report.outcomes
    assert outcome.action == "discarded"
    assert outcome.importance is not None and outcome.importance < 0.3
    assert "below 0.3" in (outcome.reason or "")
    assert len(mem_engine.list("ada")) == count


def test_memory_type_hint_overrides_routing(engine: Engine) -> None:
    engine.ingest("I prefer tabs over spaces", "ada", memory_type_hint="episodic", now=NOW)
    assert engine.list("ada")[0].memory_type is MemoryType.EPISODIC


def test_ingest_near_duplicate_within_one_call_merges(engine: Engine) -> None:
    block = (
        "The deploy pipeline for the payments service runs on GitHub Actions with 12 jobs, "
        "builds the Docker image, runs the integration suite against Postgres and then "
        "promotes the release to the Frankfurt cluster after a manual approval step, "
        "and posts the changelog with the build number to the #releases channel."
    )
    report = engine.ingest(f"{block}\n\n{block} Again.", "ada", now=NOW)
    assert [o.action for o in report.outcomes] == ["stored", "merged"]
    assert report.merged == report.stored
    [memory] = engine.list("ada")
    assert memory.content == f"{block} Again."


def test_exact_repeat_is_discarded_as_not_novel(engine: Engine) -> None:
    text = "The payments service runs on GitHub Actions with 12 jobs in Frankfurt."
    engine.ingest(text, "ada", now=NOW)
    [outcome] = engine.ingest(text, "ada", now=NOW).outcomes
    assert outcome.action == "discarded" and "novelty 0.00" in (outcome.reason or "")


def test_conversation_path_keeps_turn_ids_and_event_times(engine: Engine) -> None:
    t0 = NOW - timedelta(days=30)
    turns = [
        Turn("Caroline", "I went to the LGBTQ support group yesterday.", "D1:1", t0),
        Turn("Melanie", "That's great! How did it feel?", "D1:2", t0 + timedelta(minutes=1)),
        {"speaker": "Caroline", "text": "It was powerful, I felt accepted.", "dia_id": "D1:3",
         "at": (t0 + timedelta(minutes=2)).isoformat()},
    ]  # fmt: skip
    report = engine.ingest_conversation(turns, "conv", "session_1", now=NOW)
    stored = engine.get(report.stored[0], "conv")
    assert stored.provenance.turn_ids == ("D1:1", "D1:2", "D1:3")
    assert stored.event_at == t0
    assert stored.memory_type is MemoryType.EPISODIC
    assert stored.content.startswith("Caroline: I went to the LGBTQ support group")
    assert report.outcomes[0].turn_ids == ("D1:1", "D1:2", "D1:3")


# -- recall --------------------------------------------------------------------------------


def _seed(engine: Engine) -> dict[str, str]:
    ids = {}
    for name, text in {
        "port": "The API server listens on port 8080 behind nginx",
        "db": "The billing service stores invoices in PostgreSQL",
        "cat": "Ada has a cat called Turing who likes boxes",
        "ci": "CI runs the test suite on every pull request",
    }.items():
        ids[name] = engine.remember(text, "ada", "fact", now=NOW).memory_id or ""
    return ids


def test_recall_ranks_by_similarity_and_counts_tokens(engine: Engine) -> None:
    ids = _seed(engine)
    result = engine.recall("which port does the API server listen on", "ada", top_k=2)
    assert result.memories[0].id == ids["port"]
    assert len(result.memories) == 2
    assert result.total_tokens == sum(s.tokens for s in result.scored)
    assert result.budget_used == pytest.approx(result.total_tokens / 2000)


def test_recall_respects_token_budget(engine: Engine) -> None:
    _seed(engine)
    result = engine.recall("port API server", "ada", top_k=5, token_budget=12)
    assert result.total_tokens <= 12
    assert len(result.memories) == 1


def test_recall_filters_low_importance_compressed_and_types(engine: Engine) -> None:
    ids = _seed(engine)
    engine.update(ids["port"], "ada", importance=0.1)
    engine.store.write([engine.get(ids["db"], "ada").evolve(compressed=True)])
    result = engine.recall("API server port billing invoices", "ada", top_k=10)
    found = {m.id for m in result.memories}
    assert ids["port"] not in found and ids["db"] not in found
    with_compressed = engine.recall("billing invoices", "ada", top_k=10, include_compressed=True)
    assert ids["db"] in {m.id for m in with_compressed.memories}
    engine.remember("Last week we migrated CI to GitHub Actions", "ada", "event", now=NOW)
    only = engine.recall("CI", "ada", top_k=10, memory_types=["episodic"])
    assert [m.memory_type for m in only.memories] == [MemoryType.EPISODIC]


def test_recall_puts_relevant_procedural_first_and_caps_top_k(engine: Engine) -> None:
    _seed(engine)
    other = engine.remember("I prefer answers with code first", "ada", "preference", now=NOW)
    pref = engine.remember("I prefer the API server on a high port, never port 80", "ada",
                           "preference", now=NOW)  # fmt: skip
    result = engine.recall("which port does the API server listen on", "ada", top_k=2)
    assert result.memories[0].id == pref.memory_id
    assert other.memory_id not in {m.id for m in result.memories}  # leads only when relevant
    assert len(result.memories) == 2


def test_recall_never_returns_muted(engine: Engine) -> None:
    ids = _seed(engine)
    engine.mute(ids["port"], "ada")
    result = engine.recall("API server port", "ada", top_k=10)
    assert ids["port"] not in {m.id for m in result.memories}
    engine.mute(ids["port"], "ada", muted=False)
    assert ids["port"] in {m.id for m in engine.recall("API port", "ada", top_k=10).memories}


def test_recall_increments_access_counts(engine: Engine) -> None:
    ids = _seed(engine)
    engine.recall("API server port", "ada", top_k=1, now=NOW)
    engine.recall("API server port", "ada", top_k=1, now=NOW + timedelta(hours=1))
    memory = engine.get(ids["port"], "ada")
    assert memory.access_count == 2
    assert memory.last_accessed_at == NOW + timedelta(hours=1)
    assert engine.get(ids["cat"], "ada").access_count == 0


def test_recall_is_scoped_to_the_user(engine: Engine) -> None:
    _seed(engine)
    engine.remember("Bob's API listens on port 9090", "bob", now=NOW)
    result = engine.recall("API port", "bob", top_k=10)
    assert {m.user_id for m in result.memories} == {"bob"}
    assert engine.recall("API port", "nobody").memories == []


def test_rerank_hook_replaces_scores_and_falls_back(store: MemoryStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engrain.embed import HashEmbedder

    from .conftest import make_settings

    calls: list[int] = []

    def prefer_cats(query: str, texts: list[str]) -> list[float]:
        calls.append(len(texts))
        return [1.0 if "cat" in t else 0.0 for t in texts]

    settings = make_settings(tmp_path, reranker_enabled=True)
    engine = Engine(settings=settings, store=store, embedder=HashEmbedder(), reranker=prefer_cats)
    ids = _seed(engine)
    result = engine.recall("API server port", "ada", top_k=1)
    assert calls and result.memories[0].id == ids["cat"]

    def broken(query: str, texts: list[str]) -> list[float]:
        raise RuntimeError("model missing")

    engine.reranker = broken
    result = engine.recall("API server port", "ada", top_k=1)
    assert result.memories[0].id == ids["port"]  # weighted blend: similarity dominates


# -- context -------------------------------------------------------------------------------


def test_context_renders_the_spec_block(engine: Engine) -> None:
    _seed(engine)
    engine.remember("I prefer CI pipelines on GitHub Actions with cached steps", "ada",
                    "preference", now=NOW)  # fmt: skip
    engine.remember("Migrated CI to GitHub Actions", "ada", "event",
                    event_at=NOW - timedelta(days=2), now=NOW)  # fmt: skip
    ctx = engine.context("CI pipeline on GitHub Actions", "ada", top_k=3)
    lines = ctx.text.splitlines()
    assert lines[0] == "<memory>" and lines[-1] == "</memory>"
    assert lines[1] == "[PROCEDURAL] I prefer CI pipelines on GitHub Actions with cached steps"
    assert "[EPISODIC] 2026-01-13: Migrated CI to GitHub Actions" in lines
    # the whole block counts, wrapper and newlines included (issue 12)
    assert ctx.tokens == ctx.recall.total_tokens == count_tokens(ctx.text)
    assert len(ctx.id) == 32 and ctx.elapsed_ms >= 0


def test_context_is_empty_when_nothing_is_remembered(engine: Engine) -> None:
    ctx = engine.context("hello there", "nobody")
    assert ctx.text == "" and ctx.tokens == 0 and ctx.memories == []


# -- curation ------------------------------------------------------------------------------


def test_update_reembeds_new_content(engine: Engine) -> None:
    ids = _seed(engine)
    before = engine.get(ids["cat"], "ada")
    after = engine.update(ids["cat"], "ada", content="Ada's cat Turing sleeps in boxes")
    assert after.content_hash != before.content_hash
    assert before.embedding is not None and after.embedding is not None
    assert not np.allclose(before.embedding, after.embedding)
    with pytest.raises(ValidationError):
        engine.update(ids["cat"], "ada", colour="blue")
    with pytest.raises(ValidationError):
        engine.update(ids["cat"], "ada", confidence=1.5)


def test_forget_and_not_found(engine: Engine) -> None:
    ids = _seed(engine)
    assert engine.forget([ids["cat"], "missing"], "ada") == 1
    with pytest.raises(NotFoundError):
        engine.get(ids["cat"], "ada")
    with pytest.raises(NotFoundError):
        engine.get(ids["port"], "bob")  # another user's id is not found, not leaked


def test_pin_sets_the_flag(engine: Engine) -> None:
    ids = _seed(engine)
    assert engine.pin(ids["ci"], "ada").pinned
    assert not engine.pin(ids["ci"], "ada", pinned=False).pinned


# -- bad input writes nothing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda e: e.ingest("   \n ", "ada"), EmptyInputError),
        (lambda e: e.ingest(42, "ada"), ValidationError),
        (lambda e: e.ingest("x" * 200_001, "ada"), InputTooLargeError),
        (lambda e: e.ingest("hello world", ""), EmptyInputError),
        (lambda e: e.ingest("hello world", "ada", memory_type_hint="semantik"), UnknownValueError),
        (lambda e: e.remember("hello world", "ada", kind="rumour"), UnknownValueError),
        (lambda e: e.remember("hello", "ada", metadata={"x": object()}), ValidationError),
        (lambda e: e.ingest_conversation([], "ada"), EmptyInputError),
        (
            lambda e: e.ingest_conversation([Turn("a", "fine"), Turn("b", " ")], "ada"),
            EmptyInputError,
        ),
        (lambda e: e.recall("", "ada"), EmptyInputError),
        (lambda e: e.recall("q", "ada", top_k=0), ValidationError),
    ],
)
def test_bad_input_raises_and_writes_nothing(engine: Engine, call, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as info:
        call(engine)
    assert info.value.http_status in (400, 413)
    assert engine.store.users() == []


def test_failed_batch_leaves_store_unchanged(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engrain.embed import HashEmbedder
    from engrain.store.sqlite import SQLiteStore

    from .conftest import make_settings

    store = SQLiteStore(tmp_path / "atomic.db")
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    engine.remember("An existing fact that must survive", "ada", now=NOW)
    before = [m.to_dict() for m in engine.list("ada")]
    rng = np.random.default_rng(7)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    text = "\n\n".join(
        f"Team {i} at Acme owns {i * 7} services: "
        + " ".join("".join(rng.choice(letters, size=6)) for _ in range(40))
        for i in range(6)
    )
    original = store.write

    def failing_write(upserts=(), deletes=(), **rest):  # type: ignore[no-untyped-def]
        # the fourth row breaks a NOT NULL constraint half-way through the batch
        broken = list(upserts)
        broken[3] = broken[3].evolve(content=None)
        return original(broken, deletes, **rest)

    monkeypatch.setattr(store, "write", failing_write)
    with pytest.raises(StoreError):
        engine.ingest(text, "ada", now=NOW)
    monkeypatch.undo()
    assert [m.to_dict() for m in engine.list("ada")] == before


def test_changing_to_a_longer_type_or_kind_is_found_by_filters(engine: Engine) -> None:
    out = engine.remember("Deploys go out on Tuesdays", "ada", "fact", now=NOW)
    assert len(engine.list("ada", kind="fact")) == 1  # the working set is built
    engine.update(out.memory_id or "", "ada", kind="golden_path", memory_type="procedural")
    assert [m.id for m in engine.list("ada", kind="golden_path")] == [out.memory_id]
    assert [m.id for m in engine.list("ada", memory_type="procedural")] == [out.memory_id]


def test_conversation_chunks_get_their_speakers_salience(mem_engine: Engine) -> None:
    turns = [Turn("Caroline", "I'm thrilled to make a family for kids who need one.", "D1:1")]
    [outcome] = mem_engine.ingest_conversation(turns, "conv", "s1", now=NOW).outcomes
    text_only = mem_engine.ingest("Caroline: I'm thrilled to make a family for the kids.",
                                  "other", now=NOW).outcomes[0]  # fmt: skip
    assert outcome.importance == pytest.approx(0.6 * 1.0 + 0.4 * 0.3)
    assert text_only.importance == pytest.approx(0.6 * 1.0)


def test_conversation_turns_below_the_threshold_are_kept_unless_told(tmp_path: Path) -> None:
    first = [Turn("", "we talked about the weather and the garden today and the roses", "t1")]
    echo = [Turn("", "the garden, the roses: we talked", "t2")]
    kept = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    kept.ingest_conversation(first, "u", "s1", now=NOW)
    [outcome] = kept.ingest_conversation(echo, "u", "s2", now=NOW).outcomes
    assert outcome.action == "stored" and outcome.importance is not None
    assert outcome.importance < 0.3
    assert outcome.reason is not None and "kept" in outcome.reason
    [memory] = kept.store.get("u", [outcome.memory_id or ""])
    assert memory.importance == outcome.importance and memory.provenance.turn_ids == ("t2",)
    # free text below the threshold is still discarded (the spec's discard)
    [text] = kept.ingest("the garden, the roses: we talked", "u", now=NOW).outcomes
    assert text.action == "discarded"

    strict = Engine(settings=make_settings(tmp_path, conversation_discard=True),
                    store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    strict.ingest_conversation(first, "u", "s1", now=NOW)
    [dropped] = strict.ingest_conversation(echo, "u", "s2", now=NOW).outcomes
    assert dropped.action == "discarded" and dropped.memory_id is None
    assert strict.store.count("u") == 1


def test_users_lists_every_user_with_memories(engine: Engine) -> None:
    engine.remember("Ada prefers tea.", "ada")
    engine.remember("Bob prefers coffee.", "bob")
    assert engine.users() == ["ada", "bob"]
    engine.forget([m.id for m in engine.list("bob")], "bob")
    assert engine.users() == ["ada"]
