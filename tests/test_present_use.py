"""A note about the present judged by its last use too (``GateOptions.present_use``, off by
default; docs/decisions.md, "Session 21 … (h5)"): a context note written long ago and used
lately keeps its relevance (its relevance's age scale is never under its recency from its
last use); one last used long ago gains nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.score import (
    present_relevance,
    present_scale,
    score_gated,
    use_recency,
)
from engrain.store import MemoryStore

from .conftest import NOW, make_settings
from .test_gate_rules import PlannedEmbedder  # messages along axis 0, planned cosines


def _memory(kind: Kind, written_days: float, used_days: float | None) -> Memory:
    written = NOW - timedelta(days=written_days)
    return Memory(
        id="m", user_id="u", content="x", memory_type=kind.default_memory_type, kind=kind,
        created_at=written, updated_at=written, access_count=5,
        last_accessed_at=None if used_days is None else NOW - timedelta(days=used_days),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "written", "used", "by_use", "recency"),
    [
        (Kind.CONTEXT, 270, 2, True, 0.5 ** (2 / 14)),  # the context's 14-day recency
        (Kind.CONTEXT, 270, 250, True, 0.5 ** (250 / 14)),  # a use long ago: next to nothing
        (Kind.CONTEXT, 270, 2, False, None),  # the option off
        (Kind.CONTEXT, 270, None, True, None),  # never used
        (Kind.FACT, 270, 2, True, None),  # only notes about the present
    ],
)
def test_the_recency_a_note_has_from_its_last_use(
    kind: Kind, written: float, used: float | None, by_use: bool, recency: float | None
) -> None:
    got = use_recency(_memory(kind, written, used), NOW, by_use)
    assert got == (None if recency is None else pytest.approx(recency))


@pytest.mark.parametrize(
    ("kind", "age", "recency", "scale"),
    [
        (Kind.CONTEXT, 270.0, None, 0.125),  # 0.5 ** (270 / 90)
        (Kind.CONTEXT, 270.0, 0.9, 0.9),  # used lately: its recency by that use
        (Kind.CONTEXT, 90.0, 0.2, 0.5),  # a use long ago never lowers the written scale
        (Kind.CONTEXT, None, 0.9, 1.0),  # age unknown
        (Kind.FACT, 270.0, 0.9, 1.0),  # not about the present
    ],
)
def test_the_present_scale_is_never_under_the_recency_by_use(
    kind: Kind, age: float | None, recency: float | None, scale: float
) -> None:
    assert present_scale(kind, age, recency) == pytest.approx(scale)


def _classification() -> Classification:
    return Classification(complexity=Complexity.SIMPLE, intent=Intent.QUESTION, domains=(),
                          turn=0, has_code=False, references_history=False, signals=())  # fmt: skip


def test_the_score_reads_the_last_use_only_with_the_option() -> None:
    note = _memory(Kind.CONTEXT, 270, 2)
    weights = {"semantic": 0.55, "recency": 0.10, "domain": 0.25, "usage": 0.10}
    off = score_gated(note, 0.8, _classification(), weights, NOW)
    on = score_gated(note, 0.8, _classification(), weights, NOW, present_use=True)
    recent = 0.5 ** (2 / 14)  # the context's 14-day recency, two days after its use
    assert off.factors["present_scale"] == pytest.approx(0.125)  # 0.5 ** (270 / 90)
    assert "use_recency" not in off.factors
    assert on.factors["present_scale"] == pytest.approx(recent)
    assert on.factors["use_recency"] == pytest.approx(recent)
    assert on.components["semantic"] == pytest.approx(0.55 * 0.8 * recent)
    # the recency term stays the written one (the seed's "more recent learnings")
    assert on.factors["decay"] == off.factors["decay"] == pytest.approx(0.5 ** (270 / 14))
    assert on.components["recency"] == off.components["recency"]
    assert on.total > off.total
    assert present_relevance(note, 0.8, NOW, by_use=True) == pytest.approx(0.8 * recent)
    assert present_relevance(note, 0.8, NOW) == pytest.approx(0.1)


# -- end to end: a standing note used lately, a stale one used long ago -----------------------

MESSAGE = "When is the change window for the LRH interface deploy?"
STANDING = "Change windows: LRH Sunday 01:00-04:00 Central; SBH Saturday 22:00-02:00."
STALE = "Change freeze at all sites during LRH's Epic upgrade, October 1-15."


def _project(tmp_path: Path) -> tuple[Engine, dict[str, str]]:
    embedder = PlannedEmbedder([MESSAGE], {STANDING: 0.7, STALE: 0.7})
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=embedder)
    written = NOW - timedelta(days=270)
    rows = {"standing": (STANDING, 2), "stale": (STALE, 250)}
    engine.import_records(
        [{"type": "memory", "id": name, "user_id": "ada", "content": text, "kind": "context",
          "memory_type": Kind.CONTEXT.default_memory_type.value,
          "created_at": written.isoformat(), "updated_at": written.isoformat(),
          "access_count": 9, "domains": ["deployment"],
          "last_accessed_at": (NOW - timedelta(days=used)).isoformat()}
         for name, (text, used) in rows.items()],
        now=NOW,
    )  # fmt: skip
    return engine, {name: name for name in rows}


def test_a_note_used_lately_is_injected_and_a_stale_one_is_not(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    options = GateOptions(present_use=True)
    gated = engine.explain(MESSAGE, "ada", options=options, now=NOW)
    chosen = {m.id for m in gated.memories}
    assert ids["standing"] in chosen
    assert ids["stale"] not in chosen  # last used 250 days ago: as stale as its writing
    assert gated.components[ids["standing"]]["use_recency"] == pytest.approx(0.5 ** (2 / 14))
    assert gated.components[ids["stale"]]["present_scale"] == pytest.approx(0.125)
    got = engine.context(MESSAGE, "ada", options=options, now=NOW)
    assert [m.id for m in got.memories] == [m.id for m in gated.memories]


def test_the_rule_is_off_by_default(tmp_path: Path) -> None:
    # not adopted (docs/decisions.md, "Session 21 … (h5)")
    engine, ids = _project(tmp_path)
    assert GateOptions().present_use is False
    gated = engine.explain(MESSAGE, "ada", now=NOW)
    assert ids["standing"] not in {m.id for m in gated.memories}  # 270 days: scale 0.125
    assert "use_recency" not in gated.components[ids["standing"]]
