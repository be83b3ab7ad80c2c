"""Context assembly: the spec's ``tagged`` block or relevance gating's ``sections`` block.

Same selection, different rendering (DESIGN.md). Both are wrapped in ``<memory>`` tags and
both are empty strings when nothing is selected: an empty block is noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from engrain.corrections import conflicts_of
from engrain.model import Kind, Memory, MemoryType


class Format(StrEnum):
    """How the selected memories are rendered."""

    TAGGED = "tagged"
    SECTIONS = "sections"


#: Appended to a memory flagged as contradicting another one (both are injected).
CONFLICT_NOTE = " (conflicts with another memory; confirm which is current)"


def render_line(memory: Memory) -> str:
    """``[TYPE] content``; episodic memories carry their date, as in the spec's example, and
    so does a memory in conflict with another (with a note to confirm which holds)."""
    prefix = f"[{memory.memory_type.value.upper()}] "
    conflicted = bool(conflicts_of(memory))
    if memory.memory_type is MemoryType.EPISODIC or conflicted:
        prefix += f"{memory.when.date().isoformat()}: "
    return prefix + memory.content + (CONFLICT_NOTE if conflicted else "")


def render_tagged(memories: Sequence[Memory]) -> str:
    """The spec's block, or the empty string when there is nothing to inject."""
    if not memories:
        return ""
    lines = "\n".join(render_line(m) for m in memories)
    return f"<memory>\n{lines}\n</memory>"


#: Section titles in rendering order (invariants first), and the kinds each one holds.
SECTIONS: Sequence[tuple[str, tuple[Kind, ...]]] = (
    ("Active Invariants", (Kind.INVARIANT,)),
    ("Preferences", (Kind.PREFERENCE,)),
    ("Corrections", (Kind.CORRECTION,)),
    ("Relevant Patterns", (Kind.PATTERN,)),
    ("Recent Decisions", (Kind.DECISION,)),
    ("Known Pitfalls", (Kind.ANTIPATTERN,)),
    ("Recipes", (Kind.GOLDEN_PATH,)),
    ("Facts", (Kind.FACT,)),
    ("Current Context", (Kind.CONTEXT,)),
    ("Summaries", (Kind.SUMMARY,)),
    ("Past Conversations and Events", (Kind.EVENT,)),
)
_SECTION_OF: Mapping[Kind, str] = {kind: title for title, kinds in SECTIONS for kind in kinds}


def _date(value: datetime) -> str:
    return value.date().isoformat()


def render_item(memory: Memory) -> str:
    """One bullet of the ``sections`` format: the content and the date it was learned (or,
    for events, when it happened)."""
    note = CONFLICT_NOTE if conflicts_of(memory) else ""
    if memory.kind is Kind.EVENT or memory.event_at is not None:
        return f"- {_date(memory.when)}: {memory.content}{note}"
    return f"- {memory.content} (learned {_date(memory.created_at)}){note}"


def render_sections(memories: Sequence[Memory]) -> str:
    """Titled sections, invariants first, items in selection (score) order within each."""
    if not memories:
        return ""
    grouped: dict[str, list[str]] = {}
    for memory in memories:
        grouped.setdefault(_SECTION_OF[memory.kind], []).append(render_item(memory))
    blocks = [
        f"## {title}\n" + "\n".join(grouped[title]) for title, _ in SECTIONS if title in grouped
    ]
    return "<memory>\n" + "\n\n".join(blocks) + "\n</memory>"


def render(memories: Sequence[Memory], fmt: Format) -> str:
    """The block for ``memories`` in format ``fmt``."""
    return render_tagged(memories) if fmt is Format.TAGGED else render_sections(memories)


def item_line(memory: Memory, fmt: Format) -> str:
    """The line one memory costs in format ``fmt`` (what the budget counts)."""
    return render_line(memory) if fmt is Format.TAGGED else render_item(memory)
