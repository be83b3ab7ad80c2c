"""``score_batch.gated_totals`` is ``score_gated(...).total`` exactly, for any pool and query:
``context()`` ranks and thresholds by it, so a difference in the last bit would change what
is injected."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Engine, Kind, Memory
from engrain.embed.hashing import HashEmbedder
from engrain.recall.assemble import Format
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.rank import _score
from engrain.recall.relevance import Candidate
from engrain.recall.score import Query, gated_weights, present_relevance, score_gated
from engrain.recall.score_batch import (
    _at_least,
    _at_most,
    gated_columns,
    gated_scores,
    gated_totals,
)
from engrain.store import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gating

DOMAINS = ["auth", "billing", "database", "deployment", "payments", "testing"]
domain_sets = st.lists(st.sampled_from(DOMAINS), max_size=3, unique=True).map(tuple)
unit = st.floats(-0.5, 1.5, allow_nan=False)
#: Texts stating no end, an end resolved ahead of or behind ``NOW`` by the time written.
TEXTS = ["x", "Jonas releases until February.", "Leave to the end of March 2026.",
         "Code freeze until 30 September 2025.", "We are migrating this month."]  # fmt: skip


@st.composite
def items(draw: st.DrawFn) -> tuple[Memory, float, float]:
    """A memory of any kind, age (minutes to years, some in the future), domains and use
    count, with a relevance and a co-occurrence bonus (some outside [0, 1])."""
    kind = draw(st.sampled_from(list(Kind)))
    written = NOW - timedelta(seconds=draw(st.integers(-86_400, 3 * 365 * 86_400)))
    event = draw(st.none() | st.integers(0, 2 * 365 * 86_400))
    used = draw(st.none() | st.integers(-86_400, 2 * 365 * 86_400))
    memory = Memory(
        id=f"m{draw(st.integers(0, 10**9))}", user_id="u", content=draw(st.sampled_from(TEXTS)),
        memory_type=kind.default_memory_type, kind=kind, created_at=written,
        updated_at=written, event_at=None if event is None else NOW - timedelta(seconds=event),
        domains=draw(domain_sets), access_count=draw(st.integers(0, 60)),
        last_accessed_at=None if used is None else NOW - timedelta(seconds=used),
    )  # fmt: skip
    return memory, draw(unit), draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]) | unit)


@st.composite
def queries(draw: st.DrawFn) -> Query:
    """A classification of any intent, domains and weight shifts, focus areas, a note
    about the present judged by its last use or not, by the end it states or not, and the
    tag term off or on (a tag the message's terms name lifted, others cut or not)."""
    classification = Classification(
        complexity=draw(st.sampled_from(list(Complexity))),
        intent=draw(st.sampled_from(list(Intent))),
        domains=draw(domain_sets), turn=draw(st.integers(0, 20)), has_code=draw(st.booleans()),
        references_history=draw(st.booleans()), signals=(),
    )  # fmt: skip
    focus = draw(st.lists(st.sampled_from(DOMAINS), max_size=2, unique=True).map(tuple))
    terms = frozenset(draw(st.lists(st.sampled_from(DOMAINS), max_size=3)))
    tags = st.sampled_from([0.0, 0.0, 0.03, 0.05, 0.1])  # the tag term (recall.tags)
    return Query(classification, gated_weights(classification), NOW, focus, draw(st.booleans()),
                 draw(st.booleans()), draw(tags), draw(tags), terms,
                 draw(st.booleans()))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=25), queries())
def test_gated_totals_equal_score_gated(pool: list[tuple[Memory, float, float]],
                                        query: Query) -> None:  # fmt: skip
    want = [
        score_gated(memory, relevance, query.classification, query.weights, query.now,
                    cooccurrence=bonus, focus_areas=query.focus_areas,
                    present_use=query.present_use, stated_span=query.stated_span,
                    named_tag=query.named_tag, unnamed_tag=query.unnamed_tag,
                    terms=query.terms, names_tags=query.names_tags).total
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
    want = [
        present_relevance(
            memory, relevance, query.now, by_use=query.present_use, by_span=query.stated_span
        )
        for memory, relevance, _ in pool
    ]
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


def _bits(values: list[float]) -> list[str]:
    """Each float's exact bits (``==`` takes ``-0.0`` for ``0.0``)."""
    return [v.hex() for v in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=40), queries())
def test_gated_columns_are_score_gated_bit_for_bit(pool: list[tuple[Memory, float, float]],
                                                   query: Query) -> None:  # fmt: skip
    """The columns hold ``score_gated``'s totals and ``present_relevance``'s relevances to
    the last bit, the sign of a zero included."""
    totals, present = gated_columns(pool, query)
    want = [
        score_gated(memory, relevance, query.classification, query.weights, query.now,
                    cooccurrence=bonus, focus_areas=query.focus_areas,
                    present_use=query.present_use, stated_span=query.stated_span,
                    named_tag=query.named_tag, unnamed_tag=query.unnamed_tag,
                    terms=query.terms, names_tags=query.names_tags).total
        for memory, relevance, bonus in pool
    ]  # fmt: skip
    assert _bits(totals.tolist()) == _bits(want)
    relevances = [
        present_relevance(
            memory, relevance, query.now, by_use=query.present_use, by_span=query.stated_span
        )
        for memory, relevance, _ in pool
    ]
    assert _bits(present.tolist()) == _bits(relevances)


@pytest.mark.parametrize("value", [-0.0, 0.0, float("nan"), -1e-300, 1.0, 1.5, float("inf")])
def test_clamps_are_pythons(value: float) -> None:
    """A clamp of a column gives what Python's ``min(1.0, max(0.0, v))`` gives: ``-0.0`` and
    NaN clamp to ``0.0`` (``max`` keeps its first argument unless the second is greater)."""
    got = _at_most(1.0, _at_least(0.0, np.array([value]))).tolist()
    assert _bits(got) == _bits([min(1.0, max(0.0, value))])


def test_gated_sort_keeps_the_pool_order_of_equal_totals(tmp_path: Path) -> None:
    """``rank._score`` ranks best first and, among equal totals, in the pool's order (as a
    stable ``sorted(reverse=True)``): the same memories scored alike keep their order."""
    written = NOW - timedelta(days=3)
    pool = [
        Candidate(Memory(id=f"m{i}", user_id="u", content="x", kind=Kind.FACT,
                         memory_type=Kind.FACT.default_memory_type, created_at=written,
                         updated_at=written), 0.5, 0.0, {3: 0.9, 20: 0.7}.get(i, 0.5))
        for i in range(60)
    ]  # fmt: skip
    classification = Classification(Complexity.SIMPLE, Intent.QUESTION, (), 0, False, False, ())
    query = Query(classification, gated_weights(classification), NOW, ())
    ranked, _ = _score(pool, GateOptions(), query, None, explain=False)
    rest = [f"m{i}" for i in range(60) if i not in (3, 20)]
    assert [r.memory.id for r in ranked] == ["m3", "m20", *rest]
    assert ranked[0].score > ranked[1].score > ranked[2].score == ranked[-1].score
