"""``bench/gating_lopo.py`` on hand-made cells: a knob's value chosen on the other sets and
scored on the one left out, a candidate's verdict set by set, the limits a choice keeps, and
the patches a candidate applies and undoes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_lopo as gl  # noqa: E402

from engrain.recall import score, score_batch, select  # noqa: E402

from .conftest import NOW  # noqa: E402


def _cell(found: int, labels: int = 10, leaking: int = 0, messages: int = 10,
          tokens: int = 5000, per_message: dict[str, list[str]] | None = None,
          ) -> dict[str, Any]:  # fmt: skip
    return {"found": found, "labels": labels, "leaking": leaking, "messages": messages,
            "tokens": tokens, "per_message": per_message or {}}  # fmt: skip


def test_the_value_is_chosen_on_the_other_sets_and_scored_on_the_one_left_out() -> None:
    # "k=1" wins big on a and b (fitted to them), loses on c; "k=2" is even everywhere
    cells = {
        "default": {"a": _cell(5), "b": _cell(5), "c": _cell(8)},
        "k=1": {"a": _cell(9), "b": _cell(9), "c": _cell(4)},
        "k=2": {"a": _cell(6), "b": _cell(6), "c": _cell(9)},
    }
    result = gl.lopo(cells, ["default", "k=1", "k=2"], ["a", "b", "c"])
    chosen = {s: c["chosen"] for s, c in result["per_set"].items()}
    # leaving a out: b+c say k=2 (15) over k=1 (13) and default (13)
    assert chosen == {"a": "k=2", "b": "k=2", "c": "k=1"}
    assert result["lopo"] == pytest.approx((6 + 6 + 4) / 30)
    assert result["default"] == pytest.approx(18 / 30)
    # chosen on all three at once: k=1 (22) over k=2 (21); scored on the same sets
    assert result["in_sample_choice"] == "k=1"
    assert result["in_sample"] == pytest.approx(22 / 30)


def test_ties_keep_the_default_and_a_value_beyond_the_limits_is_never_chosen() -> None:
    cells = {
        "default": {"a": _cell(5), "b": _cell(5)},
        "even": {"a": _cell(6), "b": _cell(4)},
        "leaky": {"a": _cell(9, leaking=1), "b": _cell(9)},
        "long": {"a": _cell(9), "b": _cell(9, tokens=12_010)},
    }
    assert gl.choose(cells, ["default", "even", "leaky", "long"], ["a", "b"]) == "default"


def test_a_set_already_beyond_a_limit_may_stay_there_but_not_go_further() -> None:
    base = _cell(5, leaking=1, tokens=13_000)  # 0.10 of messages leak, 1,300 tokens
    assert gl.within_limits(_cell(6, leaking=1, tokens=13_000), base)
    assert not gl.within_limits(_cell(6, leaking=2, tokens=13_000), base)
    assert not gl.within_limits(_cell(6, leaking=1, tokens=13_010), base)
    assert gl.within_limits(_cell(6, leaking=0, tokens=12_000), _cell(5))
    assert not gl.within_limits(_cell(6, leaking=1, tokens=12_000), _cell(5))
    # without a token limit only the must-exclude limit binds
    assert gl.within_limits(_cell(6, tokens=90_000), _cell(5), max_tokens=float("inf"))
    assert not gl.within_limits(_cell(6, leaking=1), _cell(5), max_tokens=float("inf"))


def test_a_verdict_counts_flips_message_by_message_and_losses_beyond_noise() -> None:
    base = {"m1": ["x", "y"], "m2": ["z"]}
    cells = {
        "default": {"a": _cell(3, per_message=base), "b": _cell(3, per_message=base),
                    "c": _cell(3, per_message=base)},
        "c1": {"a": _cell(3, per_message={"m1": ["x", "w"], "m2": ["z"]}),
               "b": _cell(4, per_message={"m1": ["x", "y", "w"], "m2": ["z"]}),
               "c": _cell(4, per_message={"m1": ["x", "y", "w"], "m2": ["z"]})},
        "c2": {"a": _cell(5), "b": _cell(5), "c": _cell(1)},
    }  # fmt: skip
    one = gl.verdict(cells, "c1", ["a", "b", "c"])
    assert one["per_set"]["a"] == {"gained": 1, "lost": 1, "net": 0, "leaking": 0,
                                   "mean_tokens": 500.0, "tokens_change": 0.0,
                                   "within_limits": True}  # fmt: skip
    assert (one["wins"], one["losses_beyond_noise"], one["net"], one["adopt"]) == (2, 0, 2, True)
    two = gl.verdict(cells, "c2", ["a", "b", "c"])
    # wins on two of three, but loses two labels on c: not adopted
    assert (two["wins"], two["losses_beyond_noise"], two["adopt"]) == (2, 1, False)


def test_a_patch_reaches_every_module_that_imported_the_constant_and_is_undone() -> None:
    before = score.BOOST_FULL_RELEVANCE
    with gl.patched([("engrain.recall.score", "BOOST_FULL_RELEVANCE", 0.65)]):
        assert score.BOOST_FULL_RELEVANCE == 0.65
        assert score_batch.BOOST_FULL_RELEVANCE == 0.65
    assert score.BOOST_FULL_RELEVANCE == before == score_batch.BOOST_FULL_RELEVANCE
    floor = gl.candidates()
    assert any(c.name == "relevance_floor=0.6" for c in floor)
    from engrain.recall import relevance

    default = relevance.gather.__kwdefaults__["floor"]
    with gl.patched([("engrain.recall.relevance", "gather.floor", 0.6)]):
        assert relevance.gather.__kwdefaults__["floor"] == 0.6
    assert relevance.gather.__kwdefaults__["floor"] == default


def test_threshold_shifts_move_the_named_column_only() -> None:
    (_, _, general) = gl._shifted("THRESHOLDS", -0.05, 0)
    (_, _, both) = gl._shifted("THRESHOLDS", 0.03)
    for intent, (g, i) in select.THRESHOLDS.items():
        assert general[intent] == (pytest.approx(g - 0.05), i)
        assert both[intent] == (pytest.approx(g + 0.03), pytest.approx(i + 0.03))


def test_every_knob_has_values_and_the_default_comes_first() -> None:
    every = gl.candidates()
    assert every[0].name == "default"
    names = [c.name for c in every]
    assert len(names) == len(set(names))
    knobs = gl.knobs_of(every)
    assert "default" not in knobs and all(knobs.values())


def test_the_protocol_answers_the_tune_half_only() -> None:
    from gating import load_data

    data = load_data(name="pulse")
    tune = gl.one_split(data)
    assert tune.messages and {m["split"] for m in tune.messages} == {"tune"}
    assert not tune.trivial
    held = gl.one_split(data, "held")
    assert {m["split"] for m in held.messages} == {"held"}
    assert len(tune.messages) + len(held.messages) == len(data.messages)


def test_history_splits_a_steps_change_between_fitted_and_unseen_sets() -> None:
    def report(**found: int) -> dict[str, Any]:
        return {"cells": {"default": {s: _cell(f) for s, f in found.items()}}}

    reports = [("old", report(a=5, b=5, c=5)), ("mid", report(a=8, b=7, c=5)),
               ("new", report(a=8, b=7, c=6))]  # fmt: skip
    result = gl.history(reports, {"old→mid": ["c"]})
    assert result["steps"]["old→mid"] == {
        "fitted": {"sets": ["a", "b"], "change": 5, "labels": 20},
        "unseen": {"sets": ["c"], "change": 0, "labels": 10},
    }
    assert result["steps"]["mid→new"]["fitted"]["change"] == 1
    assert result["found"]["new"] == {"a": 8, "b": 7, "c": 6}


def test_generation_by_kind_holds_the_unlifted_kinds_to_a_questions_threshold() -> None:
    """Session 22's measured rule: under generation, the kinds the generation multipliers
    lift (patterns, golden paths) and invariants keep the table's thresholds; every other
    kind takes a question's; other intents are unchanged."""
    from engrain.model import Kind
    from engrain.recall.classify import Intent

    gen, question = select.THRESHOLDS[Intent.GENERATION], select.THRESHOLDS[Intent.QUESTION]
    expected = {
        Kind.PATTERN: gen[0], Kind.GOLDEN_PATH: gen[0], Kind.INVARIANT: gen[1],
        Kind.DECISION: question[0], Kind.FACT: question[0], Kind.ANTIPATTERN: question[0],
        Kind.CONTEXT: question[0], Kind.CORRECTION: question[0],
    }  # fmt: skip
    for kind, value in expected.items():
        assert gl._threshold_by_kind(kind, Intent.GENERATION) == pytest.approx(value)
        assert gl._threshold_by_kind(kind, Intent.DEBUGGING) == select.threshold_for(
            kind, Intent.DEBUGGING
        )
    assert gl._threshold_by_kind(Kind.FACT, Intent.GENERATION, 0.1) == pytest.approx(
        question[0] + 0.1
    )


def test_pins_by_relevance_and_preferences_first_only_reorder_the_walk() -> None:
    from engrain import Kind, Memory

    def ranked(mid: str, kind: Kind, relevance: float, pinned: bool = False) -> select.Ranked:
        memory = Memory(id=mid, user_id="u", content=mid, kind=kind, pinned=pinned,
                        memory_type=kind.default_memory_type, created_at=NOW,
                        updated_at=NOW)  # fmt: skip
        return select.Ranked(memory, 0.5, 0.5, relevance)

    pin = ranked("pin", Kind.FACT, 0.3, pinned=True)
    rest = [ranked("fact", Kind.FACT, 0.7), ranked("pref", Kind.PREFERENCE, 0.25),
            ranked("dec", Kind.DECISION, 0.5)]  # fmt: skip
    ids = lambda order: [r.memory.id for r in order]  # noqa: E731
    assert ids(select.fill_order([pin], rest, by_relevance=True)) == ["pin", "fact", "dec", "pref"]
    assert ids(gl._pins_by_relevance([pin], rest, by_relevance=True)) == [
        "fact", "dec", "pin", "pref",
    ]  # fmt: skip
    assert ids(gl._preferences_first([pin], rest, by_relevance=True)) == [
        "pin", "pref", "fact", "dec",
    ]  # fmt: skip
    for rule in (gl._pins_by_relevance, gl._preferences_first):
        assert ids(rule([pin], rest, by_relevance=False)) == ["pin", "fact", "pref", "dec"]


def test_relevance_passes_lifts_only_clear_typed_learnings_over_their_threshold() -> None:
    from engrain import Kind, Memory

    def ranked(mid: str, kind: Kind, relevance: float, score: float) -> select.Ranked:
        memory = Memory(id=mid, user_id="u", content=mid, kind=kind,
                        memory_type=kind.default_memory_type, created_at=NOW,
                        updated_at=NOW)  # fmt: skip
        return select.Ranked(memory, score, 0.5, relevance)

    rest = [ranked("fact", Kind.FACT, 0.45, 0.2), ranked("dec", Kind.DECISION, 0.35, 0.3),
            ranked("pref", Kind.PREFERENCE, 0.6, 0.1)]  # fmt: skip
    order = gl._relevance_passes(0.4)([], rest, by_relevance=True)
    scores = {r.memory.id: r.score for r in order}
    # the fact at 0.45 passes whatever its score; the decision under the level and the
    # preference (judged on its own floor and share) keep theirs; the walk is by relevance
    assert scores == {"fact": 1.0, "dec": 0.3, "pref": 0.1}
    assert [r.memory.id for r in order] == ["pref", "fact", "dec"]
    assert [r.score for r in gl._relevance_passes(0.4)([], rest, by_relevance=False)] == [
        0.2, 0.3, 0.1,
    ]  # fmt: skip
    names = {c.name for c in gl.candidates()}
    assert {"relevance_passes=0.3", "relevance_passes=0.4", "relevance_passes=0.5"} <= names


def test_common_terms_drop_a_match_on_words_most_learnings_write() -> None:
    from engrain import Kind, Memory

    def memory(mid: str, content: str) -> Memory:
        return Memory(id=mid, user_id="u", content=content, kind=Kind.FACT,
                      memory_type=Kind.FACT.default_memory_type, created_at=NOW,
                      updated_at=NOW)  # fmt: skip

    learnings = [memory("a", "deploy the service on Friday"),
                 memory("b", "deploy needs a signed tag"),
                 memory("c", "the rota for the coffee machine"),
                 memory("d", "deploy with helm")]  # fmt: skip
    lexical = [(m, 1.0) for m in learnings]
    lex = {m.id: 1.0 for m in learnings}
    query = "how do I deploy the coffee service"
    gl._LEARNINGS[:] = learnings
    try:
        # "deploy" is in 3 of 4 learnings: stop-like at a half, not at 0.9; a memory that
        # also shares a rarer term ("service", "coffee") keeps its lexical side
        assert set(gl._common_only(0.5)(lex, lexical, query, True)) == {"b", "d"}
        assert gl._common_only(0.9)(lex, lexical, query, True) == {}
    finally:
        gl._LEARNINGS.clear()
    names = {c.name for c in gl.candidates()}
    assert {"common_terms=0.02", "common_terms=0.05", "common_terms=0.1"} <= names


def test_test_frameworks_make_a_preference_naming_one_govern_tests() -> None:
    from engrain.recall import work
    from engrain.recall.classify import classify

    compound = ("Python 3.12 with type hints everywhere, ruff for lint and format, pytest "
                "with plain asserts and tmp_path; no unittest classes.")  # fmt: skip
    # shipped: the scope's "pytest" is not the word "tests", so only the type hints govern
    assert work.governed(compound) == {work.Work.TYPES}
    (governed, asked), names = gl._with_test_frameworks(), {c.name for c in gl.candidates()}
    assert governed[2](compound) == {work.Work.TYPES, work.Work.TESTS}
    assert governed[2]("Use the latest stable toolchain.") == frozenset()  # "latest": no
    message = "add a vitest for the date picker"
    assert work.Work.TESTS in asked[2](message, classify(message))
    assert work.Work.TESTS not in work.asked(message, classify(message))
    assert "test_frameworks=on" in names


def test_sentence_weight_candidates_set_the_option_on_every_call() -> None:
    by_name = {c.name: c for c in gl.candidates()}
    for weight in (0.5, 1.0):
        chosen = by_name[f"sentence_weight={weight}"]
        assert chosen.knob == "sentence_weight" and not chosen.patches
        assert dict(chosen.options) == {"sentence_weight": weight}


def test_the_unlifted_threshold_candidate_sets_the_option_and_the_patch_still_answers() -> None:
    by_name = {c.name: c for c in gl.candidates()}
    chosen = by_name["unlifted_threshold=on"]
    assert chosen.knob == "unlifted_threshold" and not chosen.patches
    assert dict(chosen.options) == {"unlifted_threshold": True}
    # session 22's patch of ``select.threshold_for`` takes the keyword selection passes
    from engrain.model import Kind
    from engrain.recall.classify import Intent

    assert gl._threshold_by_kind(Kind.DECISION, Intent.GENERATION, by_lift=False) == 0.35


def test_the_tag_candidates_set_the_options_of_one_knob() -> None:
    by_name = {c.name: c for c in gl.candidates()}
    for weight in gl.NAMED_TAG_WEIGHTS:
        lifted = by_name[f"named_tag={weight}"]
        assert lifted.knob == "named_tag" and not lifted.patches
        assert dict(lifted.options) == {"named_tag": weight}
    for lift, cut in gl.TAG_TERMS:
        both = by_name[f"tag={lift}/-{cut}"]
        assert both.knob == "named_tag" and not both.patches
        assert dict(both.options) == {"named_tag": lift, "unnamed_tag": cut}
    with_unlifted = by_name["tag=0.05/-0.02+unlifted"]
    assert with_unlifted.knob == "tag_unlifted"
    assert dict(with_unlifted.options)["unlifted_threshold"] is True


def test_a_rule_that_only_leaves_lines_out_is_chosen_for_its_tokens() -> None:
    # "cut" saves tokens and loses one label on a; "deep" saves more and loses two on b;
    # "leaky" saves most and leaks on c
    cells = {
        "default": {"a": _cell(8), "b": _cell(8), "c": _cell(8)},
        "cut": {"a": _cell(7, tokens=4800), "b": _cell(8, tokens=4800),
                "c": _cell(8, tokens=4800)},
        "deep": {"a": _cell(8, tokens=4000), "b": _cell(6, tokens=4000),
                 "c": _cell(8, tokens=4000)},
        "leaky": {"a": _cell(8, tokens=3000), "b": _cell(8, tokens=3000),
                  "c": _cell(8, leaking=1, tokens=3000)},
    }  # fmt: skip
    values = ["default", "cut", "deep", "leaky"]
    # chosen on a and c: "deep" (fewest tokens, no set losing more than one label)
    assert gl.choose_tokens(cells, values, ["a", "c"]) == "deep"
    # on b too: "deep" loses two there, "leaky" leaks on c: "cut"
    assert gl.choose_tokens(cells, values, ["a", "b", "c"]) == "cut"
    # the choice for labels never takes a rule that finds nothing more
    assert gl.choose(cells, values, ["a", "b", "c"]) == "default"
    result = gl.lopo_tokens(cells, values, ["a", "b", "c"])
    chosen = {s: c["chosen"] for s, c in result["per_set"].items()}
    # leaving b out, a and c choose "deep", which loses two labels on b; leaving c out, a
    # and b choose "leaky", which leaks on c: what tuning elsewhere does to the one left out
    assert chosen == {"a": "cut", "b": "deep", "c": "leaky"}
    assert result["per_set"]["b"]["found"] == 6
    assert result["lopo"] == pytest.approx((7 + 6 + 8) / 30)
    assert result["lopo_tokens"] == pytest.approx((4800 + 4000 + 3000) / 30)
    assert result["default_tokens"] == pytest.approx(500)
    assert result["in_sample_choice"] == "cut"


def test_the_trim_candidates_set_the_option_and_are_judged_for_tokens() -> None:
    from engrain.recall.trim import Trim

    by_name = {c.name: c for c in gl.candidates()}
    assert by_name["pin_threshold=on"].options == {"trim": Trim(pin_threshold=True)}
    assert by_name["question_background=off"].options == {
        "trim": Trim(question_background=False)}  # fmt: skip
    assert by_name["restated=0.8"].options == {"trim": Trim(restated=0.8)}
    together = by_name["pin_threshold+question_background"].options["trim"]
    assert together.pin_threshold and not together.question_background
    assert {c.knob for c in by_name.values() if "trim" in c.options} == gl.TOKEN_KNOBS
