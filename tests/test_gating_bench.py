"""The gating evaluation (``bench/gating.py``) as a fast smoke test: the data keeps the
rules the evaluation depends on, the measures are right on a hand-checked case, and a small
run with the hash embedder has the report's shape. No assertion on any score."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating  # noqa: E402

from engrain import Kind  # noqa: E402
from engrain.recall.classify import Intent  # noqa: E402

LEARNING_KINDS = {"invariant", "pattern", "decision", "antipattern", "golden_path",
                  "preference", "fact", "context", "correction"}  # fmt: skip


def row(intent: str, complexity: str, predicted: tuple[str, str], included: list[str],
        missed: list[str], leaked: list[str], injected: list[str], tokens: int, budget: int,
        split: str = "held") -> dict[str, Any]:  # fmt: skip
    return {
        "id": f"m-{intent}-{tokens}", "project": "p", "split": split, "intent": intent,
        "complexity": complexity, "predicted_intent": predicted[0],
        "predicted_complexity": predicted[1], "injected": injected, "included": included,
        "missed": missed, "leaked": leaked, "tokens": tokens, "budget": budget,
    }  # fmt: skip


def trivial_row(injected: list[str], tokens: int, with_budget: list[str], tokens_b: int,
                predicted: str = "trivial") -> dict[str, Any]:  # fmt: skip
    return {
        "id": "t", "project": "p", "split": "held", "text": "ok",
        "predicted_complexity": predicted, "injected": injected, "tokens": tokens,
        "injected_with_budget": with_budget, "tokens_with_budget": tokens_b,
    }  # fmt: skip


def test_measures_on_a_hand_checked_case() -> None:
    kinds = {"a": "invariant", "b": "pattern", "c": "fact", "x": "decision", "y": "fact"}
    rows = [
        # 2 of 2 wanted, nothing leaked, over its budget by 10, both labels right
        row("debugging", "complex", ("debugging", "complex"), ["a", "b"], [], [],
            ["a", "b"], 510, 500),
        # 0 of 1 wanted (a fact), leaks x, intent wrong, complexity right
        row("question", "simple", ("discussion", "simple"), [], ["c"], ["x"], ["x", "y"],
            100, 500),
        # 1 of 2 wanted (the pattern missed), leaks nothing, both labels wrong
        row("debugging", "moderate", ("question", "simple"), ["a"], ["b"], [], ["a"], 0, 2000),
    ]  # fmt: skip
    trivial = [
        trivial_row([], 0, [], 0),
        trivial_row([], 0, ["a"], 40),
        trivial_row(["b"], 30, ["b"], 30, predicted="simple"),
        trivial_row([], 0, [], 0),
    ]
    m = gating.measures(rows, trivial, kinds)
    assert m["messages"] == 3 and m["trivial_messages"] == 4
    assert m["trivial_empty"] == 0.75
    assert m["trivial_empty_with_budget"] == 0.5
    assert m["trivial_classified_trivial"] == 0.75
    assert m["must_include_recall"] == round(3 / 5, 4)
    assert m["must_exclude_rate"] == round(1 / 3, 4)
    assert m["mean_tokens"] == round(610 / 3, 1)
    assert m["mean_budget"] == 1000.0
    assert m["complexity_accuracy"] == round(2 / 3, 4)
    assert m["intent_accuracy"] == round(1 / 3, 4)
    assert m["over_budget"] == 1
    assert m["injected_labelled_share"] == 0.6
    assert m["must_include_recall_by_kind"] == {
        "fact": {"recall": 0.0, "labelled": 1},
        "invariant": {"recall": 1.0, "labelled": 2},
        "pattern": {"recall": 0.5, "labelled": 2},
    }
    assert m["must_exclude_leaks_by_kind"] == {"decision": 1}
    assert m["injected_by_kind"] == {"invariant": 2, "pattern": 1, "decision": 1, "fact": 1}

    intents = gating.by_intent(rows, kinds)
    assert set(intents) == {"debugging", "question"}
    assert intents["debugging"]["messages"] == 2
    assert intents["debugging"]["must_include_recall"] == 0.75
    assert intents["debugging"]["over_budget"] == 1
    assert intents["question"]["must_exclude_rate"] == 1.0
    assert gating.measures([], [], kinds)["must_include_recall"] is None


def test_split_rows_keeps_one_half_or_all() -> None:
    rows = [{"split": "tune"}, {"split": "held"}, {"split": "tune"}]
    assert len(gating.split_rows(rows, "tune")) == 2
    assert len(gating.split_rows(rows, "held")) == 1
    assert len(gating.split_rows(rows, "all")) == 3


def test_the_data_keeps_the_evaluation_rules() -> None:
    data = gating.load_data()
    for name, rows in data.projects.items():
        assert len(rows) >= 80, name
        assert {r["kind"] for r in rows} >= LEARNING_KINDS, name
        assert all(Kind(r["kind"]) for r in rows)
        ids = {r["id"] for r in rows}
        assert all(r["superseded_by"] in ids for r in rows if "superseded_by" in r)
        assert any(r.get("pinned") for r in rows) and any(r.get("muted") for r in rows)
        assert sum(r["kind"] == "preference" for r in rows) >= 20
    assert len(data.messages) >= 50 and len(data.trivial) >= 30
    assert len({m["id"] for m in [*data.messages, *data.trivial]}) == (
        len(data.messages) + len(data.trivial)
    )
    halves = Counter((m["split"], m["intent"]) for m in data.messages)
    for intent in {m["intent"] for m in data.messages}:
        assert halves["tune", intent] and halves["held", intent], intent
    assert {t["split"] for t in data.trivial} == {"tune", "held"}


@pytest.fixture(scope="module")
def small_run() -> dict[str, Any]:
    data = gating.load_data()
    subset = gating.Dataset(data.projects, data.messages[:3] + data.messages[-3:],
                            data.trivial[:4])  # fmt: skip
    return gating.run("hash", ("gated", "static"), data=subset)


def test_a_small_run_has_the_report_shape(small_run: dict[str, Any]) -> None:
    report = small_run
    assert report["embedder"].startswith("hash")
    assert report["data"]["messages"] == 6 and report["data"]["trivial"] == 4
    assert list(report["profiles"]) == ["gated", "static"]
    assert "commit" in (report["machine"]["git"] or {"commit": None})
    for result in report["profiles"].values():
        assert set(result["splits"]) == {"held", "tune", "all"}
        assert result["splits"]["all"]["messages"] == 6
        assert (result["splits"]["held"]["messages"] + result["splits"]["tune"]["messages"]) == 6
        assert result["splits"]["all"]["trivial_messages"] == 4
        for value in ("must_include_recall", "must_exclude_rate", "trivial_empty",
                      "complexity_accuracy", "intent_accuracy"):  # fmt: skip
            assert 0.0 <= result["splits"]["all"][value] <= 1.0
        assert set(result["splits"]["all"]["by_intent"]) == {
            m["intent"] for m in result["messages"]
        }
        for answered in result["messages"]:
            assert set(answered["included"]) <= set(answered["injected"])
            assert not set(answered["missed"]) & set(answered["injected"])
            assert set(answered["leaked"]) <= set(answered["injected"])
            assert answered["budget"] > 0
    assert gating.table(report).splitlines()[1].startswith("held  gated")


def test_a_miss_is_named_by_the_reason_explain_gave() -> None:
    assert gating.miss_reason("score 0.216 below 0.25") == "below threshold"
    assert gating.miss_reason("procedural, relevance 0.097 below 0.20") == "not relevant enough"
    assert gating.miss_reason("31 tokens do not fit (478/500)") == "budget"
    assert gating.miss_reason("procedural share full (290/300 tokens)") == "procedural share"
    assert gating.miss_reason("not a candidate") == "not a candidate"
    assert gating.miss_reason("top_k=5 reached") == "top_k"


def test_details_show_each_miss_and_leak_with_its_reason(small_run: dict[str, Any]) -> None:
    data = gating.load_data()
    gated = small_run["profiles"]["gated"]
    for answered in gated["messages"]:
        # every miss and every leak has explain()'s verdict: a dropped memory a reason,
        # a leaked one "selected" or "pinned"
        assert set(answered["why"]) == {*answered["missed"], *answered["leaked"]}
        for mid in answered["leaked"]:
            assert answered["why"][mid]["reason"] in {"selected", "pinned"} or answered["why"][mid][
                "reason"
            ].startswith(("procedural", "conflicts with"))
    text = gating.details(small_run, data, split="all")
    failing = [r for r in gated["messages"] if r["missed"] or r["leaked"]]
    assert sum(line.startswith("msg-") for line in text.splitlines()) == len(failing)
    for r in failing:
        for mid in r["missed"]:
            assert f"  - {mid} (" in text
        for mid in r["leaked"]:
            assert f"  + {mid} (" in text
    reasons = gated["splits"]["all"]["missed_by_reason"]
    assert sum(reasons.values()) == sum(len(r["missed"]) for r in gated["messages"])


def test_the_blind_third_project_is_a_set_of_its_own() -> None:
    main, pulse = gating.load_data(), gating.load_data(name="pulse")
    assert set(pulse.projects) == {"pulse"}
    assert not set(pulse.projects) & set(main.projects)
    assert len(pulse.messages) >= 50 and len(pulse.trivial) >= 30
    assert all(m["id"].startswith("mp-") for m in pulse.messages)
    assert {m["split"] for m in pulse.messages} == {"tune", "held"}


def test_measures_by_project_keep_each_projects_rows_apart() -> None:
    kinds = {"a": "invariant", "b": "pattern"}
    rows = [
        row("question", "simple", ("question", "simple"), ["a"], [], [], ["a"], 100, 500),
        row("question", "simple", ("question", "moderate"), [], ["b"], [], [], 0, 500),
    ]
    rows[1]["project"] = "q"
    trivial = [trivial_row([], 0, [], 0), {**trivial_row(["a"], 30, [], 0), "project": "q"}]
    projects = gating.by_project(rows, trivial, kinds)
    assert set(projects) == {"p", "q"}
    for measure in ("must_include_recall", "complexity_accuracy", "trivial_empty"):
        assert (projects["p"][measure], projects["q"][measure]) == (1.0, 0.0), measure
    assert "must_include_recall_by_kind" not in projects["p"]


def test_a_run_with_a_further_set_reports_it_in_a_block_of_its_own() -> None:
    main = gating.load_data()
    subset = gating.Dataset(main.projects, main.messages[:2], main.trivial[:2])
    report = gating.run("hash", ("gated",), limit=2, data=subset, extra_sets=("pulse",))
    pulse = report["sets"]["pulse"]
    assert pulse["data"]["messages"] == 2 and set(pulse["data"]["projects"]) == {"pulse"}
    assert {r["project"] for r in pulse["profiles"]["gated"]["messages"]} == {"pulse"}
    assert {r["project"] for r in report["profiles"]["gated"]["messages"]} <= set(main.projects)
    assert "\n== set pulse ==\n" in gating.table(report)


@pytest.mark.parametrize("name", ["sensor", "quill", "strata", "harbor", "brightfall",
                                  "meridian", "kestrel", "anvil", "wrench"])  # fmt: skip
def test_the_blind_projects_are_sets_of_their_own(name: str) -> None:
    """``sensor``, ``quill``, ``strata``, ``harbor``, ``brightfall``, ``meridian``,
    ``kestrel``, ``anvil`` and ``wrench`` (written blind, issue 12) run as sets of their own,
    by default, beside the others."""
    assert gating.SETS == ("main", "pulse", "sensor", "quill", "strata", "harbor", "brightfall",
                           "meridian", "kestrel", "anvil", "wrench")  # fmt: skip
    sets = {set_name: gating.load_data(name=set_name) for set_name in gating.SETS}
    blind = sets[name]
    others = {p for set_name, data in sets.items() if set_name != name for p in data.projects}
    assert blind.projects and not set(blind.projects) & others
    assert len(blind.messages) >= 50 and len(blind.trivial) >= 30
    assert {m["split"] for m in blind.messages} == {"tune", "held"}
    assert {t["split"] for t in blind.trivial} == {"tune", "held"}


def test_only_one_split_answers_that_splits_messages_alone() -> None:
    # tuning without reading the held half: `--only tune` answers no held message
    data = gating.load_data(name="sensor")
    for split in ("tune", "held"):
        kept = gating._limited(data, None, split)
        assert kept.messages and kept.trivial
        assert {m["split"] for m in [*kept.messages, *kept.trivial]} == {split}
        assert len(kept.messages) == sum(m["split"] == split for m in data.messages)
    tune = gating._limited(data, None, "tune").messages
    assert gating._limited(data, 3, "tune").messages == tune[:3]
    assert gating._limited(data, None) == data


@pytest.mark.parametrize("name", ["strata", "brightfall", "meridian", "kestrel", "anvil",
                                  "wrench"])  # fmt: skip
def test_the_sixth_and_seventh_projects_keep_the_rules_they_were_written_by(name: str) -> None:
    """``strata`` (a Kubernetes operator, written blind by h10) and ``brightfall`` (a
    multiplayer game, written blind by h3): every kind, pins, mutes and supersessions (always
    by a newer memory), no must-include that is superseded or muted, no must-exclude that is
    pinned, and splits alternating by rule within each intent."""
    data = gating.load_data(name=name)
    (rows,) = data.projects.values()
    assert len(rows) >= 90 and {r["kind"] for r in rows} >= LEARNING_KINDS
    by_id = {r["id"]: r for r in rows}
    assert all(by_id[r["superseded_by"]]["created_at"] > r["created_at"]
               for r in rows if "superseded_by" in r)  # fmt: skip
    stale = {r["id"] for r in rows if r.get("muted") or r.get("superseded_by")}
    pinned = {r["id"] for r in rows if r.get("pinned")}
    assert stale and pinned
    assert len(data.messages) >= 70 and len(data.trivial) >= 30
    seen: Counter[str] = Counter()
    for m in data.messages:
        assert not set(m["must_include"]) & stale and not set(m["must_exclude"]) & pinned
        assert ("turn" in m) == (m["intent"] == "continuation"), m["id"]
        assert m["split"] == ("tune", "held")[seen[m["intent"]] % 2], m["id"]
        seen[m["intent"]] += 1
    assert [t["split"] for t in data.trivial] == [("tune", "held")[i % 2]
                                                  for i in range(len(data.trivial))]  # fmt: skip


@pytest.mark.parametrize(("name", "first_ids"),
                         [("strata", "mk-0{}"), ("brightfall", "bfm-0{}"), ("meridian", "mm-0{}"),
                          ("kestrel", "gnm-0{}"), ("anvil", "av-00{}"),
                          ("wrench", "wrm-0{}")])  # fmt: skip
def test_the_sixth_and_seventh_projects_are_measured_in_blocks_of_their_own(
    name: str, first_ids: str
) -> None:
    main = gating.load_data()
    subset = gating.Dataset(main.projects, main.messages[:1], main.trivial[:1])
    report = gating.run("hash", ("gated",), limit=3, data=subset, extra_sets=(name,))
    block = report["sets"][name]
    assert set(block["data"]["projects"]) == {name} and block["data"]["messages"] == 3
    measured = block["profiles"]["gated"]["splits"]["all"]
    assert measured["must_include_recall"] is not None and measured["trivial_empty"] is not None
    ids = {r["id"] for r in block["profiles"]["gated"]["messages"]}
    assert ids == {first_ids.format(i) for i in (1, 2, 3)}
    assert f"\n== set {name} ==\n" in gating.table(report)


def test_the_seventh_projects_corrections_and_labels_hold_together() -> None:
    """``brightfall``: a correction that names what it corrects supersedes exactly that memory,
    every debugging message is labelled complex (the seed's table), greetings carry no labels,
    and every superseded memory is some message's must-exclude (the trap is exercised)."""
    data = gating.load_data(name="brightfall")
    (rows,) = data.projects.values()
    by_id = {r["id"]: r for r in rows}
    corrections = [r for r in rows if "corrects" in r]
    assert corrections and all(
        by_id[r["corrects"]].get("superseded_by") == r["id"] for r in corrections
    )
    assert {m["complexity"] for m in data.messages if m["intent"] == "debugging"} == {"complex"}
    greetings = [m for m in data.messages if m["intent"] == "greeting"]
    assert greetings and all(
        m["complexity"] == "trivial" and not m["must_include"] and not m["must_exclude"]
        for m in greetings
    )
    excluded = {i for m in data.messages for i in m["must_exclude"]}
    assert {r["id"] for r in rows if "superseded_by" in r} <= excluded


def test_the_data_platform_keeps_the_rules_it_was_written_by() -> None:
    """``harbor`` (a data-engineering platform, written blind by h2 in session 19): every
    kind, pins, mutes, supersessions by a newer memory (a correction's ``corrects`` names the
    memory it supersedes), no must-include superseded or muted, no must-exclude pinned, every
    debugging message complex, greetings trivial with no labels, splits alternating by rule."""
    data = gating.load_data(name="harbor")
    assert list(data.projects) == ["harbor"]
    rows = data.projects["harbor"]
    assert len(rows) >= 90 and {r["kind"] for r in rows} == LEARNING_KINDS
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows)
    for r in rows:
        if "superseded_by" in r:
            assert by_id[r["superseded_by"]]["created_at"] > r["created_at"], r["id"]
        if "corrects" in r:
            assert r["kind"] == "correction", r["id"]
            assert by_id[r["corrects"]]["superseded_by"] == r["id"], r["id"]
    stale = {r["id"] for r in rows if r.get("muted") or r.get("superseded_by")}
    pinned = {r["id"] for r in rows if r.get("pinned")}
    assert len(pinned) == 5 and len(stale) == 14
    assert len(data.messages) >= 70 and len(data.trivial) >= 30
    assert {m["intent"] for m in data.messages} == {i.value for i in Intent}
    seen: Counter[str] = Counter()
    for m in data.messages:
        assert not set(m["must_include"]) & stale and not set(m["must_exclude"]) & pinned
        assert ("turn" in m) == (m["intent"] == "continuation"), m["id"]
        if m["intent"] == "debugging":
            assert m["complexity"] == "complex", m["id"]
        if m["intent"] == "greeting":
            assert m["complexity"] == "trivial" and not m["must_include"] + m["must_exclude"]
        else:
            assert 1 <= len(m["must_include"]) <= 4, m["id"]
        assert m["split"] == ("tune", "held")[seen[m["intent"]] % 2], m["id"]
        seen[m["intent"]] += 1
    assert [t["split"] for t in data.trivial] == [("tune", "held")[i % 2]
                                                  for i in range(len(data.trivial))]  # fmt: skip


def test_the_data_platform_is_measured_in_a_block_of_its_own() -> None:
    main = gating.load_data()
    subset = gating.Dataset(main.projects, main.messages[:1], main.trivial[:1])
    report = gating.run("hash", ("gated",), limit=3, data=subset, extra_sets=("harbor",))
    harbor = report["sets"]["harbor"]
    assert set(harbor["data"]["projects"]) == {"harbor"} and harbor["data"]["messages"] == 3
    assert harbor["data"]["projects"]["harbor"]["memories"] == 111
    measured = harbor["profiles"]["gated"]["splits"]["all"]
    assert measured["must_include_recall"] is not None and measured["trivial_empty"] is not None
    assert {r["id"] for r in harbor["profiles"]["gated"]["messages"]} == {"mh-01", "mh-02", "mh-03"}
    assert "\n== set harbor ==\n" in gating.table(report)


def test_the_hospital_integration_engine_keeps_the_rules_it_was_written_by() -> None:
    """``meridian`` (a hospital integration engine, written blind by h4 in session 20): its
    shape value by value, corrections naming what they supersede, every superseded memory
    some message's must-exclude, every debugging message complex, greetings without labels."""
    data = gating.load_data(name="meridian")
    assert list(data.projects) == ["meridian"]
    rows = data.projects["meridian"]
    assert Counter(r["kind"] for r in rows) == {
        "invariant": 9, "pattern": 11, "decision": 13, "antipattern": 8, "golden_path": 8,
        "preference": 26, "fact": 23, "context": 5, "correction": 6,
    }  # fmt: skip
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == 109
    assert {r["id"] for r in rows if r.get("pinned")} == {
        "mr-inv-01", "mr-inv-02", "mr-inv-03", "mr-gp-01", "mr-pref-01"}  # fmt: skip
    assert {r["id"] for r in rows if r.get("muted")} == {"mr-pref-24", "mr-fact-09", "mr-fact-14"}
    superseded = {r["id"] for r in rows if "superseded_by" in r}
    assert len(superseded) == 11
    assert {r["id"]: r["corrects"] for r in rows if "corrects" in r} == {
        "mr-cor-01": "mr-fact-02",
        "mr-cor-03": "mr-fact-21",
        "mr-cor-04": "mr-fact-22",
    }
    for r in rows:
        if "corrects" in r:
            assert by_id[r["corrects"]]["superseded_by"] == r["id"]
    assert Counter(m["intent"] for m in data.messages) == {
        "question": 18, "generation": 15, "debugging": 16, "analysis": 11, "discussion": 8,
        "continuation": 9, "greeting": 3,
    }  # fmt: skip
    assert Counter(m["split"] for m in data.messages) == {"tune": 42, "held": 38}
    assert {m["complexity"] for m in data.messages if m["intent"] == "debugging"} == {"complex"}
    for m in data.messages:
        if m["intent"] == "greeting":
            assert m["complexity"] == "trivial" and not m["must_include"] + m["must_exclude"]
        else:
            assert 1 <= len(m["must_include"]) <= 4, m["id"]
    assert superseded <= {i for m in data.messages for i in m["must_exclude"]}
    assert len(data.trivial) == 36


def test_the_genomics_pipeline_keeps_the_rules_it_was_written_by() -> None:
    """``kestrel`` (a Nextflow genomics pipeline, written blind by h1 in session 24): its shape
    value by value, corrections naming what they supersede, every superseded memory some
    message's must-exclude, every debugging message complex, greetings without labels."""
    data = gating.load_data(name="kestrel")
    assert list(data.projects) == ["kestrel"]
    rows = data.projects["kestrel"]
    assert Counter(r["kind"] for r in rows) == {
        "invariant": 9, "pattern": 11, "decision": 13, "antipattern": 8, "golden_path": 9,
        "preference": 26, "fact": 23, "context": 6, "correction": 6,
    }  # fmt: skip
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == 111
    assert {r["id"] for r in rows if r.get("pinned")} == {
        "gn-inv-01", "gn-inv-02", "gn-inv-04", "gn-gp-01", "gn-pref-01"}  # fmt: skip
    assert {r["id"] for r in rows if r.get("muted")} == {"gn-pref-23", "gn-fact-10", "gn-ctx-06"}
    superseded = {r["id"] for r in rows if "superseded_by" in r}
    assert len(superseded) == 11
    assert {r["id"]: r["corrects"] for r in rows if "corrects" in r} == {
        "gn-cor-01": "gn-fact-02",
        "gn-cor-03": "gn-fact-21",
        "gn-cor-04": "gn-fact-22",
    }
    for r in rows:
        if "superseded_by" in r:
            newer = by_id[r["superseded_by"]]
            assert newer["created_at"] > r["created_at"], r["id"]
            assert newer["kind"] in (r["kind"], "correction"), r["id"]
        if "corrects" in r:
            assert by_id[r["corrects"]]["superseded_by"] == r["id"]
    assert Counter(m["intent"] for m in data.messages) == {
        "question": 18, "generation": 15, "debugging": 15, "analysis": 11, "discussion": 9,
        "continuation": 9, "greeting": 4,
    }  # fmt: skip
    assert Counter(m["complexity"] for m in data.messages) == {
        "trivial": 4, "simple": 24, "moderate": 25, "complex": 24, "deep": 4,
    }  # fmt: skip
    assert Counter(m["split"] for m in data.messages) == {"tune": 43, "held": 38}
    assert {m["complexity"] for m in data.messages if m["intent"] == "debugging"} == {"complex"}
    for m in data.messages:
        if m["intent"] == "greeting":
            assert m["complexity"] == "trivial" and not m["must_include"] + m["must_exclude"]
        else:
            assert 1 <= len(m["must_include"]) <= 4, m["id"]
    assert superseded <= {i for m in data.messages for i in m["must_exclude"]}
    assert len(data.trivial) == 36


def test_the_trading_system_keeps_the_rules_it_was_written_by() -> None:
    """``anvil`` (a C++ low-latency trading system, written blind by h1 in session 25, unlike
    the format example on purpose): its shape value by value — its own kind counts, opaque
    chronological ids, four pins of four kinds, corrections naming what they supersede, every
    debugging message complex, greetings without labels, and one generation request (a regex)
    that needs no memory at all."""
    data = gating.load_data(name="anvil")
    assert list(data.projects) == ["anvil"]
    rows = data.projects["anvil"]
    assert Counter(r["kind"] for r in rows) == {
        "invariant": 13, "pattern": 9, "decision": 15, "antipattern": 10, "golden_path": 6,
        "preference": 23, "fact": 24, "context": 4, "correction": 5,
    }  # fmt: skip
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == 109
    assert [r["id"] for r in rows] == sorted(by_id)  # numbered in creation order
    assert [r["created_at"] for r in rows] == sorted(r["created_at"] for r in rows)
    pinned = {r["id"]: r["kind"] for r in rows if r.get("pinned")}
    assert pinned == {"anv-0004": "preference", "anv-0014": "invariant",
                      "anv-0019": "invariant", "anv-0023": "fact"}  # fmt: skip
    assert {r["id"] for r in rows if r.get("muted")} == {"anv-0003", "anv-0108", "anv-0127"}
    superseded = {r["id"]: r["superseded_by"] for r in rows if "superseded_by" in r}
    assert superseded == {
        "anv-0010": "anv-0136", "anv-0011": "anv-0135", "anv-0012": "anv-0137",
        "anv-0017": "anv-0121", "anv-0024": "anv-0133", "anv-0026": "anv-0142",
        "anv-0030": "anv-0149", "anv-0033": "anv-0152", "anv-0053": "anv-0181",
        "anv-0077": "anv-0182", "anv-0180": "anv-0195",
    }  # fmt: skip
    assert {r["id"]: r["corrects"] for r in rows if "corrects" in r} == {
        "anv-0133": "anv-0024", "anv-0181": "anv-0053", "anv-0182": "anv-0077"}  # fmt: skip
    for old, new in superseded.items():
        assert by_id[new]["created_at"] > by_id[old]["created_at"], old
        assert by_id[new]["kind"] in (by_id[old]["kind"], "correction"), old
    assert sorted(r["access_count"] for r in rows)[len(rows) // 2] == 11
    assert [r["id"] for r in rows if "last_accessed_at" not in r] == [
        r["id"] for r in rows if r["access_count"] == 0]  # fmt: skip
    assert Counter(m["intent"] for m in data.messages) == {
        "question": 15, "generation": 13, "debugging": 17, "analysis": 10, "discussion": 8,
        "continuation": 10, "greeting": 5,
    }  # fmt: skip
    assert Counter(m["complexity"] for m in data.messages) == {
        "trivial": 5, "simple": 25, "moderate": 14, "complex": 29, "deep": 5,
    }  # fmt: skip
    assert Counter(m["split"] for m in data.messages) == {"tune": 41, "held": 37}
    assert {m["complexity"] for m in data.messages if m["intent"] == "debugging"} == {"complex"}
    assert sum(len(m["must_include"]) for m in data.messages) == 129
    assert sum(len(m["must_exclude"]) for m in data.messages) == 31
    empty = [m["id"] for m in data.messages if not m["must_include"]]
    greetings = [m["id"] for m in data.messages if m["intent"] == "greeting"]
    assert set(empty) - set(greetings) == {"av-001"}
    for m in data.messages:
        if m["intent"] == "greeting":
            assert m["complexity"] == "trivial" and not m["must_include"] + m["must_exclude"]
        else:
            assert len(m["must_include"]) <= 4, m["id"]
    assert len(data.trivial) == 36


def test_the_field_service_saas_keeps_the_rules_it_was_written_by() -> None:
    """``wrench`` (a multi-tenant field-service SaaS, written blind by h3 in session 29 to the
    shape of the set issue 12 keeps outside the project): its shape value by value — kinds,
    pins, mutes, supersessions (two by a correction naming what it corrects), labels that
    never ask for a superseded or muted memory nor exclude a pinned one, every debugging
    message complex, greetings without labels, and one request (a regex) needing no memory."""
    data = gating.load_data(name="wrench")
    assert list(data.projects) == ["wrench"]
    rows = data.projects["wrench"]
    assert Counter(r["kind"] for r in rows) == {
        "invariant": 10, "pattern": 11, "decision": 13, "antipattern": 9, "golden_path": 7,
        "preference": 25, "fact": 21, "context": 5, "correction": 5,
    }  # fmt: skip
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == 106
    assert {r["id"] for r in rows if r.get("pinned")} == {
        "wr-inv-01", "wr-inv-02", "wr-gp-01", "wr-pref-01"}  # fmt: skip
    assert {r["id"] for r in rows if r.get("muted")} == {"wr-pref-24", "wr-fact-13", "wr-ctx-04"}
    superseded = {r["id"]: r["superseded_by"] for r in rows if "superseded_by" in r}
    assert superseded == {
        "wr-pat-10": "wr-pat-01", "wr-dec-01": "wr-dec-02", "wr-dec-03": "wr-dec-04",
        "wr-dec-05": "wr-dec-06", "wr-dec-07": "wr-dec-08", "wr-dec-09": "wr-dec-10",
        "wr-gp-06": "wr-gp-01", "wr-pref-04": "wr-pref-05", "wr-fact-02": "wr-cor-01",
        "wr-fact-04": "wr-fact-05", "wr-fact-20": "wr-cor-03",
    }  # fmt: skip
    assert {r["id"]: r["corrects"] for r in rows if "corrects" in r} == {
        "wr-cor-01": "wr-fact-02", "wr-cor-03": "wr-fact-20"}  # fmt: skip
    for old, new in superseded.items():
        assert by_id[new]["created_at"] > by_id[old]["created_at"], old
        assert by_id[new]["kind"] in (by_id[old]["kind"], "correction"), old
    assert all("2024-01-01" <= r["created_at"] < "2026-01-15T12:00:00Z" for r in rows)
    assert Counter(m["intent"] for m in data.messages) == {
        "question": 18, "generation": 14, "debugging": 13, "analysis": 9, "discussion": 8,
        "continuation": 7, "greeting": 3,
    }  # fmt: skip
    assert Counter(m["complexity"] for m in data.messages) == {
        "trivial": 3, "simple": 23, "moderate": 20, "complex": 21, "deep": 5,
    }  # fmt: skip
    assert Counter(m["split"] for m in data.messages) == {"tune": 38, "held": 34}
    assert {m["complexity"] for m in data.messages if m["intent"] == "debugging"} == {"complex"}
    assert sum(len(m["must_include"]) for m in data.messages) == 122
    assert sum(len(m["must_exclude"]) for m in data.messages) == 43
    stale = {r["id"] for r in rows if r.get("muted") or "superseded_by" in r}
    pinned = {r["id"] for r in rows if r.get("pinned")}
    empty = [m["id"] for m in data.messages if not m["must_include"]]
    greetings = [m["id"] for m in data.messages if m["intent"] == "greeting"]
    assert set(empty) - set(greetings) == {"wrm-17"}
    for m in data.messages:
        assert not set(m["must_include"]) & stale and not set(m["must_exclude"]) & pinned
        if m["intent"] == "greeting":
            assert m["complexity"] == "trivial" and not m["must_include"] + m["must_exclude"]
        else:
            assert len(m["must_include"]) <= 4, m["id"]
    assert len(data.trivial) == 34
    assert Counter(t["split"] for t in data.trivial) == {"tune": 17, "held": 17}
