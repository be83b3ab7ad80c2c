"""``bench/gating_learned.py``: the models it fits, the learned test it puts in the gate's
own greedy fill, the threshold it chooses on nine sets, and (slow) a small recorded run whose
replay is ``explain()``'s selection. No assertion on any score of the real model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gating_learned as gl  # noqa: E402
from common import NOW  # noqa: E402

from engrain import Kind, Memory  # noqa: E402
from engrain.recall import select  # noqa: E402
from engrain.recall.classify import Intent  # noqa: E402
from engrain.recall.trim import Trim  # noqa: E402


def _ranked(mid: str, kind: Kind, relevance: float, score: float,
            pinned: bool = False) -> select.Ranked:  # fmt: skip
    memory = Memory(id=mid, user_id="u", content=mid, kind=kind, pinned=pinned,
                    memory_type=kind.default_memory_type, created_at=NOW,
                    updated_at=NOW)  # fmt: skip
    return select.Ranked(memory, score, 0.5, relevance)


def _select(ranked: list[select.Ranked], budget: int = 1000) -> list[str]:
    chosen, _, _ = select.select_gated(ranked, line_tokens=lambda m: 10, token_budget=budget,
                                       intent=Intent.QUESTION, explain=False,
                                       trim=Trim(pin_threshold=True))  # fmt: skip
    return [s.memory.id for s in chosen]


def test_the_learned_test_replaces_the_kinds_test_and_nothing_else() -> None:
    ranked = [
        _ranked("clear", Kind.FACT, 0.9, 0.8),  # the gate takes it; the model does not
        _ranked("unrelated", Kind.DECISION, 0.15, 0.5),  # unrelated: the gate leaves it
        _ranked("low", Kind.PATTERN, 0.3, 0.2),  # under the threshold
        _ranked("pref", Kind.PREFERENCE, 0.1, 0.1),  # under its floor
        _ranked("pin", Kind.FACT, 0.5, 0.1, pinned=True),  # a pin that fails its test
    ]
    assert sorted(_select(ranked)) == ["clear"]
    passes = {"unrelated", "low", "pref", "pin"}
    with gl.learned_test(lambda r: r.memory.id in passes):
        # every candidate the model passes is taken, whatever its score or relevance rule;
        # the one it does not is left out, however clear
        assert sorted(_select(ranked)) == ["low", "pin", "pref", "unrelated"]
        # the block's relevance rule and the budget are still the gate's: 2 lines of 11
        assert len(_select(ranked, budget=30)) < 4
    # the gate's own tests are back afterwards
    assert sorted(_select(ranked)) == ["clear"]
    assert select.unrelated_learning(ranked[1])


def test_the_logistic_fit_orders_by_the_informative_feature() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 0] + 0.3 * rng.normal(size=2000) > 1.0).astype(float)
    model = gl.fit_logistic(x, y)
    assert abs(model.weights[0]) > 5 * max(abs(model.weights[1]), abs(model.weights[2]))
    p = model(np.array([[2.0, 0, 0], [0.0, 0, 0], [-2.0, 0, 0]]))
    assert p[0] > 0.9 > 0.1 > p[2] and p[0] > p[1] > p[2]


def test_the_stumps_split_on_the_informative_feature() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(1500, 4))
    y = (x[:, 2] > 0.7).astype(float)
    model = gl.fit_stumps(x, y, rounds=30)
    assert {j for j, *_ in model.stumps} == {2}
    high, low = model(np.array([[0.5, 0.5, 0.9, 0.5], [0.5, 0.5, 0.1, 0.5]]))
    assert high > 0.5 > low
    assert gl.describe(model) == {gl.FEATURES[2]: 30}


def _cell(found: int, leaking: int, tokens: int, messages: int = 10) -> dict[str, int]:
    return {"found": found, "labels": 20, "leaking": leaking, "messages": messages,
            "tokens": tokens}  # fmt: skip


def test_tau_is_chosen_within_every_sets_limits_and_matched_by_tokens_alone() -> None:
    default = {"a": _cell(15, 0, 9000), "b": _cell(15, 0, 9000)}
    cells = {
        0.05: {"a": _cell(20, 1, 9000), "b": _cell(20, 0, 9000)},  # a leaks on 10 %
        0.1: {"a": _cell(18, 0, 13000), "b": _cell(19, 0, 8000)},  # a over 1,200 tokens
        0.2: {"a": _cell(16, 0, 8000), "b": _cell(16, 0, 7000)},
        0.3: {"a": _cell(16, 0, 7000), "b": _cell(16, 0, 6000)},
    }
    assert gl.choose_tau(cells, default, ["a", "b"]) == 0.3  # ties to the higher tau
    assert gl.choose_tau(cells, default, ["b"]) == 0.05
    # at the gate's tokens: the lowest tau whose tokens stay at or under the gate's
    assert gl.tau_at_tokens(cells, default["a"], "a") == 0.05
    assert gl.tau_at_tokens(cells, {**default["b"], "tokens": 5000}, "b") is None


def test_pooled_counts_every_set() -> None:
    per_set = {"a": {"chosen": _cell(15, 1, 9000)}, "b": {"chosen": _cell(18, 0, 6000)}}
    got = gl.pooled(per_set, ["a", "b"], "chosen")
    assert got == {"sets": 2, "found": 33, "labels": 40, "must_include": 0.825,
                   "leaking": 1, "tokens": 750.0}  # fmt: skip


@pytest.mark.slow
def test_a_small_run_replays_explains_selection_and_fits() -> None:
    recs = gl.record(["pulse"], "hash")
    assert recs and all(r.set == "pulse" for r in recs)
    picks = gl.replay_all(recs, None)
    for rec, (ids, used) in zip(recs, picks, strict=True):
        assert set(ids) == set(rec.selected) and used == rec.tokens_used
    keys, x, y = gl.table_of(recs)
    assert x.shape == (len(keys), len(gl.FEATURES)) and y.sum() > 0
    p = dict(zip(keys, gl.fit_logistic(x, y)(x).tolist(), strict=True))
    everything = gl.measure(recs, gl.replay_all(recs, p, 0.0))
    nothing = gl.measure(recs, gl.replay_all(recs, p, 1.01))
    assert nothing["tokens"] == 0 < everything["tokens"]
    assert everything["found"] >= gl.measure(recs, picks)["found"] - 5


def test_the_frontier_sets_each_models_point_against_the_gates_best_shift_within_it() -> None:
    def curve(*cells: dict[str, int]) -> dict[str, dict[str, int]]:
        return {"a": cells[0], "b": cells[1]}

    report = {
        "sets": ["a", "b"],
        "taus": [0.1, 0.5],
        "gate_shifts": {
            "-0.1": curve(_cell(18, 0, 12000), _cell(18, 0, 12000)),  # 1,200 tokens
            "0.0": curve(_cell(16, 0, 9000), _cell(16, 0, 9000)),  # 900
            "0.1": curve(_cell(12, 0, 5000), _cell(12, 0, 5000)),  # 500
        },
        "models": {"m": {"per_set": {
            s: {"curve": {"0.1": _cell(17, 0, 10000), "0.5": _cell(10, 1, 4000)}}
            for s in ("a", "b")
        }}},
    }  # fmt: skip
    got = gl.frontier(report)
    assert got["gate"]["0.0"] == {"found": 32, "leaking": 0, "tokens": 900.0}
    at_low, at_high = got["models"]["m"]
    # 1,000 tokens a message: the gate's best within them is its shift 0 (32 labels)
    assert (at_low["found"], at_low["tokens"], at_low["gate_found"], at_low["gate_shift"]) == (
        34, 1000.0, 32, "0.0",
    )  # fmt: skip
    # 400 tokens a message: no shift of the gate spends so few
    assert at_high["gate_found"] is None
    assert "shift 0.0" in gl.frontier_table(got)
