"""Context assembly: the spec's ``tagged`` block or relevance gating's ``sections`` block.

Same selection, different rendering (DESIGN.md). Both are wrapped in ``<memory>`` tags and
both are empty strings when nothing is selected: an empty block is noise. The wrapper, the
section headings and the newlines are part of the block, so selection counts them too
(:func:`wrapper_tokens`, :func:`section_tokens`, one newline per line).

``grouped`` (the tagged format): conversation chunks of one day share one header line,
``[25 May 2023]`` (7 tokens with its newline), placed where the day's first chunk is, and
its chunks follow it without the prefix each would otherwise repeat (15 tokens of
``[EPISODIC] 2023-05-25: ``, ~20% of a typical chunk). Selection counts a day's header
once, as it counts a section's heading (:func:`group_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from enum import StrEnum
from functools import cache, lru_cache
from typing import TypeVar

from engrain.corrections import CONFLICTS_WITH, conflicts_of
from engrain.model import Kind, Memory, MemoryFields, MemoryType
from engrain.recall.compact import compact_chunk
from engrain.tokens import count_tokens, count_with_suffix

_T = TypeVar("_T")


class Format(StrEnum):
    """How the selected memories are rendered."""

    TAGGED = "tagged"
    SECTIONS = "sections"


#: Appended to a memory flagged as contradicting another one (both are injected).
CONFLICT_NOTE = " (conflicts with another memory; confirm which is current)"


def shown_content(memory: MemoryFields, compact: bool = True) -> str:
    """The text a memory is rendered with: its content, or for a conversation chunk (a
    memory with turn ids) and ``compact``, the content without filler sentences and
    all-filler turns (:func:`~engrain.recall.compact.compact_chunk`)."""
    if compact and memory.provenance.turn_ids:
        return compact_chunk(memory.content)
    return memory.content


def render_line(memory: MemoryFields, compact: bool = True, grouped: bool = False) -> str:
    """``[TYPE] content``; episodic memories carry their date, as in the spec's example, and
    so does a memory in conflict with another (with a note to confirm which holds).
    ``compact``: conversation chunks without their filler (:func:`shown_content`);
    ``grouped``: a chunk with a day header (:func:`day_header`) is its content alone."""
    if grouped and day_header(memory, compact) is not None:
        return shown_content(memory, compact)
    prefix = f"[{memory.memory_type.value.upper()}] "
    conflicted = bool(conflicts_of(memory))
    if memory.memory_type is MemoryType.EPISODIC or conflicted:
        prefix += f"{memory.when.date().isoformat()}: "
    return prefix + shown_content(memory, compact) + (CONFLICT_NOTE if conflicted else "")


def render_tagged(
    memories: Sequence[Memory],
    compact: bool = True,
    grouped: bool = False,
    line: Callable[[MemoryFields], str] | None = None,
) -> str:
    """The spec's block, or the empty string when there is nothing to inject; ``grouped``:
    each day's conversation chunks under one header line (see the module). ``line``: each
    memory's line if the caller has it (``render_line``'s), else rendered here."""
    if not memories:
        return ""
    entries = _tagged(memories, line or (lambda m: render_line(m, compact, grouped)), compact,
                      grouped)  # fmt: skip
    lines = [header if line is None else line for header, line in entries]
    return OPEN + "\n".join(lines) + CLOSE


def day_header(memory: MemoryFields, compact: bool = True) -> str | None:
    """The header line a conversation chunk is grouped under (``[25 May 2023]``),
    or ``None`` for a memory rendered on its own line: one without turn ids, not episodic,
    in conflict with another (its line carries the note), or whose shown content starts
    with whitespace (which would merge with the header's newline)."""
    if not memory.provenance.turn_ids or memory.memory_type is not MemoryType.EPISODIC:
        return None
    shown = shown_content(memory, compact)
    if not shown or shown[0].isspace() or conflicts_of(memory):
        return None
    day = memory.when
    return f"[{day.day} {day:%b} {day.year}]"


def group_of(memory: MemoryFields, compact: bool = True) -> str:
    """The day group ``memory`` belongs to in a grouped tagged block (its header), or
    ``""`` for a memory on its own line."""
    return day_header(memory, compact) or ""


def _tagged(
    memories: Sequence[Memory], item: Callable[[MemoryFields], _T], compact: bool, grouped: bool
) -> list[tuple[str, _T | None]]:
    """The tagged block's lines in order: ``(header, None)`` for a day's header line,
    ``(group, item(m))`` for a memory (``group``: its day's header, or ``""``); without
    ``grouped`` one line per memory in selection order.
    Grouped, a day's chunks follow its header, which stands where its first chunk was
    selected; every other memory keeps its place."""
    if not grouped:
        return [("", item(m)) for m in memories]
    days: dict[str, list[Memory]] = {}
    order: list[str | Memory] = []
    for memory in memories:
        header = day_header(memory, compact)
        if header is None:
            order.append(memory)
        elif header in days:
            days[header].append(memory)
        else:
            days[header] = [memory]
            order.append(header)
    out: list[tuple[str, _T | None]] = []
    for entry in order:
        if isinstance(entry, str):
            out.append((entry, None))
            out.extend((entry, item(m)) for m in days[entry])
        else:
            out.append(("", item(entry)))
    return out


#: Section titles in rendering order (invariants first), and the kinds each one holds. The
#: four the relevance-gating document shows keep its wording ("Active Invariants",
#: "Relevant Patterns", "Recent Decisions", "Project Facts"); the others are engrain's kinds.
SECTIONS: Sequence[tuple[str, tuple[Kind, ...]]] = (
    ("Active Invariants", (Kind.INVARIANT,)),
    ("Preferences", (Kind.PREFERENCE,)),
    ("Corrections", (Kind.CORRECTION,)),
    ("Relevant Patterns", (Kind.PATTERN,)),
    ("Recent Decisions", (Kind.DECISION,)),
    ("Known Pitfalls", (Kind.ANTIPATTERN,)),
    ("Recipes", (Kind.GOLDEN_PATH,)),
    ("Project Facts", (Kind.FACT,)),
    ("Current Context", (Kind.CONTEXT,)),
    ("Summaries", (Kind.SUMMARY,)),
    ("Past Conversations and Events", (Kind.EVENT,)),
)
_SECTION_OF: Mapping[Kind, str] = {kind: title for title, kinds in SECTIONS for kind in kinds}


def short_date(value: datetime, year: int | None = None) -> str:
    """The document's date label, ``Jan 15``; with the year (``Jan 15 2024``) unless it is
    ``year`` (the year of the call's ``now``)."""
    day = f"{value:%b} {value.day}"
    return day if value.year == year else f"{day} {value.year}"


def render_item(memory: MemoryFields, year: int | None = None, compact: bool = True) -> str:
    """One bullet of the ``sections`` format, as the relevance-gating document shows it: the
    content and ``(learned: Jan 15)``, or for events ``Jan 15: content``. ``year`` is the
    current year, whose dates are shown without it; ``compact`` as for :func:`render_line`."""
    note = CONFLICT_NOTE if conflicts_of(memory) else ""
    content = shown_content(memory, compact)
    if memory.kind is Kind.EVENT or memory.event_at is not None:
        return f"- {short_date(memory.when, year)}: {content}{note}"
    return f"- {content} (learned: {short_date(memory.created_at, year)}){note}"


def section_of(memory: MemoryFields) -> str:
    """The title of the section ``memory`` is rendered under."""
    return _SECTION_OF[memory.kind]


def render_sections(
    memories: Sequence[Memory],
    year: int | None = None,
    compact: bool = True,
    line: Callable[[MemoryFields], str] | None = None,
) -> str:
    """Titled sections, invariants first, items in selection order within each. ``line``:
    each memory's item if the caller has it (``render_item``'s), else rendered here."""
    if not memories:
        return ""
    grouped = _sections(memories, line or (lambda m: render_item(m, year, compact)))
    blocks = [heading(title) + "\n".join(items) for title, items in grouped]
    return OPEN + "\n\n".join(blocks) + CLOSE


def _sections(
    memories: Sequence[Memory], item: Callable[[MemoryFields], _T]
) -> list[tuple[str, list[_T]]]:
    """``item`` of each memory grouped by section, sections in rendering order."""
    grouped: dict[str, list[_T]] = {}
    for memory in memories:
        grouped.setdefault(section_of(memory), []).append(item(memory))
    return [(title, grouped[title]) for title, _ in SECTIONS if title in grouped]


def render(
    memories: Sequence[Memory],
    fmt: Format,
    *,
    year: int | None = None,
    compact: bool = True,
    grouped: bool = False,
    line: Callable[[MemoryFields], str] | None = None,
) -> str:
    """The block for ``memories`` in format ``fmt`` (``year``: the current year, which
    ``sections`` dates leave out; ``compact``: conversation chunks without filler;
    ``grouped``: in the tagged format, a day's conversation chunks under one header).
    ``line``: each memory's :func:`item_line` with the same arguments, if the caller has
    it (selection remembered them: ``recall/lines.py``), instead of rendering it again."""
    if fmt is Format.TAGGED:
        return render_tagged(memories, compact, grouped, line)
    return render_sections(memories, year, compact, line)


def item_line(
    memory: MemoryFields,
    fmt: Format,
    year: int | None = None,
    compact: bool = True,
    grouped: bool = False,
) -> str:
    """The line one memory costs in format ``fmt`` (what the budget counts; a grouped
    chunk's day header is counted apart, once per block: :func:`header_tokens`)."""
    if fmt is Format.TAGGED:
        return render_line(memory, compact, grouped)
    return render_item(memory, year, compact)


def stored_line_tokens(
    memory: MemoryFields,
    fmt: Format,
    year: int | None = None,
    compact: bool = True,
    grouped: bool = False,
) -> int | None:
    """``count_tokens(item_line(memory, fmt, year, compact, grouped))`` from the count kept
    with the memory's row (``Memory.content_tokens``, the count of ``" " + content``) and
    the counts of what its line adds around the content, without counting the content
    again; ``None`` when the memory carries no count or its line is of another shape (a
    conversation chunk: compacted, or under a day header; a conflict's note; a
    ``sections`` item whose content ends in whitespace), which the caller counts.

    The rule is :func:`~engrain.tokens.count_with_suffix`'s: a space after a character
    other than whitespace always starts a cl100k piece, and the pieces on either side of
    such a space do not depend on the other side. A line ``[TYPE] content`` (or
    ``[EPISODIC] 2023-05-25: content``, ``- Jan 15: content``) is a stem ending in ``]``,
    ``:`` or ``-`` followed by ``" " + content``; ``- content (learned: Jan 15)`` adds a
    suffix starting with a space after the content's last character. Each stem and suffix
    is one of few strings (``count_tokens`` remembers them). Tested against
    ``count_tokens(item_line(…))`` in ``tests/test_content_tokens.py``."""
    spaced = memory.content_tokens
    if spaced is None:
        return None
    provenance = memory.provenance
    if provenance.turn_ids or provenance.metadata.get(CONFLICTS_WITH):  # a chunk, a conflict
        return None
    if fmt is Format.TAGGED:
        kind = memory.memory_type
        if kind is MemoryType.EPISODIC:
            return _dated_tag_tokens(memory.when.date()) + spaced
        return _tag_tokens(kind) + spaced
    if memory.kind is Kind.EVENT or memory.event_at is not None:
        return count_tokens(f"- {short_date(memory.when, year)}:") + spaced
    content = memory.content
    if not content or content[-1].isspace():
        return None
    learned = f" (learned: {short_date(memory.created_at, year)})"
    return count_tokens("-") + spaced + count_tokens(learned)


@cache
def _tag_tokens(memory_type: MemoryType) -> int:
    """``count_tokens("[TYPE]")``: the stem of an undated tagged line (one per type)."""
    return count_tokens(f"[{memory_type.value.upper()}]")


@lru_cache(maxsize=4_096)
def _dated_tag_tokens(day: date) -> int:
    """``count_tokens("[EPISODIC] 2023-05-25:")``: the stem of an episodic tagged line."""
    return count_tokens(f"[{MemoryType.EPISODIC.value.upper()}] {day.isoformat()}:")


# -- what the block costs beyond its lines ---------------------------------------------------

OPEN = "<memory>\n"
CLOSE_TAG = "</memory>"
CLOSE = "\n" + CLOSE_TAG


def heading(title: str) -> str:
    """A section's heading line in the ``sections`` format."""
    return f"## {title}\n"


def wrapper_tokens() -> int:
    """Tokens of the ``<memory>`` … ``</memory>`` wrapper, counted once per block."""
    return count_tokens(OPEN) + count_tokens(CLOSE)


def header_tokens(header: str) -> int:
    """Tokens a day's header line adds to a grouped tagged block, its newline included."""
    return count_tokens(header + "\n")


def section_tokens(title: str) -> int:
    """Tokens a section adds beyond its items: its heading and the blank line before it."""
    return count_tokens(heading(title)) + count_tokens("\n")


# -- what the whole block costs ----------------------------------------------------------------

#: A memory's rendered line and its token count (``count_tokens`` of that line).
LineCost = Callable[[MemoryFields], tuple[str, int]]


def block_tokens(
    memories: Sequence[Memory],
    fmt: Format,
    *,
    year: int | None = None,
    compact: bool = True,
    line: LineCost | None = None,
    grouped: bool = False,
) -> int:
    """``count_tokens(render(memories, fmt, year=year, compact=compact))``, exactly, from
    each line's own count (``line``: a memory's line and its count, e.g. remembered from
    selection; by default counted here) without encoding the block again.

    A newline followed by a character other than whitespace always ends a cl100k piece, and
    every line and heading starts with one (``[``, ``-``, ``#``), so the block's count is
    the sum of its parts each with the newlines after it: ``<memory>\\n``, every heading,
    every line with its one or two newlines, and ``</memory>``. A line's count with its
    newlines follows from its own count (:func:`~engrain.tokens.count_with_suffix`).
    ``grouped``: a day's header line (``[``, newline) and its chunks, none of which starts
    with whitespace (:func:`day_header`).
    Tested against ``count_tokens(render(…))`` in ``tests/test_block_tokens.py``."""
    if not memories:
        return 0
    cost = line or (lambda m: _counted(item_line(m, fmt, year, compact, grouped)))
    total = count_tokens(OPEN) + count_tokens(CLOSE_TAG)
    if fmt is Format.TAGGED:
        for header, item in _tagged(memories, cost, compact, grouped):
            if item is None:
                total += header_tokens(header)
                continue
            text, tokens = item
            total += count_with_suffix(text, tokens, "\n")
        return total
    sections = _sections(memories, cost)
    for n, (title, items) in enumerate(sections):
        total += count_tokens(heading(title))
        last = len(items) - 1
        for i, (text, tokens) in enumerate(items):
            gap = "\n\n" if i == last and n < len(sections) - 1 else "\n"
            total += count_with_suffix(text, tokens, gap)
    return total


def _counted(text: str) -> tuple[str, int]:
    return text, count_tokens(text)
