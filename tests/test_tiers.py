"""Tiered context: tier choice, budgets, promotion, decay filter, semantic dedup, the
rule-based compilers on a realistic project memory, and the cache mechanics."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine, Kind, UnknownValueError, ValidationError
from engrain.embed import HashEmbedder
from engrain.model import Memory, MemoryType, content_hash
from engrain.store import MemoryStore, Store
from engrain.tiers import (
    DECAY_FLOOR,
    DEDUP_SIMILARITY,
    MODEL_WINDOWS,
    PROMOTION_USES,
    TIER_BUDGETS,
    Tier,
    canonical,
    choose_tier,
    compile_dna,
    compile_field_guide,
    context_window,
    eligible,
    promote_high_usage,
)
from engrain.tiers.prepare import survives_decay
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

PROJECT_FILE = Path(__file__).parent / "data" / "project_memory.jsonl"
USER = "dev"
PROJECT = "ledgerly"


def load_project(engine: Engine, user: str = USER) -> dict[str, str]:
    """The realistic project memory (``tests/data/project_memory.jsonl``), each item learned
    ``days_ago`` before NOW and used ``uses`` times; fixture id → memory id."""
    ids: dict[str, str] = {}
    for line in PROJECT_FILE.read_text().splitlines():
        row = json.loads(line)
        learned = NOW - timedelta(days=row["days_ago"])
        out = engine.remember(row["content"], user, row["kind"], project=PROJECT,
                              domains=row["domains"], now=learned)  # fmt: skip
        assert out.memory_id is not None
        memory = engine.get(out.memory_id, user)
        engine.store.write([memory.evolve(access_count=row["uses"])])
        ids[row["id"]] = out.memory_id
    return ids


def item(
    memory_id: str,
    kind: Kind = Kind.PATTERN,
    *,
    days: float = 0.0,
    uses: int = 0,
    vector: tuple[float, ...] | None = None,
    promoted: bool = False,
    content: str | None = None,
    domains: tuple[str, ...] = (),
) -> Memory:
    at = NOW - timedelta(days=days)
    text = content or f"rule {memory_id}"
    emb = None if vector is None else np.asarray(vector, dtype=np.float32)
    if emb is not None:
        emb = emb / np.linalg.norm(emb)
    return Memory(
        id=memory_id, user_id=USER, content=text, memory_type=MemoryType.SEMANTIC, kind=kind,
        created_at=at, updated_at=at, access_count=uses, domains=domains,
        promoted_at=NOW if promoted else None, content_hash=content_hash(text), embedding=emb,
    )  # fmt: skip


# -- tier choice ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "tier"),
    [(1, Tier.DNA), (8_192, Tier.DNA), (16_384, Tier.DNA), (16_385, Tier.FIELD_GUIDE),
     (32_768, Tier.FIELD_GUIDE), (65_536, Tier.FIELD_GUIDE), (65_537, Tier.DOSSIER),
     (200_000, Tier.DOSSIER)],
)  # fmt: skip
def test_tier_at_the_window_boundaries(window: int, tier: Tier) -> None:
    assert choose_tier(window) is tier
    assert choose_tier(window, force_tier3=True) is Tier.DOSSIER


def test_tier_budgets_are_the_documents() -> None:
    assert TIER_BUDGETS == {Tier.DNA: 480, Tier.FIELD_GUIDE: 2_500, Tier.DOSSIER: 10_000}


@pytest.mark.parametrize(
    ("model", "window", "tier"),
    [("llama-3.1-8b", 8_192, Tier.DNA), ("mistral-small", 32_768, Tier.FIELD_GUIDE),
     ("deepseek-v3", 65_536, Tier.FIELD_GUIDE), ("claude-3.5-sonnet", 200_000, Tier.DOSSIER),
     ("gpt-4o", 128_000, Tier.DOSSIER), ("gemini-1.5-pro", 1_048_576, Tier.DOSSIER)],
)  # fmt: skip
def test_the_documents_model_table(model: str, window: int, tier: Tier) -> None:
    assert MODEL_WINDOWS[model] == window
    assert choose_tier(context_window(model)) is tier


@pytest.mark.parametrize(
    ("spelling", "window"),
    [("GPT-4o", 128_000), ("openai/gpt-4o-2024-08-06", 128_000), ("llama3.1:8b", 8_192),
     ("ollama/llama3.1:8b", 8_192), ("Llama 3.1 8B", 8_192), ("gpt-4o-mini", 128_000),
     ("claude-3.5-sonnet-20241022", 200_000), ("qwen2.5:7b", 32_768),
     ("mistral-small-latest", 32_768)],
)  # fmt: skip
def test_model_names_as_callers_spell_them(spelling: str, window: int) -> None:
    assert context_window(spelling) == window


def test_custom_windows_win_and_unknown_models_are_refused() -> None:
    assert context_window("my-finetune", {"my-finetune": 12_000}) == 12_000
    assert context_window("gpt-4o", {"gpt-4o": 30_000}) == 30_000
    with pytest.raises(UnknownValueError, match="context_window"):
        context_window("no-such-model")
    with pytest.raises(ValidationError):
        context_window("  ")
    for bad in (0, -5, True):
        with pytest.raises(ValidationError):
            choose_tier(bad)


# -- promotion, decay, dedup ------------------------------------------------------------------


def test_promotion_at_exactly_ten_uses() -> None:
    assert PROMOTION_USES == 10
    items = [item("nine", uses=9), item("ten", uses=10), item("old", uses=30, promoted=True)]
    promoted = promote_high_usage(items, NOW)
    assert [m.id for m in promoted] == ["ten"] and promoted[0].promoted_at == NOW


def test_decay_filter_at_the_threshold() -> None:
    assert DECAY_FLOOR == 0.10
    edge = 14.0 * np.log2(10.0)  # an antipattern's recency is 0.10 at this age (14-day half-life)
    assert survives_decay(item("a", Kind.ANTIPATTERN, days=edge - 0.01), NOW)
    assert not survives_decay(item("b", Kind.ANTIPATTERN, days=edge + 0.01), NOW)
    assert survives_decay(item("c", Kind.ANTIPATTERN, days=edge + 100, promoted=True), NOW)
    assert survives_decay(item("d", Kind.INVARIANT, days=5_000), NOW)  # never decays
    golden_edge = 30.0 * np.log2(10.0)
    assert survives_decay(item("e", Kind.GOLDEN_PATH, days=golden_edge - 0.01), NOW)
    assert not survives_decay(item("f", Kind.GOLDEN_PATH, days=golden_edge + 0.01), NOW)


def test_dedup_keeps_the_most_used_then_the_most_recent() -> None:
    assert DEDUP_SIMILARITY == 0.85
    used = item("used", uses=8, days=90, vector=(1.0, 0.1, 0.0))
    recent = item("recent", uses=2, days=1, vector=(1.0, 0.12, 0.0))
    tie_old = item("tie-old", uses=3, days=50, vector=(0.0, 1.0, 0.05))
    tie_new = item("tie-new", uses=3, days=5, vector=(0.0, 1.0, 0.0))
    alone = item("alone", vector=None)
    kept, folded = canonical([recent, used, tie_old, tie_new, alone])
    assert {m.id for m in kept} == {"used", "tie-new", "alone"}
    assert folded["used"] == ["recent"] and folded["tie-new"] == ["tie-old"]


def test_dedup_groups_only_strictly_above_085() -> None:
    a = np.array([1.0, 0.0], dtype=np.float32)
    b = np.array([0.85, np.sqrt(1 - 0.85**2)], dtype=np.float32)
    at = item("at", uses=1, vector=tuple(a))
    edge = item("edge", vector=tuple(b))
    assert abs(float(at.embedding @ edge.embedding) - 0.85) < 1e-6  # type: ignore[operator]
    kept, _ = canonical([at, edge], threshold=0.85 + 1e-6)
    assert len(kept) == 2
    close = item("close", vector=(0.86, float(np.sqrt(1 - 0.86**2))))
    kept, _ = canonical([at, close])
    assert [m.id for m in kept] == ["at"]


def test_eligible_ranks_promoted_first_then_by_use() -> None:
    items = [
        item("p", uses=1, promoted=True), item("busy", uses=7), item("idle", uses=0),
        item("stale", Kind.ANTIPATTERN, days=400), item("fact-like", Kind.EVENT),
    ]  # fmt: skip
    ranked, stats = eligible(items, NOW)
    assert [m.id for m in ranked] == ["p", "busy", "idle"]
    assert stats == {"considered": 4, "duplicates": 0, "decayed": 1}


# -- the compilers on a realistic project ------------------------------------------------------


@pytest.fixture
def project_engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    yield eng
    eng.close()


def test_dna_summary_is_one_readable_paragraph_within_budget(project_engine: Engine) -> None:
    ids = load_project(project_engine)
    names = {v: k for k, v in ids.items()}
    tiers = project_engine.tiers(USER, PROJECT, now=NOW)
    dna = tiers.tiers[Tier.DNA]
    assert dna.compiled_by == "rules"
    assert 0 < dna.tokens == count_tokens(dna.text) <= 480
    assert "\n" not in dna.text and not dna.text.startswith(("-", "#"))
    chosen = [names[i] for i in dna.memory_ids]
    # the top invariants by use, then the dominant patterns; nothing else
    assert chosen[:3] == ["inv-01", "inv-03", "inv-02"]
    assert {c.split("-")[0] for c in chosen} == {"inv", "pat"}
    assert sum(c.startswith("pat") for c in chosen) <= 2
    assert "get_current_user" in dna.text and dna.text.endswith(".")
    again = project_engine.tiers(USER, PROJECT, rebuild=True, now=NOW).tiers[Tier.DNA]
    assert again.text == dna.text  # stable


def test_field_guide_sections_within_budget(project_engine: Engine) -> None:
    ids = load_project(project_engine)
    names = {v: k for k, v in ids.items()}
    guide = project_engine.tiers(USER, PROJECT, now=NOW).tiers[Tier.FIELD_GUIDE]
    assert 0 < guide.tokens == count_tokens(guide.text) <= 2_500
    headings = [line for line in guide.text.splitlines() if line.startswith("## ")]
    assert headings == ["## Rules (Never Violate)", "## Preferences", "## Patterns & Decisions",
                        "## Recipes", "## Pitfalls (Avoid)"]  # fmt: skip
    chosen = [names[i] for i in guide.memory_ids]
    # every invariant (the hash embedder folds no paraphrase; the real model does, below)
    assert {c for c in chosen if c.startswith("inv")} == {i for i in ids if i.startswith("inv")}
    assert 5 <= sum(c.startswith(("pat", "dec")) for c in chosen) <= 8
    recipes = [c for c in chosen if c.startswith("gold")]
    assert len(recipes) <= 3 and "gold-01" in recipes  # 27 uses: promoted, past its decay
    assert "gold-02" not in chosen  # 30-day half-life, unpromoted and months old
    assert "**Database:**" in guide.text or "**API:**" in guide.text


@pytest.mark.parametrize("budget", [40, 120, 300])
def test_compilers_never_exceed_a_budget(project_engine: Engine, budget: int) -> None:
    load_project(project_engine)
    items, _ = eligible(project_engine.store.query(USER), NOW)
    dna = compile_dna(items, budget=budget)
    guide = compile_field_guide(items, budget=budget)
    assert 0 < count_tokens(dna.text) <= budget
    assert 0 < count_tokens(guide.text) <= budget


def test_compilers_on_an_empty_project() -> None:
    assert compile_dna([]).text == "" and compile_field_guide([]).text == ""


@pytest.mark.model
def test_semantic_dedup_on_the_project_with_the_real_model(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    eng = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=minilm)
    ids = load_project(eng)
    names = {v: k for k, v in ids.items()}
    tiers = eng.tiers(USER, PROJECT, now=NOW)
    assert tiers.stats["duplicates"] == 3
    chosen = {names[i] for c in tiers.tiers.values() for i in c.memory_ids}
    # the more used of each paraphrase pair is the one compiled
    assert "inv-03" in chosen and "inv-03-dup" not in chosen
    assert "pat-05-dup" not in chosen
    assert "anti-06" not in chosen
    eng.close()


# -- the cache, through the engine --------------------------------------------------------------


def test_cold_cache_falls_back_to_tier3_and_rebuilds(engine: Engine) -> None:
    load_project(engine)
    cold = engine.context("How do I add a new API endpoint?", USER, project=PROJECT,
                          model="llama3.1:8b", now=NOW)  # fmt: skip
    assert cold.fallback and cold.tier == 3
    assert cold.gated is not None and cold.gated.budget.tokens <= 480 and cold.tokens <= 480
    engine.tier_cache.wait(30)
    warm = engine.context("How do I add a new API endpoint?", USER, project=PROJECT,
                          model="llama3.1:8b", now=NOW)  # fmt: skip
    assert not warm.fallback and warm.tier == 1
    compiled = engine.tiers(USER, PROJECT)
    assert warm.text == f"<memory>\n{compiled.tiers[Tier.DNA].text}\n</memory>"
    assert warm.tokens == count_tokens(warm.text) <= 480
    guide = engine.context("How do I add a new API endpoint?", USER, project=PROJECT,
                           context_window=32_768, now=NOW)  # fmt: skip
    assert guide.tier == 2 and guide.text == f"<memory>\n{compiled.tiers[2].text}\n</memory>"
    assert guide.tokens <= 2_500
    big = engine.context("How do I add a new API endpoint?", USER, project=PROJECT,
                         model="gpt-4o", now=NOW)  # fmt: skip
    assert big.tier == 3 and not big.fallback
    assert engine.context("thanks!", USER, model="llama3.1:8b").text == ""


def _stale_after(engine: Engine, write: str, memory_id: str) -> bool:
    assert engine.tier_cache.fresh(USER, PROJECT) is not None
    if write == "remember":
        engine.remember("Feature flags live in app/core/flags.py", USER, "pattern",
                        project=PROJECT)  # fmt: skip
    elif write == "ingest":
        engine.ingest("Carol from Acme prefers invoices in EUR and asked for net-30 terms.", USER)
    elif write == "update":
        engine.update(memory_id, USER, content="All routes need auth, no exceptions.")
    elif write == "pin":
        engine.pin(memory_id, USER)
    elif write == "mute":
        engine.mute(memory_id, USER)
    elif write == "forget":
        engine.forget(memory_id, USER)
    elif write == "import":
        record = engine.get(memory_id, USER).to_dict(with_embedding=True)
        engine.import_records([{**record, "type": "memory", "id": "copy"}])
    return engine.tier_cache.fresh(USER, PROJECT) is None


@pytest.mark.parametrize(
    "write", ["remember", "ingest", "update", "pin", "mute", "forget", "import"]
)
def test_every_kind_of_write_marks_the_tiers_stale(engine: Engine, write: str) -> None:
    ids = load_project(engine)
    engine.tiers(USER, PROJECT, now=NOW)
    assert _stale_after(engine, write, ids["inv-01"])
    rebuilt = engine.tiers(USER, PROJECT, now=NOW)
    assert engine.tier_cache.fresh(USER, PROJECT) == rebuilt


def test_reading_tiers_does_not_make_them_stale(engine: Engine) -> None:
    load_project(engine)
    compiled = engine.tiers(USER, PROJECT, now=NOW)
    engine.context("How do I add a new API endpoint?", USER, project=PROJECT,
                   model="llama3.1:8b", now=NOW)  # fmt: skip
    assert engine.tier_cache.fresh(USER, PROJECT) == compiled


def test_tier_injection_counts_uses_and_promotes_at_ten(engine: Engine) -> None:
    out = engine.remember("Never deploy on Fridays.", USER, "invariant", now=NOW)
    memory_id = out.memory_id or ""
    engine.store.write([engine.get(memory_id, USER).evolve(access_count=8)])
    engine.tiers(USER, now=NOW)
    engine.context("Can I deploy the release today?", USER, model="llama3.1:8b", now=NOW)
    nine = engine.get(memory_id, USER)
    assert nine.access_count == 9 and nine.promoted_at is None
    engine.context("Can I deploy the release today?", USER, model="llama3.1:8b", now=NOW)
    ten = engine.get(memory_id, USER)
    assert ten.access_count == 10 and ten.promoted_at == NOW
    assert engine.tier_cache.fresh(USER, None) is None  # promotion recompiles the tiers


def test_settings_pick_the_tier_and_can_force_tier3(tmp_path: Path) -> None:
    def engine_with(**overrides: object) -> Engine:
        return Engine(settings=make_settings(tmp_path, **overrides), store=MemoryStore(),
                      embedder=HashEmbedder())  # fmt: skip

    small = engine_with(model="my-local", model_windows={"my-local": 4_096})
    small.remember("Never deploy on Fridays.", USER, "invariant", now=NOW)
    small.tiers(USER)
    assert small.context("can we deploy today?", USER).tier == 1
    assert small.context("can we deploy today?", USER, token_budget=500).tier == 3
    forced = engine_with(model="my-local", model_windows={"my-local": 4_096}, force_tier3=True)
    assert forced.context("can we deploy today?", USER).tier == 3
    with pytest.raises(UnknownValueError):
        engine_with().context("can we deploy today?", USER, model="no-such-model")


def test_background_rebuilds_run_once_at_a_time(tmp_path: Path) -> None:
    gate = threading.Event()
    calls: list[str] = []

    class SlowStore(MemoryStore):
        def query(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append("query")
            gate.wait(10)
            return super().query(*args, **kwargs)

    store: Store = SlowStore()
    eng = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    eng.remember("Never deploy on Fridays.", USER, "invariant", now=NOW)
    first = eng.tier_cache.schedule(USER, None)
    second = eng.tier_cache.schedule(USER, None)
    assert first is second
    gate.set()
    eng.tier_cache.wait(10)
    assert first.result().tiers[Tier.DNA].text == "Never deploy on Fridays."
    eng.close()


def test_a_background_rebuild_compiles_as_of_the_time_it_was_asked_for(tmp_path: Path) -> None:
    eng = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    then = NOW - timedelta(days=3 * 365)
    decision = eng.remember("We chose Postgres for the ledger.", USER, "decision",
                            now=then - timedelta(days=1)).memory_id  # fmt: skip
    built = eng.tier_cache.schedule(USER, None, then).result(10)
    assert built.compiled_at == then
    assert decision in built.tiers[Tier.DNA].memory_ids  # one day old then, not three years
    eng.close()


def test_a_failed_background_build_leaves_the_cache_stale(tmp_path: Path) -> None:
    class BrokenStore(MemoryStore):
        def get_state(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

        def write(self, upserts=(), deletes=(), state=(), patches=(), claims=()):  # type: ignore[no-untyped-def]
            if any(s.namespace == "tiers" for s in state):
                raise OSError("disk full")
            super().write(upserts, deletes, state, patches, claims)

    eng = Engine(settings=make_settings(tmp_path), store=BrokenStore(), embedder=HashEmbedder())
    eng.remember("Never deploy on Fridays.", USER, "invariant", now=NOW)
    ctx = eng.context("can we deploy the release today?", USER, model="llama3.1:8b")
    assert ctx.fallback
    eng.tier_cache.wait(10)
    again = eng.context("can we deploy the release today?", USER, model="llama3.1:8b")
    assert again.fallback and "Fridays" in again.text
    eng.close()


def test_tiers_of_one_project_and_of_all(engine: Engine) -> None:
    engine.remember("Never deploy on Fridays.", USER, "invariant", project="a", now=NOW)
    engine.remember("Always run migrations first.", USER, "invariant", project="b", now=NOW)
    only_a = engine.tiers(USER, "a", now=NOW).tiers[Tier.DNA].text
    both = engine.tiers(USER, now=NOW).tiers[Tier.DNA].text
    assert only_a == "Never deploy on Fridays."
    assert "Fridays" in both and "migrations" in both


def test_compiled_at_is_recorded(engine: Engine) -> None:
    engine.remember("Never deploy on Fridays.", USER, "invariant", now=NOW)
    compiled = engine.tiers(USER, now=NOW)
    assert compiled.compiled_at == NOW and isinstance(compiled.compiled_at, datetime)
    stored = engine.tier_cache.stored(USER, None)
    assert stored is not None and stored.to_dict() == compiled.to_dict()


def _forget_during_first_read(engine: Engine, victim: str) -> list[str]:
    """Make the store's next ``query`` forget ``victim`` after reading (a forget of
    another thread or process landing while tiers compile); the calls it made."""
    query = engine.store.query
    calls: list[str] = []

    def forget_after_reading(user_id: str, flt: object) -> list[Memory]:
        read = query(user_id, flt)  # type: ignore[arg-type]
        if not calls:
            calls.append("forget")
            engine.forget(victim, USER)
        return read

    engine.store.query = forget_after_reading  # type: ignore[method-assign,assignment]
    return calls


def test_a_forget_landing_while_tiers_compile_leaves_them_stale(engine: Engine) -> None:
    """A compile reads the revision before the memories it compiles from: a forget that
    commits after that read makes the set stale, so a forgotten memory is never served
    as fresh tiers."""
    ids = [engine.remember(text, USER, "invariant", project=PROJECT, now=NOW).memory_id or ""
           for text in ("Never deploy on Fridays.", "All routes need auth.",
                        "Money is stored in integer cents.")]  # fmt: skip
    calls = _forget_during_first_read(engine, ids[0])
    compiled = engine.tiers(USER, PROJECT, rebuild=True, now=NOW)
    del engine.store.query  # the store's own method again
    assert calls == ["forget"] and ids[0] in compiled.memories  # compiled from the old read
    assert engine.tier_cache.fresh(USER, PROJECT) is None
    assert ids[0] not in engine.tiers(USER, PROJECT, now=NOW).memories


def test_promotion_while_tiers_compile_never_brings_back_a_forgotten_memory(
    engine: Engine,
) -> None:
    """Promotion at ten uses writes ``promoted_at`` as a patch: a memory forgotten after
    the compile read it stays forgotten (a whole-row write would insert it again)."""
    victim = load_project(engine)["inv-01"]
    assert engine.get(victim, USER).access_count >= 10  # promoted by this compile
    calls = _forget_during_first_read(engine, victim)
    compiled = engine.tiers(USER, PROJECT, rebuild=True, now=NOW)
    del engine.store.query
    assert calls == ["forget"] and compiled.stats["promoted"] > 0
    assert engine.store.get(USER, [victim]) == []
    assert victim not in engine.tiers(USER, PROJECT, now=NOW).memories
