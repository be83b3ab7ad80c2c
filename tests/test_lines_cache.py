"""A memory's line and cost are remembered per revision (``recall/lines.py``): a new object of
the same revision reuses them, any change to what the line is rendered from renders it
again, and the remembered entries are nothing the garbage collector keeps tracking."""

from __future__ import annotations

import gc
import threading
from dataclasses import replace
from datetime import timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Kind, Memory, MemoryType
from engrain.corrections import CONFLICTS_WITH
from engrain.model import Provenance
from engrain.recall import lines
from engrain.recall.assemble import Format, item_line
from engrain.tokens import count_tokens, min_tokens

from .conftest import NOW
from .test_block_tokens import texts

BASE = Memory(id="m", user_id="u", content="Deploys go out on Tuesdays after the freeze.",
              memory_type=MemoryType.EPISODIC, kind=Kind.FACT, created_at=NOW - timedelta(days=400),
              updated_at=NOW)  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh() -> None:
    lines.clear()


def _renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []

    def counted(memory: Memory, *args: object) -> str:
        seen.append(memory.id)
        return item_line(memory, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(lines, "item_line", counted)
    return seen


def test_a_new_object_of_the_same_revision_is_not_rendered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renders = _renders(monkeypatch)
    line = item_line(BASE, Format.TAGGED, NOW.year)
    assert lines.line_floor(BASE, Format.TAGGED, NOW.year) <= count_tokens(line)
    again = replace(BASE, access_count=7, content="".join(list(BASE.content)))  # not rendered from
    assert again is not BASE and again.content is not BASE.content
    assert lines.line_cost(again, Format.TAGGED, NOW.year) == (line, count_tokens(line))
    assert lines.line_tokens(replace(BASE), Format.TAGGED, NOW.year) == count_tokens(line)
    assert renders == ["m"]


LATER = timezone(timedelta(hours=13))  # the same instants a day later by the calendar
CHANGES: dict[str, dict[str, Any]] = {
    "content": {"content": "Deploys go out on Thursdays."},
    "type": {"memory_type": MemoryType.SEMANTIC},
    "kind": {"kind": Kind.EVENT},
    "event": {"event_at": NOW - timedelta(days=3)},
    "updated": {"updated_at": NOW - timedelta(days=40)},
    "created": {"created_at": NOW - timedelta(days=2)},
    "updated zone": {"updated_at": NOW.astimezone(LATER)},
    "created zone": {"created_at": BASE.created_at.astimezone(LATER)},
    "chunk": {"provenance": Provenance(("t1",))},
    "conflict": {"provenance": Provenance((), {CONFLICTS_WITH: ["other"]})},
}


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_revision_is_rendered_and_counted_anew(fmt: Format, change: str) -> None:
    lines.line_cost(BASE, fmt, NOW.year)
    changed = replace(BASE, **CHANGES[change])
    line = item_line(changed, fmt, NOW.year)
    assert lines.line_cost(changed, fmt, NOW.year) == (line, count_tokens(line))
    assert lines.line_floor(changed, fmt, NOW.year) == count_tokens(line)


def test_each_rendering_has_its_own_line() -> None:
    for fmt in Format:
        for year in (NOW.year, NOW.year + 1):
            for compact in (True, False):
                for grouped in (True, False):
                    line = item_line(BASE, fmt, year, compact, grouped)
                    got = lines.line_cost(BASE, fmt, year, compact, grouped)
                    assert got == (line, count_tokens(line))


def test_a_bounded_line_is_counted_when_its_cost_is_asked() -> None:
    line = item_line(BASE, Format.TAGGED, NOW.year)
    assert line.startswith("[EPISODIC] 2026-01-15: ")
    floor = lines.line_floor(BASE, Format.TAGGED, NOW.year)
    # not a chunk: its content's words and the type's, without rendering or remembering
    assert floor == len(BASE.content.split()) + 1 < len(line.split()) < count_tokens(line)
    assert not lines._LINES
    assert lines.line_cost(BASE, Format.TAGGED, NOW.year) == (line, count_tokens(line))
    assert lines.line_floor(BASE, Format.TAGGED, NOW.year) == count_tokens(line)


def test_a_chunk_s_bound_is_its_compacted_line_s_and_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunk = replace(BASE, content="Jo: Wow, that's awesome! We ship the migration on Friday.",
                    provenance=Provenance(("t1", "t2")))  # fmt: skip
    line = item_line(chunk, Format.TAGGED, NOW.year, True, True)
    assert line == "Jo: We ship the migration on Friday."  # compacted, under its day's header
    renders = _renders(monkeypatch)
    assert lines.line_floor(chunk, Format.TAGGED, NOW.year, True, True) == len(line.split())
    assert lines.line_cost(chunk, Format.TAGGED, NOW.year, True, True) == (
        line, count_tokens(line))  # fmt: skip
    assert renders == ["m"]


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from(list(Format)), st.booleans(), st.booleans(), st.booleans())
def test_the_content_floor_bounds_every_line_of_a_memory_that_is_not_a_chunk(
    content: str, fmt: Format, compact: bool, grouped: bool, conflicted: bool
) -> None:
    meta = {CONFLICTS_WITH: ["other"]} if conflicted else {}
    for kind in (Kind.FACT, Kind.EVENT, Kind.INVARIANT):
        memory = replace(BASE, content=content, kind=kind, memory_type=kind.default_memory_type,
                         provenance=Provenance((), meta))  # fmt: skip
        line = item_line(memory, fmt, NOW.year, compact, grouped)
        # the content's words and the marker are words of the line: as tight as min_tokens
        assert lines.content_floor(content) <= min_tokens(line) <= count_tokens(line)
        assert lines.line_floor(memory, fmt, NOW.year, compact, grouped) <= count_tokens(line)


def test_entries_are_not_tracked_by_the_collector() -> None:
    for n in range(50):
        lines.line_cost(replace(BASE, id=f"m{n}"), Format.TAGGED, NOW.year)
    # a tuple is untracked by a pass that finds its items untracked: the signature inside an
    # entry first, the entry by the same pass or the next
    gc.collect()
    gc.collect()
    assert lines._LINES and not any(gc.is_tracked(e) for e in lines._LINES.values())


def test_a_full_cache_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "LINES_MAX", 3)
    for n in range(4):
        lines.line_cost(replace(BASE, id=f"m{n}"), Format.TAGGED, NOW.year)
    assert sorted(lines._LINES) == ["m3"]


def test_threads_costing_two_revisions_of_one_memory_get_each_its_own_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lines, "LINES_MAX", 5)  # clearing while others read and write
    revisions = [replace(BASE, content=f"Deploys go out on day {n}.") for n in range(4)]
    expected = {m.content: item_line(m, Format.TAGGED, NOW.year) for m in revisions}
    wrong: list[str] = []

    def work(offset: int) -> None:
        for i in range(400):
            memory = replace(revisions[(i + offset) % 4], id=f"m{i % 7}")
            line, tokens = lines.line_cost(memory, Format.TAGGED, NOW.year)
            floor = lines.line_floor(memory, Format.TAGGED, NOW.year)
            if line != expected[memory.content] or tokens != count_tokens(line) or floor > tokens:
                wrong.append(memory.content)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


@pytest.mark.parametrize("fmt", list(Format))
def test_a_kept_count_costs_a_line_without_rendering_or_its_signature(
    monkeypatch: pytest.MonkeyPatch, fmt: Format
) -> None:
    """A memory carrying the count kept with its row (``content_tokens``) is costed and
    bounded from it: neither rendered nor its signature read (selection costs ~100-400
    candidates' lines in a large call and shows a fraction); the count is the exact one,
    and the line is rendered once when it is shown (``line_cost``)."""
    renders = _renders(monkeypatch)
    signatures: list[str] = []
    signature = lines.signature

    def read(memory: Memory, *args: Any) -> tuple[object, ...]:
        signatures.append(memory.id)
        return signature(memory, *args)

    monkeypatch.setattr(lines, "signature", read)
    kept = replace(
        BASE, memory_type=MemoryType.SEMANTIC, content_tokens=count_tokens(" " + BASE.content)
    )
    line = item_line(kept, fmt, NOW.year)
    assert lines.line_tokens(kept, fmt, NOW.year) == count_tokens(line)
    assert lines.line_floor(kept, fmt, NOW.year) == count_tokens(line)
    assert renders == [] and signatures == []
    assert lines.line_cost(kept, fmt, NOW.year) == (line, count_tokens(line))
    assert renders == ["m"] and signatures == ["m"]
    without = replace(kept, content_tokens=None)  # no count kept: rendered and remembered
    assert lines.line_tokens(without, fmt, NOW.year) == count_tokens(line)
    assert signatures == ["m", "m"]
