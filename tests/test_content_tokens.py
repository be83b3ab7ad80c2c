"""A memory's ``content_tokens`` kept with its row (SQLite 007, PostgreSQL 009, issue 18).

Every store writes ``count_tokens(" " + content)`` with the content, and selection and
assembly take a line's count from it (``assemble.stored_line_tokens``) instead of counting
the line at call time. The counts must be exactly the tokenizer's: for random texts, for
every memory text of the gating sets and LoCoMo's development file, in both formats; a call
must give the same blocks and token figures whether the stored counts are used or not; and
a count must never outlive the content it was made from.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Kind, Memory
from engrain.corrections import CONFLICTS_WITH
from engrain.errors import MigrationError, ValidationError
from engrain.model import MemoryType, Provenance
from engrain.recall import lines
from engrain.recall.assemble import Format, item_line, stored_line_tokens
from engrain.store import MemoryStore, Patch, sqlite_rows, sqlite_schema, sqlite_uses
from engrain.store.base import MEMORY_COLUMNS, counted
from engrain.store.sqlite import MIGRATIONS, SQLiteStore
from engrain.tokens import count_tokens, spaced_count

from .conftest import NOW
from .test_block_tokens import memories, texts
from .test_store_contract import mem

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
YEARS = (NOW.year, NOW.year - 1, None)


def _agrees(memory: Memory) -> int:
    """Check every rendering of ``memory`` (with its stored count) against the tokenizer;
    the number of renderings the stored count served."""
    served = 0
    for fmt in Format:
        for year in YEARS:
            for compact in (True, False):
                for grouped in (False, True):
                    stored = stored_line_tokens(memory, fmt, year, compact, grouped)
                    if stored is not None:
                        line = item_line(memory, fmt, year, compact, grouped)
                        assert stored == count_tokens(line), (fmt, line)
                        served += 1
    return served


@settings(max_examples=400, deadline=None)
@given(memories())
def test_a_stored_count_gives_the_lines_exact_count(memory: Memory) -> None:
    _agrees(counted(memory))


@settings(max_examples=200, deadline=None)
@given(texts.filter(str.strip), st.sampled_from(list(Kind)), st.booleans())
def test_every_type_and_kind_of_plain_memory_is_served(text: str, kind: Kind, event: bool) -> None:
    for memory_type in MemoryType:
        memory = counted(Memory(
            id="m", user_id="u", content=text, memory_type=memory_type, kind=kind,
            created_at=NOW - timedelta(days=400), updated_at=NOW,
            event_at=NOW - timedelta(days=3) if event else None,
        ))  # fmt: skip
        served = _agrees(memory)
        # every tagged rendering, and every sections item unless its content ends in
        # whitespace before "(learned: …)"
        items = kind is Kind.EVENT or event or not text[-1].isspace()
        assert served == 2 * 3 * 2 * (1 + items)


def test_lines_of_another_shape_are_counted() -> None:
    chunk = counted(mem("c", content="Mel: hi there\nJo: the 5k race",
                        provenance=Provenance(("t1",))))  # fmt: skip
    conflicted = counted(mem("x", content="the MSRV is 1.78",
                             provenance=Provenance((), {CONFLICTS_WITH: ["y"]})))  # fmt: skip
    trailing = counted(mem("t", content="ends in a space "))
    uncounted = mem("u", content="never written")
    for memory in (chunk, conflicted, uncounted):
        for fmt in Format:
            assert stored_line_tokens(memory, fmt, NOW.year) is None
    assert stored_line_tokens(trailing, Format.SECTIONS, NOW.year) is None
    assert stored_line_tokens(trailing, Format.TAGGED, NOW.year) is not None


def test_a_line_with_a_stored_count_is_not_counted_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = counted(mem("s", content="Releases are cut from main every other Tuesday."))
    line = item_line(memory, Format.TAGGED, NOW.year)
    expected = count_tokens(line)
    lines.clear()

    def refused(text: str) -> int:
        raise AssertionError(f"counted at call time: {text!r}")

    monkeypatch.setattr(lines, "count_tokens", refused)
    assert lines.line_floor(memory, Format.TAGGED, NOW.year) == expected
    assert lines.line_cost(memory, Format.TAGGED, NOW.year) == (line, expected)
    assert lines.line_tokens(memory.evolve(content_tokens=None), Format.TAGGED, NOW.year) \
        == expected  # remembered by the call before  # fmt: skip
    lines.clear()
    with pytest.raises(AssertionError, match="counted at call time"):
        lines.line_cost(memory.evolve(content_tokens=None), Format.TAGGED, NOW.year)


def _gating_texts() -> list[str]:
    """Every memory of the gating evaluation's projects (its rows with a content)."""
    found: list[str] = []
    for path in sorted((REPO / "bench" / "gating").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found.extend(str(r["content"]) for r in rows if "content" in r and "kind" in r)
    return found


def _locomo_texts() -> list[str]:
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} not found")
    found: list[str] = []
    for sample in json.loads(LOCOMO.read_text()):
        conversation: dict[str, Any] = sample["conversation"]
        for key, turns in conversation.items():
            if key.startswith("session_") and isinstance(turns, list):
                found.extend(f"{t['speaker']}: {t['text']}" for t in turns)
        found.extend(str(s) for s in (sample.get("session_summary") or {}).values())
    return found


@pytest.mark.parametrize("source", [_gating_texts, _locomo_texts])
def test_the_evaluation_sets_texts_are_counted_exactly(source: Any) -> None:
    found = source()
    assert len(found) > 300
    kinds = (Kind.FACT, Kind.EVENT, Kind.INVARIANT, Kind.SUMMARY)
    for i, text in enumerate(found):
        kind = kinds[i % len(kinds)]
        memory = counted(Memory(
            id=f"m{i}", user_id="u", content=text, memory_type=kind.default_memory_type,
            kind=kind, created_at=NOW - timedelta(days=i % 500), updated_at=NOW,
        ))  # fmt: skip
        assert _agrees(memory) > 0


def test_new_content_drops_the_count_and_other_changes_keep_it() -> None:
    memory = counted(mem("a", content="the cache is keyed by content hash"))
    assert memory.content_tokens == spaced_count(memory.content)
    assert memory.evolve(pinned=True).content_tokens == memory.content_tokens
    assert memory.evolve(content=memory.content).content_tokens == memory.content_tokens
    assert memory.evolve(content="a new text").content_tokens is None
    assert counted(memory.evolve(content="a new text")).content_tokens == spaced_count("a new text")
    with pytest.raises(ValidationError, match="content_tokens"):
        Patch("alice", "a", {"content_tokens": 3})
    assert "content_tokens" not in memory.to_dict(with_embedding=True)
    assert Memory.from_dict(memory.to_dict()).content_tokens is None  # import recounts


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_every_write_stores_the_count_of_the_content_it_writes(
    backend: str, tmp_path: Path
) -> None:
    store: Any = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "s.db")
    store.write([mem("a", content="first text"), mem("b", content="other text")])
    store.write(patches=[Patch("alice", "a", {"content": "a patched, longer first text"})])
    wrong = counted(mem("c", content="carried")).evolve(content="rewritten by an update")
    store.write([wrong])
    for memory in [*store.get("alice", ["a", "b", "c"]), *store.query("alice")]:
        assert memory.content_tokens == spaced_count(memory.content), memory.id
    if backend == "sqlite":
        store.close()
        reopened = SQLiteStore(tmp_path / "s.db")
        rows = dict(reopened._read("SELECT id, content_tokens FROM memories"))
        assert rows == {m.id: spaced_count(m.content) for m in reopened.query("alice")}
        reopened.close()


def test_a_006_file_is_filled_on_upgrade_and_then_refused_by_older_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    written = [mem(f"m{i}", content=f"note {i}: the {'very ' * i}long one é") for i in range(7)]
    before = MEMORY_COLUMNS.index("content_tokens")
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_schema, "MIGRATIONS", MIGRATIONS[:6])
        old = SQLiteStore(path)
        rows = [sqlite_uses.stored(sqlite_rows.to_row(m)[:before])
                for m in written]  # fmt: skip
        columns = [c for c in sqlite_rows.ROW_COLUMNS if c != "content_tokens"]
        with old._transaction() as db:
            db.executemany(f"INSERT INTO memories ({', '.join(columns)}) "
                           f"VALUES ({', '.join('?' * len(columns))})", rows)  # fmt: skip
        old.close()

    upgraded = SQLiteStore(path)
    assert "007_content_tokens" in {r[0] for r in upgraded._read("SELECT name FROM migrations")}
    assert dict(upgraded._read("SELECT id, content_tokens FROM memories")) == {
        m.id: spaced_count(m.content) for m in written
    }
    assert {m.id: m.content_tokens for m in upgraded.query("alice")} == {
        m.id: spaced_count(m.content) for m in written
    }
    upgraded.close()

    with monkeypatch.context() as patch:
        patch.setattr(sqlite_schema, "MIGRATIONS", MIGRATIONS[:6])
        with pytest.raises(MigrationError, match="newer engrain"):
            SQLiteStore(path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM memories WHERE content_tokens IS NULL").fetchone() \
        == (0,)  # fmt: skip
    raw.close()


def _blocks(gating: Any, directory: Path) -> list[tuple[Any, ...]]:
    """Every labelled and trivial message of the four gating sets answered with the hash
    embedder in both formats (fresh engines per set and format): each block's text, tokens
    and memories."""
    from engrain.embed import make_embedder

    embedder = make_embedder("hash")
    out: list[tuple[Any, ...]] = []
    for name in gating.SETS:
        data = gating.load_data(name=name)
        projects = gating.Projects(data, embedder, directory / name)
        for fmt in Format:
            engines = {p: projects.fresh(p) for p in data.projects}
            for message in [*data.messages, *data.trivial]:
                engine = engines[message["project"]]
                context = engine.context(
                    message["text"], gating.USER, project=message["project"],
                    turn=message.get("turn", 0), options=engine.options.update(format=fmt),
                    now=gating.NOW,
                )  # fmt: skip
                out.append((name, fmt, message["id"], context.text, context.tokens,
                            [m.id for m in context.memories]))  # fmt: skip
            for engine in engines.values():
                engine.close()
    return out


def test_blocks_are_the_same_with_and_without_the_stored_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    import gating

    lines.clear()
    stored = _blocks(gating, tmp_path / "stored")
    lines.clear()
    with monkeypatch.context() as patch:
        patch.setattr(lines, "stored_line_tokens", lambda *a, **k: None)
        counted_here = _blocks(gating, tmp_path / "counted")
    lines.clear()
    assert len(stored) > 400
    assert sum(bool(b[3]) for b in stored) > 300
    assert stored == counted_here


@settings(max_examples=300, deadline=None)
@given(memories(), st.booleans())
def test_a_shown_line_is_the_line_and_count_line_cost_gives(memory: Memory, kept: bool) -> None:
    """``lines.shown_line`` (the block's lines in ``block._fit``) renders a line with a kept
    count without looking it up: the same line and count as ``line_cost``, in every
    rendering, with or without the count (a chunk's or a conflict's line is costed)."""
    memory = counted(memory) if kept else memory
    for fmt in Format:
        for year in YEARS:
            for compact in (True, False):
                for grouped in (False, True):
                    lines.clear()
                    shown = lines.shown_line(memory, fmt, year or NOW.year, compact, grouped)
                    lines.clear()
                    assert shown == lines.line_cost(memory, fmt, year or NOW.year, compact, grouped)
                    assert shown[1] == count_tokens(shown[0])
