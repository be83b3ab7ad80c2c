"""A pool only as deep as the call needs (issue 18, ``GateOptions.pool_first``): the
ordinary depth first, the budget's only when that block is not full; and a selection says
whether its block is full (``recall.select.Filled``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engrain import Engine, Kind, Memory, Settings
from engrain.embed import HashEmbedder
from engrain.recall import gate as gate_module
from engrain.recall.classify import Intent
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.relevance import gather as original_gather
from engrain.recall.select import MIN_LINE_TOKENS, Ranked, select_gated

from .conftest import NOW


def _ranked(mid: str, score: float = 0.9, relevance: float = 0.9) -> Ranked:
    memory = Memory(id=mid, user_id="u", content=mid, memory_type=Kind.FACT.default_memory_type,
                    kind=Kind.FACT, created_at=NOW,
                    updated_at=NOW)  # fmt: skip
    return Ranked(memory, score, relevance, relevance)


def _full(ranked: list[Ranked], tokens: dict[str, int], budget: int, **kw: Any) -> bool:
    _, filled, _ = select_gated(ranked, line_tokens=lambda m: tokens[m.id],
                                token_budget=budget, intent=Intent.QUESTION, **kw)  # fmt: skip
    return filled.full


@pytest.mark.parametrize("explain", [True, False])
def test_a_block_is_full_only_when_it_turned_a_candidate_away_for_room(explain: bool) -> None:
    ranked = [_ranked("a"), _ranked("b"), _ranked("c")]
    assert not _full(ranked, {"a": 30, "b": 30, "c": 30}, 200, explain=explain)  # all fit
    assert _full(ranked, {"a": 30, "b": 150, "c": 30}, 200, explain=explain)  # b did not
    # a candidate under its threshold is no candidate: the room it would take is not missed
    weak = [_ranked("a"), _ranked("b", score=0.1)]
    assert not _full(weak, {"a": 30, "b": 500}, 200, explain=explain)
    # fewer free tokens than any line: full, whatever follows
    assert _full([_ranked("a")], {"a": 200 - MIN_LINE_TOKENS}, 200, explain=explain)
    assert _full(ranked, {"a": 30, "b": 30, "c": 30}, 200, explain=explain, top_k=2)


def _engine(tmp_path: Path, count: int, words: int) -> Engine:
    """An engine holding ``count`` facts of ``words`` words, every one about the query's
    "deploy" (a lexical and a hashed-vector match)."""
    engine = Engine(settings=Settings(data_dir=tmp_path), embedder=HashEmbedder())
    filler = " ".join(f"word{j}" for j in range(words))
    for i in range(count):
        engine.remember(f"deploy note {i}: {filler}", "u", kind="fact")
    return engine


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``pool=`` depth of each ``gather`` the gate makes from now on."""
    depths: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> list[Candidate]:
        depths.append(int(kwargs["pool"]))
        return original_gather(*args, **kwargs)

    monkeypatch.setattr(gate_module, "gather", spy)
    return depths


QUERY = "how do we deploy?"


def test_an_explicit_budget_not_full_at_the_ordinary_depth_is_gathered_again_deeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, 5, 3)  # five short facts: far from 5,000 tokens
    depths = _calls(monkeypatch)
    deep = engine.context(QUERY, "u", token_budget=5000, now=NOW)
    assert depths == [125]
    depths.clear()
    first = engine.options.update(pool_first=True)
    tried = engine.context(QUERY, "u", token_budget=5000, options=first, now=NOW)
    assert depths == [50, 125]  # not full: the budget's depth, as without the option
    assert tried.text == deep.text and tried.gated is not None and not tried.gated.full
    engine.close()


def test_a_block_full_at_the_ordinary_depth_is_not_gathered_deeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, 80, 40)  # 80 facts of ~50 tokens: more than 2,500 tokens
    depths = _calls(monkeypatch)
    first = engine.options.update(pool_first=True)
    tried = engine.context(QUERY, "u", token_budget=2500, options=first, now=NOW)
    assert depths == [50]
    assert tried.gated is not None and tried.gated.full
    depths.clear()
    engine.context(QUERY, "u", token_budget=2500, now=NOW)
    assert depths == [62]  # without the option: the budget's depth, 2,500 / 40
    engine.close()


def test_a_budget_whose_depth_is_the_ordinary_one_is_gathered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, 5, 3)
    depths = _calls(monkeypatch)
    first = engine.options.update(pool_first=True)
    engine.context(QUERY, "u", token_budget=1000, options=first, now=NOW)
    assert depths == [50]  # not full, but 1,000 / 40 is under the ordinary 50
    assert not GateOptions().pool_first  # off by default: it can change decisions
    engine.close()
