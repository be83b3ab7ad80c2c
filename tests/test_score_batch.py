"""``score_batch.gated_totals`` is ``score_gated(...).total`` exactly, for any pool and query:
``context()`` ranks and thresholds by it, so a difference in the last bit would change what
is injected."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Engine, Kind, Memory
from engrain.embed.hashing import HashEmbedder
from engrain.recall.assemble import Format
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.score import Query, gated_weights, present_relevance, score_gated
from engrain.recall.score_batch import gated_scores, gated_totals
from engrain.store import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gating

DOMAINS = ["auth", "billing", "database", "deployment", "payments", "testing"]
domain_sets = st.lists(st.sampled_from(DOMAINS), max_size=3, unique=True).map(tuple)
unit = st.floats(-0.5, 1.5, allow_nan=False)


@st.composite
def items(draw: st.DrawFn) -> tuple[Memory, float, float]:
    """A memory of any kind, age (minutes to years, some in the future), domains and use
    count, with a relevance and a co-occurrence bonus (some outside [0, 1])."""
    kind = draw(st.sampled_from(list(Kind)))
    written = NOW - timedelta(seconds=draw(st.integers(-86_400, 3 * 365 * 86_400)))
    event = draw(st.none() | st.integers(0, 2 * 365 * 86_400))
    memory = Memory(
        id=f"m{draw(st.integers(0, 10**9))}", user_id="u", content="x",
        memory_type=kind.default_memory_type, kind=kind, created_at=written,
        updated_at=written, event_at=None if event is None else NOW - timedelta(seconds=event),
        domains=draw(domain_sets), access_count=draw(st.integers(0, 60)),
    )  # fmt: skip
    return memory, draw(unit), draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]) | unit)


@st.composite
def queries(draw: st.DrawFn) -> Query:
    """A classification of any intent, domains and weight shifts, and focus areas."""
    classification = Classification(
        complexity=draw(st.sampled_from(list(Complexity))),
        intent=draw(st.sampled_from(list(Intent))),
        domains=draw(domain_sets), turn=draw(st.integers(0, 20)), has_code=draw(st.booleans()),
        references_history=draw(st.booleans()), signals=(),
    )  # fmt: skip
    focus = draw(st.lists(st.sampled_from(DOMAINS), max_size=2, unique=True).map(tuple))
    return Query(classification, gated_weights(classification), NOW, focus)


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=25), queries())
def test_gated_totals_equal_score_gated(pool: list[tuple[Memory, float, float]],
                                        query: Query) -> None:  # fmt: skip
    want = [
        score_gated(memory, relevance, query.classification, query.weights, query.now,
                    cooccurrence=bonus, focus_areas=query.focus_areas).total
        for memory, relevance, bonus in pool
    ]  # fmt: skip
    assert gated_totals(pool, query) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=25), queries())
def test_gated_scores_give_present_relevance(pool: list[tuple[Memory, float, float]],
                                             query: Query) -> None:  # fmt: skip
    """Each candidate's second number is the relevance selection judges it by, bit for bit
    (a stale context note's scaled down, any other's as given), beside the same total."""
    got = gated_scores(pool, query)
    assert [total for total, _ in got] == gated_totals(pool, query)
    want = [present_relevance(memory, relevance, query.now) for memory, relevance, _ in pool]
    assert [present for _, present in got] == want


def test_context_injects_what_explain_decides(tmp_path: Path) -> None:
    """``context()`` (batch totals, selection stopping once the budget is full, the block's
    tokens from its lines) and ``explain()`` (every candidate scored and costed one by one)
    give the same block, on the gating evaluation's two projects in both formats."""
    data = gating.load_data()
    for fmt in Format:
        options = GateOptions(format=fmt)
        for project, rows in data.projects.items():
            engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                            embedder=HashEmbedder())  # fmt: skip
            engine.import_records(gating.memory_records(rows, project), now=NOW)
            messages = [m for m in data.messages if m["project"] == project][:12]
            for message in messages:
                text, turn = message["text"], message.get("turn", 0)
                explained = engine.explain(text, gating.USER, project=project, turn=turn,
                                           options=options, now=NOW)  # fmt: skip
                context = engine.context(text, gating.USER, project=project, turn=turn,
                                         options=options, now=NOW)  # fmt: skip
                assert context.gated is not None
                assert [m.id for m in context.memories] == [m.id for m in explained.memories]
                assert context.text == explained.text
                assert context.tokens == explained.tokens_used == count_tokens(context.text)
                assert [s.score for s in context.gated.selected] == [
                    s.score for s in explained.selected
                ]
