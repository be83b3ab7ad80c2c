"""Session compression: the trigger, the oldest sessions first, the extractive summary that
keeps names, numbers and dates, originals kept and excluded, automatic and on demand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, Kind, MemoryType, Turn
from engrain import compress as compression
from engrain.compress import SUMMARY_PROMPT, due, extractive_summary, key_terms, sessions
from engrain.embed import HashEmbedder
from engrain.errors import EmbeddingError, NotFoundError
from engrain.store import MemoryFilter, MemoryStore

from .conftest import NOW, make_settings

#: A realistic session: who, what, when and how much, between pleasantries.
SESSION = [
    ("Caroline", "Hey Mel! So good to hear from you, how have you been?"),
    (
        "Melanie",
        "Hi! Busy but good. We finally booked the camping trip to Yosemite for "
        "June 14, three nights at Upper Pines, site 42.",
    ),
    (
        "Caroline",
        "That sounds amazing. I started my counseling certificate at Portland "
        "State last Monday; the program is 18 months and costs $7,400.",
    ),
    (
        "Melanie",
        "Wow, congratulations! Oliver asked whether you're still coming to his recital on 3 May.",
    ),
    ("Caroline", "Of course, tell him I'll be there. Thanks, talk soon!"),
]
KEY_FACTS = ["Yosemite", "June 14", "Upper Pines", "42", "Portland State", "18", "$7,400",
             "Oliver", "3 May"]  # fmt: skip


TOPICS = [
    "Ann booked the ferry from Kiel to Oslo for the first of August.",
    "Ben's cello recital moved to the church on Elm Street, 7 pm.",
    "The roof repair quote from Dunmore Builders came in at 3,200 euros.",
    "Mia starts kindergarten at Little Oaks in September; pickup is at 2:30.",
    "Our landlord Mr Okafor agreed to fix the boiler before winter.",
    "Grandma Rosa turns 90 on the 12th; the party is at Lucia's house.",
    "The team offsite in Lisbon runs Tuesday to Thursday next month.",
]


def turns(session: int, lines: list[tuple[str, str]] | None = None) -> list[Turn]:
    chosen = lines or [("Ann", TOPICS[session])]
    return [
        Turn(speaker, text, f"S{session}:{i}", NOW + timedelta(days=session))
        for i, (speaker, text) in enumerate(chosen)
    ]


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Engine]:
    """An engine that compresses above 4 sessions (2 at a time), not automatically."""
    eng = Engine(settings=make_settings(tmp_path, compression_threshold=4, auto_compress=False),
                 store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    yield eng
    eng.close()


def test_extractive_summary_keeps_names_numbers_and_dates() -> None:
    summary = extractive_summary([f"{s}: {t}" for s, t in SESSION])
    for fact in KEY_FACTS:
        assert fact in summary, fact
    assert "how have you been" not in summary and "talk soon" not in summary
    assert len(summary.split()) <= 120
    assert summary.startswith("Melanie: ")  # speakers kept, in the order things were said


def test_key_terms_of_one_sentence() -> None:
    terms = key_terms("Melanie: We booked Yosemite for June 14, site 42, for $120.")
    assert {"Melanie", "Yosemite", "june", "14", "42", "$120"} <= terms
    assert key_terms("Thanks, talk soon!") == set()


def test_nothing_is_due_until_above_the_threshold(small: Engine) -> None:
    for n in range(4):
        small.ingest_conversation(turns(n), "u", f"s{n}", now=NOW + timedelta(days=n))
    assert small.compress("u", now=NOW).sessions == ()
    small.ingest_conversation(turns(4), "u", "s4", now=NOW + timedelta(days=4))
    report = small.compress("u", now=NOW + timedelta(days=5))
    assert report.sessions == ("s0", "s1")  # the oldest threshold / 2
    assert report.compressed == 2 and len(report.summaries) == 2
    assert report.summarized_by == ("extractive", "extractive")
    assert small.compress("u", now=NOW).sessions == ()  # 3 uncompressed sessions left


def test_sessions_to_compress_and_force(tmp_path: Path) -> None:
    eng = Engine(settings=make_settings(tmp_path, compression_threshold=10, sessions_to_compress=3,
                                        auto_compress=False),
                 store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    for n in range(5):
        eng.ingest_conversation(turns(n), "u", f"s{n}", now=NOW + timedelta(days=n))
    assert eng.compress("u").sessions == ()
    assert eng.compress("u", force=True).sessions == ("s0", "s1", "s2")


def test_summary_memory_and_originals(small: Engine) -> None:
    small.ingest_conversation(
        [Turn(s, t, f"D1:{i}", NOW) for i, (s, t) in enumerate(SESSION)], "u", "trip",
        project="life", now=NOW,
    )  # fmt: skip
    originals = small.list("u")
    report = small.compress("u", force=True, now=NOW + timedelta(days=1))
    [summary] = small.store.get("u", list(report.summaries))
    assert summary.kind is Kind.SUMMARY and summary.memory_type is MemoryType.SEMANTIC
    assert summary.source_session_id == "trip" and summary.compression_source
    assert summary.project == "life" and summary.event_at == NOW
    assert set(summary.provenance.turn_ids) == {f"D1:{i}" for i in range(len(SESSION))}
    assert summary.provenance.metadata["compressed_from"] == [m.id for m in reversed(originals)]
    for fact in KEY_FACTS:
        assert fact in summary.content, fact
    after = small.store.get("u", [m.id for m in originals])
    assert len(after) == len(originals) and all(m.compressed for m in after)  # kept
    assert [m.content for m in after] == [m.content for m in originals]


def test_compressed_originals_are_excluded_then_included_with_the_flag(small: Engine) -> None:
    small.ingest_conversation(
        [Turn(s, t, f"D1:{i}", NOW) for i, (s, t) in enumerate(SESSION)], "u", "trip", now=NOW
    )
    small.compress("u", force=True, now=NOW)
    episodic = {m.id for m in small.list("u", memory_type="episodic")}
    found = small.recall("When is the Yosemite camping trip?", "u", top_k=10, now=NOW)
    assert {m.id for m in found.memories}.isdisjoint(episodic)
    assert any(m.kind is Kind.SUMMARY for m in found.memories)
    ctx = small.context("When is the Yosemite camping trip?", "u", token_budget=2000, now=NOW)
    assert {m.id for m in ctx.memories}.isdisjoint(episodic)
    both = small.recall("When is the Yosemite camping trip?", "u", top_k=10,
                        include_compressed=True, now=NOW)  # fmt: skip
    assert {m.id for m in both.memories} & episodic
    ctx = small.context("When is the Yosemite camping trip?", "u", token_budget=2000,
                        include_compressed=True, now=NOW)  # fmt: skip
    assert {m.id for m in ctx.memories} & episodic


def test_compression_runs_after_ingestion_without_blocking(tmp_path: Path) -> None:
    eng = Engine(settings=make_settings(tmp_path, compression_threshold=2),
                 store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    for n in range(3):
        eng.ingest_conversation(turns(n), "u", f"s{n}", now=NOW + timedelta(days=n))
    eng.wait(10)
    compressed = eng.store.query("u", MemoryFilter(memory_types=(MemoryType.EPISODIC,)))
    assert {m.session_id for m in compressed if m.compressed} == {"s0"}
    summaries = eng.list("u", kind="summary")
    assert [m.source_session_id for m in summaries] == ["s0"]
    eng.close()


def test_memories_without_a_session_are_never_compressed(small: Engine) -> None:
    for n in range(6):
        small.ingest(f"Day {n}: the Oslo plan changed again, now leaving at {n + 7} am.",
                     "u", memory_type_hint="episodic", now=NOW)  # fmt: skip
    assert sessions(small.store.query("u")) == []
    assert small.compress("u", force=True).sessions == ()


def test_due_orders_by_creation_then_event_time() -> None:
    from engrain.model import Memory, content_hash

    def m(sid: str, created_days: int, event_days: int) -> Memory:
        text = f"turn of {sid}"
        return Memory(id=sid, user_id="u", content=text, memory_type=MemoryType.EPISODIC,
                      kind=Kind.EVENT, created_at=NOW + timedelta(days=created_days),
                      updated_at=NOW, event_at=NOW + timedelta(days=event_days),
                      session_id=sid, content_hash=content_hash(text))  # fmt: skip

    memories = [m("late", 2, 0), m("early", 1, 5), m("tie-b", 3, 2), m("tie-a", 3, 1)]
    assert [s.session_id for s in due(memories, 3, 4)] == ["early", "late", "tie-a", "tie-b"]
    assert due(memories, 4) == []


def test_the_spec_prompt_is_kept_word_for_word() -> None:
    assert SUMMARY_PROMPT.startswith(
        "Summarize the following conversation into 2-3 sentences capturing key facts,\n"
        "decisions, and topics discussed. Be specific and preserve names, numbers, and\n"
        "technical details. Do not include pleasantries.\nConversation:\n"
    )
    assert SUMMARY_PROMPT.endswith("{session_content}")


def test_two_compressions_racing_on_a_session_write_one_summary(small: Engine) -> None:
    """Two compressions (another thread's or process's) that both plan before either writes
    leave one summary per session, not two (session 17, h8: `bench/attacks`, two processes
    compressing one SQLite store wrote a session's summary twice); and a compression that
    finds the session already compressed by the other writes nothing."""
    for s in range(5):
        small.ingest_conversation(turns(s), "ann", session_id=f"s{s}")
    settings, store = small.settings, small.store

    def plan() -> compression.Compression:
        return compression.compress(
            store, small.embedder.embed, None, "ann",
            threshold=settings.compression_threshold, count=settings.sessions_to_compress,
            force=False, now=NOW + timedelta(days=30),
        )  # fmt: skip

    stale = store.query("ann", MemoryFilter(memory_types=(MemoryType.EPISODIC,)))
    first, second = plan(), plan()  # both read the sessions uncompressed
    assert first.report.sessions == second.report.sessions == ("s0", "s1")
    assert first.report.summaries == second.report.summaries  # one id per session's memories
    for done in (first, second):
        store.write(done.summaries, patches=done.patches)
    summaries = store.query("ann", MemoryFilter(memory_types=(MemoryType.SEMANTIC,)))
    assert sorted(m.source_session_id or "" for m in summaries) == ["s0", "s1"]
    # a plan that listed the sessions before the other's write, and reads them again after
    # it, finds them compressed and leaves them to the compression that did it
    late = compression.compress(
        StaleQuery(store, stale), small.embedder.embed, None, "ann",
        threshold=settings.compression_threshold, count=settings.sessions_to_compress,
        force=False, now=NOW + timedelta(days=30),
    )  # fmt: skip
    assert late.report.sessions == () and late.summaries == () and late.patches == ()


class StaleQuery:
    """A store whose ``query`` answers what it held earlier (another process's snapshot);
    every other method is the store's own."""

    def __init__(self, store: Any, rows: list[Any]) -> None:
        self.store, self.rows = store, rows

    def query(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self.rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize("path", ["conversation", "conversations", "remember"])
def test_the_compression_an_ingest_sets_off_runs_as_of_the_ingests_now(
    tmp_path: Path, path: str
) -> None:
    """A replayed history (``now`` given) compresses with its own time, as its tiers
    compile with it (``TierCache.schedule``); before, the background compression took the
    wall clock: a summary of 2023's sessions was written in the year the replay ran, and
    the context records' retention was counted from the wall clock too. Session 29 (h7)."""
    past = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    eng = Engine(settings=make_settings(tmp_path, compression_threshold=2),
                 store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    for n in range(3):
        at = past + timedelta(days=n)
        if path == "conversation":
            eng.ingest_conversation(turns(n), "u", f"s{n}", now=at)
        elif path == "conversations":
            eng.ingest_conversations([{"turns": turns(n), "user_id": "u", "session_id": f"s{n}",
                                       "now": at}])  # fmt: skip
        else:
            eng.remember(TOPICS[n], "u", "event", session_id=f"s{n}", now=at)
        eng.wait(10)
    [summary] = eng.list("u", kind="summary")
    assert summary.source_session_id == "s0"
    assert summary.created_at == summary.updated_at == past + timedelta(days=2)
    eng.close()


class _Failing(HashEmbedder):
    """The model failing from a moment on (its files gone, out of memory)."""

    failing = False

    def embed(self, texts: Any) -> Any:
        if self.failing:
            raise EmbeddingError("the model failed")
        return super().embed(texts)


def test_a_compression_that_fails_writes_nothing(tmp_path: Path) -> None:
    """Before, the call dropped the context records past their retention in a transaction
    of its own first, then failed summarising: the feedback they were kept for was lost
    with nothing compressed. Session 29 (h7)."""
    model = _Failing()
    eng = Engine(settings=make_settings(tmp_path, auto_compress=False), store=MemoryStore(),
                 embedder=model)  # fmt: skip
    for n in range(3):
        eng.ingest_conversation(turns(n, SESSION if n == 0 else None), "u", f"s{n}",
                                now=NOW + timedelta(days=n))  # fmt: skip
    block = eng.context("When is Ben's cello recital?", "u", now=NOW)
    assert block.context_id and block.memories
    model.failing = True
    later = NOW + timedelta(days=3650)  # every record past its retention
    with pytest.raises(EmbeddingError):
        eng.compress("u", force=True, now=later)
    assert eng.feedback("u", block.context_id, helpful=True).usefulness  # the record kept
    assert eng.list("u", kind="summary") == []
    model.failing = False
    assert eng.compress("u", force=True, now=later).summaries
    with pytest.raises(NotFoundError):  # expired by the compression that succeeded
        eng.feedback("u", block.context_id, helpful=True)
    eng.close()
