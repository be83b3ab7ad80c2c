"""The feedback loop (usefulness, co-occurrence, context ids) and corrections and conflicts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, NotFoundError, ValidationError
from engrain import feedback as fb
from engrain.embed import HashEmbedder
from engrain.feedback import (
    COOCCURRENCE,
    COOCCURRENCE_PLATEAU,
    FEEDBACK_RATE,
    PAIRS,
    cooccurrence_bonus,
    feedback_target,
    learn_pairs,
    updated_usefulness,
)
from engrain.model import utcnow
from engrain.recall.score import COOCCURRENCE_CAP
from engrain.store import MemoryStore

from .conftest import NOW, make_settings

DEPLOY = [
    "Deploys to production go through the GitHub Actions release workflow.",
    "The release workflow needs the DEPLOY_TOKEN secret from the vault.",
    "Production deploys are frozen on Friday afternoons.",
]


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(settings=make_settings(tmp_path, conflict_similarity=0.55,
                                      correction_similarity=0.5),
               store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    yield e
    e.close()


def remember_all(engine: Engine, texts: list[str], kind: str = "fact") -> list[str]:
    return [engine.remember(t, "u", kind, now=NOW).memory_id or "" for t in texts]


# -- the update rule -----------------------------------------------------------------------------


def test_feedback_rule_values() -> None:
    assert FEEDBACK_RATE == 0.2
    assert updated_usefulness(0.5, 1.0) == pytest.approx(0.6)
    assert updated_usefulness(0.5, 0.0) == pytest.approx(0.4)
    assert updated_usefulness(0.5, 0.75) == pytest.approx(0.55)
    u = 0.5
    for _ in range(10):
        u = updated_usefulness(u, 1.0)
    assert u == pytest.approx(1 - 0.5 * 0.8**10)
    for start in (0.0, 0.3, 1.0):
        for target in (0.0, 1.0):
            assert 0.0 <= updated_usefulness(start, target, 1.0) <= 1.0
    assert feedback_target(True, None) == 1.0 and feedback_target(False, None) == 0.0
    assert feedback_target(None, 0.3) == 0.3
    for helpful, score in ((None, None), (True, 0.5), (None, 1.5), (None, -0.1)):
        with pytest.raises(ValidationError):
            feedback_target(helpful, score)


def test_pairs_and_bonus_values() -> None:
    assert COOCCURRENCE_PLATEAU == 5 and COOCCURRENCE_CAP == 0.10
    doc = learn_pairs(None, ["b", "a", "c"])
    assert doc[PAIRS] == {"a": {"b": 1, "c": 1}, "b": {"a": 1, "c": 1}, "c": {"a": 1, "b": 1}}
    doc = learn_pairs(doc, ["a", "b"])
    assert doc[PAIRS]["a"]["b"] == 2 and doc[PAIRS]["b"]["a"] == 2
    pairs = doc[PAIRS]
    assert cooccurrence_bonus(pairs, "b", ["a"]) == pytest.approx(2 / 5)
    assert cooccurrence_bonus(pairs, "b", ["b"]) == 0.0  # not with itself
    assert cooccurrence_bonus(pairs, "z", ["a"]) == 0.0
    many = learn_pairs({PAIRS: {"a": {"b": 9}, "b": {"a": 9}}}, [])
    assert cooccurrence_bonus(many[PAIRS], "a", ["b"]) == 1.0  # capped


# -- through the engine ---------------------------------------------------------------------------


def test_feedback_on_a_context_moves_usefulness(eng: Engine) -> None:
    remember_all(eng, DEPLOY)
    ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
    assert len(ctx.memories) == 3 and ctx.id
    result = eng.feedback("u", ctx.id, helpful=True)
    assert result.target == 1.0
    assert {i: round(a, 6) for i, (_, a) in result.usefulness.items()} == {
        m.id: 0.6 for m in ctx.memories
    }
    assert all(eng.get(m.id, "u").usefulness == pytest.approx(0.6) for m in ctx.memories)
    eng.feedback("u", ctx.id, helpful=False)
    assert all(eng.get(m.id, "u").usefulness == pytest.approx(0.48) for m in ctx.memories)


def test_feedback_on_memories_by_id_and_with_a_score(eng: Engine) -> None:
    ids = remember_all(eng, DEPLOY)
    eng.feedback("u", memory_ids=[ids[0]], score=0.0)
    assert eng.get(ids[0], "u").usefulness == pytest.approx(0.4)
    assert eng.get(ids[1], "u").usefulness == 0.5
    result = eng.feedback("u", memory_ids=["gone", ids[1]], score=1.0)
    assert list(result.usefulness) == [ids[1]]  # deleted or unknown ids are skipped


def test_feedback_errors(eng: Engine) -> None:
    remember_all(eng, DEPLOY)
    with pytest.raises(NotFoundError):
        eng.feedback("u", "no-such-context", helpful=True)
    with pytest.raises(ValidationError):
        eng.feedback("u", helpful=True)
    ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
    with pytest.raises(ValidationError):
        eng.feedback("u", ctx.id)
    with pytest.raises(NotFoundError):
        eng.feedback("someone-else", ctx.id, helpful=True)  # context ids are per user


def test_positive_contexts_teach_cooccurrence_once(eng: Engine) -> None:
    remember_all(eng, DEPLOY)
    ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
    assert eng.feedback("u", ctx.id, helpful=False).pairs_learned == 0
    assert eng.store.get_state("u", COOCCURRENCE, PAIRS) is None
    assert eng.feedback("u", ctx.id, helpful=True).pairs_learned == 3
    assert eng.feedback("u", ctx.id, helpful=True).pairs_learned == 0  # once per context
    pairs = (eng.store.get_state("u", COOCCURRENCE, PAIRS) or {})[PAIRS]
    ids = [m.id for m in ctx.memories]
    assert all(pairs[a][b] == 1 for a in ids for b in ids if a != b)


def test_learned_cooccurrence_lifts_a_companion(eng: Engine) -> None:
    anchor, companion = remember_all(eng, DEPLOY[:2])
    remember_all(eng, ["The vault is Hashicorp Vault at vault.internal, port 8200."])
    for _ in range(COOCCURRENCE_PLATEAU):
        ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
        assert {anchor, companion} <= {m.id for m in ctx.memories}
        eng.feedback("u", ctx.id, helpful=True)
    gated = eng.explain("Which workflow handles production deploys?", "u", token_budget=500,
                        now=NOW)  # fmt: skip
    parts = {s.memory.id: gated.components[s.memory.id] for s in gated.ranked}
    assert parts[companion]["cooccurrence"] == pytest.approx(COOCCURRENCE_CAP)
    assert parts[anchor]["cooccurrence"] == pytest.approx(COOCCURRENCE_CAP)


def test_forgetting_a_memory_forgets_its_pairs(eng: Engine) -> None:
    ids = remember_all(eng, DEPLOY)
    ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
    eng.feedback("u", ctx.id, helpful=True)
    eng.forget(ids[0], "u")
    pairs = (eng.store.get_state("u", COOCCURRENCE, PAIRS) or {})[PAIRS]
    assert ids[0] not in pairs and all(ids[0] not in v for v in pairs.values())
    assert pairs[ids[1]][ids[2]] == 1


def test_feedback_two_processes_planned_from_one_read_all_counts(tmp_path: Path) -> None:
    """Two engines on one SQLite file (two processes): each feedback is planned from what
    its engine read before the other's committed, and still both count (before session
    20 the second write put back the usefulness, pairs and record it had read)."""
    db = tmp_path / "e.db"
    one, two = (Engine(settings=make_settings(tmp_path, url=f"sqlite:///{db}")) for _ in "12")
    with one, two:
        ids = remember_all(one, DEPLOY)
        first, second = (one.context("How do production deploys work?", "u", token_budget=500,
                                     now=NOW) for _ in "12")  # fmt: skip
        assert {m.id for m in first.memories} == {m.id for m in second.memories} == set(ids)
        late = fb.plan(one.store, "u", first.id, [], 1.0)  # read; written after two's
        two.feedback("u", second.id, helpful=True)
        two.feedback("u", first.id, score=0.25)
        one.store.write(patches=late.patches, state=late.state)
        for memory_id in ids:  # 0.5 → 0.6 (two) → 0.53 (score 0.25) → 0.624 (one)
            assert one.get(memory_id, "u").usefulness == pytest.approx(0.624)
        pairs = (one.store.get_state("u", COOCCURRENCE, PAIRS) or {})[PAIRS]
        assert all(pairs[a][b] == 2 for a in ids for b in ids if a != b)
        record = one.store.get_state("u", fb.CONTEXTS, first.id) or {}
        assert record["feedback"] == [0.25, 1.0] and record["learned"] is True


def test_a_forget_keeps_the_pairs_another_process_learned_meanwhile(eng: Engine) -> None:
    ids = remember_all(eng, DEPLOY)
    first, second = (eng.context("How do production deploys work?", "u", token_budget=500,
                                 now=NOW) for _ in "12")  # fmt: skip
    eng.feedback("u", first.id, helpful=True)
    forget = fb.unlearned(eng.store, "u", [ids[0]])  # read; written after the lesson below
    eng.feedback("u", second.id, helpful=True)
    eng.store.write(deletes=eng.store.get("u", [ids[0]]), state=forget)
    pairs = (eng.store.get_state("u", COOCCURRENCE, PAIRS) or {})[PAIRS]
    assert ids[0] not in pairs and all(ids[0] not in v for v in pairs.values())
    assert pairs[ids[1]][ids[2]] == pairs[ids[2]][ids[1]] == 2
    assert fb.unlearned(eng.store, "u", ["never-learned"]) == []


def test_context_ids_expire(eng: Engine) -> None:
    remember_all(eng, DEPLOY)
    ctx = eng.context("How do production deploys work?", "u", token_budget=500, now=NOW)
    eng.compress("u", now=utcnow() + timedelta(days=29))
    eng.feedback("u", ctx.id, helpful=True)  # still there after 29 days
    eng.compress("u", now=utcnow() + timedelta(days=31))
    with pytest.raises(NotFoundError, match="context_retention_days"):
        eng.feedback("u", ctx.id, helpful=True)


def test_a_context_that_injects_nothing_records_nothing(eng: Engine) -> None:
    ctx = eng.context("thanks!", "u", now=NOW)
    assert ctx.text == "" and ctx.id
    with pytest.raises(NotFoundError):
        eng.feedback("u", ctx.id, helpful=True)


# -- corrections -----------------------------------------------------------------------------------


def test_a_correction_replaces_the_old_fact_in_the_next_context(eng: Engine) -> None:
    [old] = remember_all(eng, ["My timezone is America/New_York"])
    before = eng.context("What is my timezone?", "u", token_budget=500, now=NOW)
    assert "America/New_York" in before.text
    out = eng.remember("Actually, my timezone is Europe/Bratislava, not America/New_York",
                       "u", "correction", now=NOW + timedelta(minutes=1))  # fmt: skip
    assert out.action == "stored" and out.reason == f"supersedes {old}"
    after = eng.context("What is my timezone?", "u", token_budget=500, now=NOW)
    assert [m.id for m in after.memories] == [out.memory_id]
    assert "Europe/Bratislava" in after.text
    kept = eng.get(old, "u")  # the old fact is kept and linked, never injected again
    assert kept.superseded_by == out.memory_id
    correction = eng.get(out.memory_id or "", "u")
    assert correction.kind is Kind.CORRECTION and correction.confidence == 1.0
    assert correction.provenance.metadata["corrects"] == old
    assert old not in {m.id for m in eng.recall("timezone", "u", top_k=10).memories}


def test_explicit_corrections_and_their_errors(eng: Engine) -> None:
    a, b = remember_all(eng, ["The office wifi is GuestNet", "Lunch is at noon"])
    out = eng.remember("Lunch moved to 12:30", "u", "correction", corrects=b, now=NOW)
    assert eng.get(b, "u").superseded_by == out.memory_id
    assert eng.get(a, "u").superseded_by is None
    with pytest.raises(ValidationError):
        eng.remember("Lunch moved to 1pm", "u", "correction", corrects=b)  # superseded
    with pytest.raises(NotFoundError):
        eng.remember("Lunch moved to 1pm", "u", "correction", corrects="nope")
    # any kind may supersede, and keeps its own kind (a new fact replaces an old fact)
    fact = eng.remember("The office wifi is StaffNet", "u", "fact", corrects=a, now=NOW)
    assert fact.reason == f"supersedes {a}"
    assert eng.get(fact.memory_id or "", "u").kind is Kind.FACT
    assert eng.get(a, "u").superseded_by == fact.memory_id
    alone = eng.remember("Completely unrelated: the cat is called Miso", "u", "correction")
    assert alone.reason is None  # nothing close enough to correct


# -- conflicts -------------------------------------------------------------------------------------


def test_disagreeing_memories_are_flagged_and_injected_together(eng: Engine) -> None:
    [old] = remember_all(eng, ["Alice lives in Berlin with her partner"])
    out = eng.remember("Alice lives in Munich now, with her partner", "u", "fact",
                       now=NOW + timedelta(days=40))  # fmt: skip
    assert out.reason == f"conflicts with {old} (different names)"
    new = eng.get(out.memory_id or "", "u")
    assert new.provenance.metadata["conflicts_with"] == [old]
    assert eng.get(old, "u").provenance.metadata["conflicts_with"] == [new.id]
    ctx = eng.context("Where does Alice live?", "u", token_budget=500, now=NOW)
    assert {m.id for m in ctx.memories} == {old, new.id}
    lines = ctx.text.splitlines()
    assert (
        "[SEMANTIC] 2026-01-15: Alice lives in Berlin with her partner (conflicts" in lines[1]
        or "[SEMANTIC] 2026-01-15: Alice lives in Berlin with her partner (conflicts" in lines[2]
    )
    assert sum("confirm which is current" in line for line in lines) == 2
    assert "2026-02-24: Alice lives in Munich" in ctx.text


def test_a_conflict_partner_is_injected_even_if_it_scored_low(eng: Engine) -> None:
    [old] = remember_all(eng, ["Alice lives in Berlin with her partner"])
    new = eng.remember("Alice lives in Munich now, with her partner", "u", "fact", now=NOW)
    eng.store.write([eng.get(old, "u").evolve(importance=0.25)])
    ctx = eng.context("Munich", "u", token_budget=500, now=NOW)
    assert {m.id for m in ctx.memories} >= {old, new.memory_id}


def test_correcting_or_forgetting_resolves_the_conflict(eng: Engine) -> None:
    [old] = remember_all(eng, ["Alice lives in Berlin with her partner"])
    new = eng.remember("Alice lives in Munich now, with her partner", "u", "fact", now=NOW)
    fix = eng.remember("Correction: Alice lives in Munich since March", "u", "correction",
                       corrects=old, now=NOW)  # fmt: skip
    assert fix.reason == f"supersedes {old}"
    assert "conflicts_with" not in eng.get(new.memory_id or "", "u").provenance.metadata
    assert "conflicts_with" not in eng.get(old, "u").provenance.metadata
    [a] = remember_all(eng, ["We deploy every Friday afternoon"])
    b = eng.remember("We never deploy on Friday afternoons", "u", "fact", now=NOW)
    assert b.reason == f"conflicts with {a} (one negates the other)"
    eng.forget(a, "u")
    assert "conflicts_with" not in eng.get(b.memory_id or "", "u").provenance.metadata


def test_agreeing_close_memories_are_not_flagged(eng: Engine) -> None:
    remember_all(eng, ["Alice lives in Berlin with her partner"])
    out = eng.remember("Alice lives in Berlin and works at Zalando", "u", "fact", now=NOW)
    assert out.reason is None
    events = eng.remember("Alice moved to Munich", "u", "event", now=NOW)
    assert events.reason is None  # events happened; they do not contradict


@pytest.mark.model
def test_conflicts_and_corrections_with_the_real_model(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    e = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=minilm)
    old = e.remember("Our staging database runs PostgreSQL 15", "u", "fact", now=NOW)
    new = e.remember("The staging database now runs PostgreSQL 16 instead", "u", "fact", now=NOW)
    assert new.reason == f"conflicts with {old.memory_id} (different numbers)"
    other = e.remember("My sister's wedding is on June 12", "u", "fact", now=NOW)
    assert other.reason is None
    tz = e.remember("My timezone is America/New_York", "u", "fact", now=NOW)
    fix = e.remember("Actually, my timezone is Europe/Bratislava, not America/New_York", "u",
                     "correction", now=NOW)  # fmt: skip
    assert fix.reason == f"supersedes {tz.memory_id}"
    e.close()
