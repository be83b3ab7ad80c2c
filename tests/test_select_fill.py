"""How much of a budget the automatic selection fills (issue 12): a typed learning needs
more relevance the more of the block more relevant memories already take
(``recall.select.needed_relevance``), the invariants unrelated to the message come last,
by score, within a share of the budget (``recall.select.unrelated_invariant``), and any
other typed learning unrelated to it is left out (``recall.select.unrelated_learning``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Kind, Memory
from engrain.model import Provenance
from engrain.recall.classify import Intent
from engrain.recall.select import (
    ANSWER_PROCEDURAL_MIN_RELEVANCE,
    BACKGROUND_TOKENS,
    FULL_BLOCK_RELEVANCE,
    PROCEDURAL_MIN_RELEVANCE,
    UNRELATED_INVARIANT_SHARE,
    UNRELATED_RELEVANCE,
    Ranked,
    area_of,
    correction_below,
    fill_order,
    needed_relevance,
    present_below,
    procedural_min_relevance,
    select_gated,
    threshold_for,
    unrelated_invariant,
    unrelated_learning,
)

from .conftest import NOW


def _memory(mid: str, kind: Kind, *, pinned: bool = False, chunk: bool = False,
            domains: tuple[str, ...] = ()) -> Memory:  # fmt: skip
    return Memory(id=mid, user_id="u", content=mid, memory_type=kind.default_memory_type,
                  kind=kind, created_at=NOW, updated_at=NOW, pinned=pinned, domains=domains,
                  provenance=Provenance(turn_ids=("t1",) if chunk else ()))  # fmt: skip


def _select(ranked: list[Ranked], tokens: dict[str, int], budget: int, *,
            thresholds: bool = True,
            intent: Intent = Intent.DEBUGGING) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    selected, _, decisions = select_gated(
        ranked, line_tokens=lambda m: tokens[m.id], token_budget=budget,
        intent=intent, apply_threshold=thresholds,
    )  # fmt: skip
    return [s.memory.id for s in selected], {d.item.memory.id: d.reason for d in decisions}


def test_needed_relevance_rises_with_the_share_of_the_block_taken() -> None:
    assert needed_relevance(0, 2000) == 0.0
    assert needed_relevance(1000, 2000) == pytest.approx(FULL_BLOCK_RELEVANCE / 2)
    assert needed_relevance(2000, 2000) == pytest.approx(FULL_BLOCK_RELEVANCE)
    assert needed_relevance(2500, 2000) == pytest.approx(FULL_BLOCK_RELEVANCE)
    assert needed_relevance(10, 0) == FULL_BLOCK_RELEVANCE


#: Three memories clearly about the message take 600 tokens, then one loosely related
#: (relevance 0.3) and one barely (0.22), all past their thresholds on their scores.
RANKED = [
    Ranked(_memory("a", Kind.PATTERN), 0.9, 0.6, 1.0),
    Ranked(_memory("b", Kind.DECISION), 0.8, 0.5, 0.9),
    Ranked(_memory("c", Kind.FACT), 0.7, 0.4, 0.8),
    Ranked(_memory("loose", Kind.GOLDEN_PATH), 0.6, 0.2, 0.3),
    Ranked(_memory("barely", Kind.FACT), 0.5, 0.15, 0.22),
]
TOKENS = {"a": 199, "b": 199, "c": 199, "loose": 99, "barely": 99}


def test_a_loosely_related_memory_joins_an_emptier_block_only() -> None:
    # 600 of 1,000 taken: 0.24 needed, "loose" (0.30) passes; then 700 of 1,000: 0.28
    chosen, why = _select(RANKED, TOKENS, 1_000)
    assert chosen == ["a", "b", "c", "loose"]
    assert "below 0.28" in why["barely"] and "700/1000" in why["barely"]
    # the same memories against a budget they fill less: every one joins
    assert _select(RANKED, TOKENS, 3_000)[0] == ["a", "b", "c", "loose", "barely"]
    # 600 of 700 taken: 0.34 needed, neither joins although "loose" fits
    chosen, why = _select(RANKED, TOKENS, 700)
    assert chosen == ["a", "b", "c"]
    assert "below 0.34" in why["loose"]


def test_an_explicit_budget_is_filled_without_the_rising_need() -> None:
    assert _select(RANKED, TOKENS, 700, thresholds=False)[0] == ["a", "b", "c", "loose"]


def test_conversation_chunks_do_not_need_more_relevance_as_the_block_fills() -> None:
    chunk = Ranked(_memory("chunk", Kind.FACT, chunk=True), 0.5, 0.15, 0.22)
    chosen, _ = _select([*RANKED[:3], chunk], {**TOKENS, "chunk": 99}, 800)
    assert chosen == ["a", "b", "c", "chunk"]


def test_a_leading_pin_less_relevant_than_a_memory_does_not_raise_what_it_needs() -> None:
    pin = Ranked(_memory("pin", Kind.FACT, pinned=True), 0.9, 0.2, 0.26)
    ranked = [pin, Ranked(_memory("mid", Kind.FACT), 0.6, 0.2, 0.27)]
    # the pin leads (relevance >= 0.25) and takes 700 of 1,000 tokens; "mid" (0.27) needs
    # only what more relevant memories take (none): 0.0, not 0.28
    chosen, _ = _select(ranked, {"pin": 699, "mid": 99}, 1_000)
    assert chosen == ["pin", "mid"]


def test_unrelated_invariants_come_last_by_score_within_their_share() -> None:
    invariants = [
        Ranked(_memory("inv-used", Kind.INVARIANT), 0.45, 0.05, 0.1),
        Ranked(_memory("inv-rare", Kind.INVARIANT), 0.30, 0.15, 0.19),
        Ranked(_memory("inv-related", Kind.INVARIANT), 0.50, 0.30, 0.45),
    ]
    assert [unrelated_invariant(r) for r in invariants] == [True, True, False]
    assert all(r.relevance < UNRELATED_RELEVANCE for r in invariants[:2])
    order = [r.memory.id for r in fill_order([], [*invariants, *RANKED], by_relevance=True)]
    # related memories most relevant first, then the unrelated invariants in score order
    assert order == ["a", "b", "c", "inv-related", "loose", "barely", "inv-used", "inv-rare"]
    budget = 400
    share = int(budget * UNRELATED_INVARIANT_SHARE)
    size = share * 2 // 3  # room for one unrelated invariant in the share, not two
    tokens = {**TOKENS, "a": 9, "b": 9, "c": 9, "loose": 9, "barely": 9,
              "inv-used": size, "inv-rare": size, "inv-related": size}  # fmt: skip
    chosen, why = _select([*invariants, *RANKED], tokens, budget)
    assert "inv-related" in chosen and "inv-used" in chosen and "inv-rare" not in chosen
    assert "unrelated invariants' share full" in why["inv-rare"]


def test_an_unrelated_invariant_is_not_held_to_the_rising_need() -> None:
    # the block is nearly full of relevant memories: a need of 0.3, which an invariant at
    # relevance 0.0 never meets; it joins in its share, on its priors
    inv = Ranked(_memory("inv", Kind.INVARIANT), 0.3, 0.0, 0.0)
    chosen, _ = _select([*RANKED[:3], inv], {**TOKENS, "inv": 30}, 800)
    assert chosen == ["a", "b", "c", "inv"]


def test_unrelated_invariants_take_at_most_the_background_whatever_the_budget() -> None:
    # a 5,000-token budget's share (1,000 tokens) would hold all three; the background
    # holds what the smallest budget's share holds (100 tokens): two of 44
    invariants = [Ranked(_memory(f"inv-{i}", Kind.INVARIANT), 0.4 - i / 100, 0.0, 0.05)
                  for i in range(3)]  # fmt: skip
    tokens = {**TOKENS, **{r.memory.id: 44 for r in invariants}}
    chosen, why = _select([*RANKED, *invariants], tokens, 5_000)
    assert int(5_000 * UNRELATED_INVARIANT_SHARE) > BACKGROUND_TOKENS
    assert [i for i in chosen if i.startswith("inv")] == ["inv-0", "inv-1"]
    assert f"(88/{BACKGROUND_TOKENS} tokens)" in why["inv-2"]


def test_an_unrelated_invariant_of_the_messages_area_goes_first() -> None:
    # the message's clear match ("a", relevance 1.0) is in "training": the unrelated
    # invariant of that area is walked before a better-scored one of another part
    match = Ranked(_memory("a", Kind.PATTERN, domains=("training",)), 0.9, 0.6, 1.0)
    other = Ranked(_memory("inv-other", Kind.INVARIANT, domains=("ci",)), 0.45, 0.05, 0.1)
    ours = Ranked(_memory("inv-ours", Kind.INVARIANT, domains=("training",)), 0.2, 0.0, 0.0)
    order = fill_order([], [match, other, ours], by_relevance=True,
                       area=area_of([match, other, ours]))  # fmt: skip
    assert [r.memory.id for r in order] == ["a", "inv-ours", "inv-other"]
    tokens = {"a": 99, "inv-other": 60, "inv-ours": 60}
    chosen, why = _select([match, other, ours], tokens, 2_000)
    assert chosen == ["a", "inv-ours"]
    assert "unrelated invariants' share full" in why["inv-other"]
    # without an area (no clear match) the score decides, as before
    plain = Ranked(_memory("a", Kind.PATTERN), 0.9, 0.6, 0.8)
    assert _select([plain, other, ours], tokens, 2_000)[0] == ["a", "inv-other"]


def test_a_loosely_related_preference_joins_a_request_for_work_only() -> None:
    assert PROCEDURAL_MIN_RELEVANCE < 0.3 < ANSWER_PROCEDURAL_MIN_RELEVANCE
    assert procedural_min_relevance(Intent.GENERATION) == PROCEDURAL_MIN_RELEVANCE
    for intent in (Intent.QUESTION, Intent.DEBUGGING, Intent.ANALYSIS, Intent.DISCUSSION,
                   Intent.CONTINUATION):  # fmt: skip
        assert procedural_min_relevance(intent) == ANSWER_PROCEDURAL_MIN_RELEVANCE
    pref = Ranked(_memory("pref", Kind.PREFERENCE), 0.3, 0.2, 0.3)
    tokens = {"pref": 20}
    assert _select([pref], tokens, 2_000, intent=Intent.GENERATION)[0] == ["pref"]
    chosen, why = _select([pref], tokens, 2_000, intent=Intent.QUESTION)
    assert chosen == [] and "below 0.35" in why["pref"]
    # an explicit budget (no thresholds) keeps the one floor for every intent
    assert _select([pref], tokens, 2_000, intent=Intent.QUESTION, thresholds=False)[0] == ["pref"]


def test_a_context_note_is_judged_on_its_relevance_against_its_threshold() -> None:
    """A context note ("chasing issue #1432: the rename test is flaky on windows-2022")
    passes a bug report's threshold (0.25) on its recency and use at relevance 0.22: it
    needs the relevance the score needs (``select.present_below``). A fact at the same
    relevance and score, and a note as relevant as the threshold, are unaffected; without
    thresholds (an explicit budget) nothing changes."""
    limit = threshold_for(Kind.CONTEXT, Intent.DEBUGGING)
    ranked = [
        Ranked(_memory("match", Kind.PATTERN), 0.9, 0.6, 1.0),
        Ranked(_memory("flaky", Kind.CONTEXT), 0.31, 0.27, limit - 0.03),
        Ranked(_memory("fact", Kind.FACT), 0.31, 0.27, limit - 0.03),
        Ranked(_memory("current", Kind.CONTEXT), 0.31, 0.27, limit),
    ]
    tokens = {"match": 40, "flaky": 40, "fact": 40, "current": 40}
    chosen, why = _select(ranked, tokens, 2_000)
    assert chosen == ["match", "current", "fact"]
    assert why["flaky"] == f"about the present, relevance {limit - 0.03:.3f} below {limit:.2f}"
    assert present_below(ranked[1], limit) and not present_below(ranked[2], limit)
    assert "flaky" in _select(ranked, tokens, 2_000, thresholds=False)[0]


@pytest.mark.parametrize("intent", [Intent.DEBUGGING, Intent.QUESTION, Intent.GENERATION])
def test_a_correction_is_judged_on_its_relevance_against_its_threshold(intent: Intent) -> None:
    """A correction ("the 2.x MSRV has been Rust 1.78 since 2.3.0, not 1.74") passes its
    intent's threshold on its recency and use at a relevance under it: it needs the
    relevance the score needs (``select.correction_below``), as a context note does. A
    fact at the same relevance and score, and a correction as relevant as the threshold,
    are unaffected; without thresholds (an explicit budget) nothing changes."""
    limit = threshold_for(Kind.CORRECTION, intent)
    ranked = [
        Ranked(_memory("match", Kind.PATTERN), 0.9, 0.6, 1.0),
        Ranked(_memory("msrv", Kind.CORRECTION), limit + 0.05, 0.27, limit - 0.03),
        Ranked(_memory("fact", Kind.FACT), limit + 0.05, 0.27, limit - 0.03),
        Ranked(_memory("now", Kind.CORRECTION), limit + 0.05, 0.27, limit),
    ]
    tokens = {"match": 40, "msrv": 40, "fact": 40, "now": 40}
    chosen, why = _select(ranked, tokens, 2_000, intent=intent)
    assert chosen == ["match", "now", "fact"]
    assert why["msrv"] == f"a correction, relevance {limit - 0.03:.3f} below {limit:.2f}"
    assert correction_below(ranked[1], limit) and not correction_below(ranked[2], limit)
    assert not correction_below(ranked[3], limit)
    assert "msrv" in _select(ranked, tokens, 2_000, intent=intent, thresholds=False)[0]


@pytest.mark.parametrize("intent", [Intent.DEBUGGING, Intent.QUESTION, Intent.CONTINUATION])
def test_a_learning_unrelated_to_the_message_is_not_carried_in_by_its_priors(
    intent: Intent,
) -> None:
    """A decision and a fact under the unrelated level (relevance 0.15) pass a bug report's
    threshold on recency and use alone (score 0.30): they are left out, and ``explain()``
    says why. An invariant as unrelated keeps its background place, a conversation chunk
    and a learning at the unrelated level itself are judged as before, a pin gives no
    exception; without thresholds (an explicit budget) every one is filled."""
    low = UNRELATED_RELEVANCE - 0.05
    ranked = [
        Ranked(_memory("match", Kind.PATTERN), 0.9, 0.6, 1.0),
        Ranked(_memory("dec", Kind.DECISION), 0.6, 0.1, low),
        Ranked(_memory("fact", Kind.FACT), 0.6, 0.1, low),
        Ranked(_memory("pinned", Kind.GOLDEN_PATH, pinned=True), 0.6, 0.1, low),
        Ranked(_memory("inv", Kind.INVARIANT), 0.6, 0.1, low),
        Ranked(_memory("chunk", Kind.FACT, chunk=True), 0.6, 0.1, low),
        Ranked(_memory("edge", Kind.FACT), 0.6, 0.1, UNRELATED_RELEVANCE),
    ]
    assert [unrelated_learning(r) for r in ranked] == [
        False, True, True, True, False, False, False,
    ]  # fmt: skip
    tokens = {r.memory.id: 40 for r in ranked}
    chosen, why = _select(ranked, tokens, 5_000, intent=intent)
    assert chosen == ["match", "edge", "chunk", "inv"]
    for mid in ("dec", "fact", "pinned"):
        assert why[mid] == f"unrelated to the message, relevance {low:.3f} below 0.20"
    assert sorted(_select(ranked, tokens, 5_000, thresholds=False, intent=intent)[0]) == sorted(
        tokens
    )


def test_a_learning_under_its_threshold_is_named_by_its_score_first() -> None:
    """The threshold is the first test: an unrelated learning whose score does not pass is
    named by its score, as before."""
    ranked = [Ranked(_memory("dec", Kind.DECISION), 0.1, 0.1, 0.1)]
    _, why = _select(ranked, {"dec": 40}, 2_000)
    assert why["dec"] == "score 0.100 below 0.25"


_KINDS = (Kind.FACT, Kind.INVARIANT, Kind.CONTEXT, Kind.CORRECTION, Kind.PREFERENCE,
          Kind.PATTERN, Kind.DECISION)  # fmt: skip


_ROWS = st.tuples(
    st.sampled_from(_KINDS), st.booleans(), st.booleans(), st.floats(0.0, 1.0),
    st.floats(0.0, 1.0), st.integers(5, 400),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_ROWS, min_size=1, max_size=40),
    st.integers(20, 3_000),
    st.sampled_from(list(Intent)),
    st.booleans(),
)
def test_without_explanations_the_fill_is_the_one_explained(
    rows: list[tuple[Kind, bool, bool, float, float, int]],
    budget: int,
    intent: Intent,
    thresholds: bool,
) -> None:
    """A call without ``explain`` passes over a memory whose line's lower bound cannot fit
    before its other tests (``_consider``) and stops once no line fits: it selects what
    ``explain()`` selects, in the same order, with the same tokens used."""
    ranked = [
        Ranked(_memory(f"m{i}", kind, pinned=pinned, chunk=chunk), score, score, relevance)
        for i, (kind, pinned, chunk, score, relevance, _) in enumerate(rows)
    ]
    tokens = {f"m{i}": cost for i, (*_, cost) in enumerate(rows)}
    floors = {mid: cost - cost // 3 for mid, cost in tokens.items()}  # a bound below the count
    made = [
        select_gated(
            ranked,
            line_tokens=lambda m: tokens[m.id],
            line_floor=lambda m: floors[m.id],
            token_budget=budget,
            intent=intent,
            apply_threshold=thresholds,
            explain=explain,
        )
        for explain in (False, True)
    ]
    quiet, explained = ([(s.memory.id, s.tokens) for s in m[0]] for m in made)
    assert quiet == explained
    assert made[0][1] == made[1][1]
