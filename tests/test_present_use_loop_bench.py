"""``bench/present_use_loop.py``'s replay: messages answered in order by ``context()`` (uses
counted), twice, with labels found, leaks and context notes counted per pass."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import present_use_loop as loop  # noqa: E402
from gating import USER  # noqa: E402

from engrain import Engine, Kind  # noqa: E402
from engrain.store import MemoryStore  # noqa: E402

from .conftest import NOW, make_settings  # noqa: E402
from .test_gate_rules import PlannedEmbedder  # noqa: E402

ASK = "When is the change window for the LRH interface deploy?"
NOTE = "Change windows: LRH Sunday 01:00-04:00 Central; SBH Saturday 22:00-02:00."


def _engine(tmp_path: Path, note: str = NOTE) -> Engine:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=PlannedEmbedder([ASK], {note: 0.7}))  # fmt: skip
    written = NOW - timedelta(days=270)
    engine.import_records([{
        "type": "memory", "id": "note", "user_id": USER, "project": "p", "content": note,
        "kind": "context", "memory_type": Kind.CONTEXT.default_memory_type.value,
        "created_at": written.isoformat(), "updated_at": written.isoformat(),
        "access_count": 9, "last_accessed_at": (NOW - timedelta(days=2)).isoformat(),
    }], now=NOW)  # fmt: skip
    return engine


def _messages(exclude: bool) -> list[dict[str, Any]]:
    labels = {"must_include": [], "must_exclude": ["note"]} if exclude else {
        "must_include": ["note"], "must_exclude": []}  # fmt: skip
    return [{"id": "m1", "project": "p", "text": ASK, **labels}]


def test_a_note_used_lately_is_found_in_both_passes_with_the_option(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    passes = loop.replay({"p": engine}, _messages(False), loop.MODES["on"], timedelta(hours=6))
    assert [p["pass"] for p in passes] == [1, 2]
    assert [(p["found"], p["labels"], p["context_notes"]) for p in passes] == [(1, 1, 1)] * 2
    assert engine.store.get(USER, ["note"])[0].access_count == 11  # both uses counted


def test_without_the_option_the_note_is_as_old_as_its_writing(tmp_path: Path) -> None:
    passes = loop.replay({"p": _engine(tmp_path)}, _messages(False), loop.MODES["off"],
                         timedelta(hours=6))  # fmt: skip
    assert [(p["found"], p["context_notes"]) for p in passes] == [(0, 0)] * 2


def test_a_note_labelled_must_exclude_is_counted_as_a_leak(tmp_path: Path) -> None:
    passes = loop.replay({"p": _engine(tmp_path)}, _messages(True), loop.MODES["on"],
                         timedelta(hours=6))  # fmt: skip
    assert [(p["leaking"], p["messages"], p["leaked"]) for p in passes] == [(1, 1, {"note": 1})] * 2


FREEZE = "Change freeze for the LRH interface deploy until 2026-01-31; SBH Saturday 22:00."


def test_a_note_past_the_end_it_states_is_not_kept_current_by_its_uses(tmp_path: Path) -> None:
    # ten messages three days apart from January 15, twice: the freeze's stated end
    # (February 1) falls after the sixth (session 23, stated_span)
    asked = [{**_messages(False)[0], "id": f"m{i}"} for i in range(10)]
    days = timedelta(days=3)
    kept = loop.replay({"p": _engine(tmp_path, FREEZE)}, asked, loop.MODES["on"], days)
    ended = loop.replay({"p": _engine(tmp_path, FREEZE)}, asked, loop.MODES["both"], days)
    assert [p["context_notes"] for p in kept] == [10, 10]  # used, so current by its uses
    assert [p["context_notes"] for p in ended] == [6, 0]  # over since February 1
