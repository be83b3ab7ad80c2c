"""Each memory's rendered line and its token count, remembered per memory revision.

Selection asks a candidate's line cost up to three times in a call (a lower bound, the
exact count, the block's count), and a large user's memories are built anew for every call
(``store/rows.py`` keeps at most ``DECODED_MAX`` of them), so a cache per memory *object*
missed a memory met again in a later call and rendered its line again. Here the line is
remembered per memory id together with everything it is rendered from
(:func:`signature`: the content, the type and kind, whether it is a conversation chunk or
flagged as conflicting, its three times with their time zones, and the rendering's format,
year and switches): a later object of the same revision finds it, a changed memory (new
content, a new date, a conflict flag) does not, whatever the object. Exact counts stay
exact: a line is either counted by the tokenizer or marked as only bounded
(:func:`line_floor`) until a selection needs its count.

Every entry is one tuple of strings, numbers, booleans and datetimes, which the garbage
collector stops tracking after its first pass over it: the per-object cache this replaces
kept three tracked objects per line (a named tuple, a weak reference, a key tuple; ~45,000
of the ~94,000 objects a 100,000-memory process tracked after 200 calls), and every full
collection walked them (docs/scale.md, session 12).

Threads share the dict: a read and a write are single dict operations, an entry is never
changed in place (a new tuple replaces it), and clearing a full cache only costs the next
lookups a render. Processes each have their own; an entry cannot outlive its revision since
the revision is its key's check.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from engrain.corrections import conflicts_of
from engrain.model import MemoryFields
from engrain.recall.assemble import Format, item_line, stored_line_tokens
from engrain.tokens import count_tokens, min_tokens, splits_as_tokenized

__all__ = [
    "LINES_MAX", "clear", "content_floor", "line_cost", "line_floor", "line_tokens", "shown_line",
    "signature",
]  # fmt: skip

#: Remembered lines (one per memory id; the candidates of ~60 complex calls, ~0.7 KB each).
LINES_MAX = 20_000

#: What one memory id's line was rendered from, the line, its cost, and whether the cost is
#: the exact count (else only :func:`line_floor`'s bound).
_Entry = tuple[tuple[object, ...], str, int, bool]
_LINES: dict[str, _Entry] = {}


def _zone(value: datetime | None) -> tzinfo | None:
    """``value``'s time zone: two equal aware times in different zones render different
    dates, so a signature holds the zone beside the time."""
    return None if value is None else value.tzinfo


def signature(
    memory: MemoryFields, fmt: Format, year: int, compact: bool, grouped: bool
) -> tuple[object, ...]:
    """Everything ``item_line(memory, fmt, year, compact, grouped)`` reads, as plain values
    (enum members by their values, so the tuple holds nothing the collector tracks)."""
    event, updated, created = memory.event_at, memory.updated_at, memory.created_at
    return (
        fmt._value_, year, compact, grouped, memory.content, memory.memory_type._value_,
        memory.kind._value_, bool(memory.provenance.turn_ids), bool(conflicts_of(memory)),
        event, _zone(event), updated, _zone(updated), created, _zone(created),
    )  # fmt: skip


def line_cost(
    memory: MemoryFields, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> tuple[str, int]:
    """``item_line(memory, fmt, year, compact, grouped)`` and its ``count_tokens``,
    remembered per memory revision and rendering (:func:`signature`); the count from the
    one kept with the memory's row when it has one (:func:`~engrain.recall.assemble.
    stored_line_tokens`), else counted."""
    key = signature(memory, fmt, year, compact, grouped)
    hit = _LINES.get(memory.id)
    if hit is not None and hit[0] == key:
        if hit[3]:
            return hit[1], hit[2]
        line = hit[1]
    else:
        line = item_line(memory, fmt, year, compact, grouped)
    tokens = stored_line_tokens(memory, fmt, year, compact, grouped)
    if tokens is None:
        tokens = count_tokens(line)
    _remember(memory.id, (key, line, tokens, True))
    return line, tokens


def shown_line(
    memory: MemoryFields, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> tuple[str, int]:
    """:func:`line_cost` for a line the block shows: with the count kept with the memory's
    row, the line rendered and that count, nothing looked up or remembered (rendering such
    a line, a typed memory's ``[TYPE] content``, costs less than its :func:`signature`);
    else :func:`line_cost` (a conversation chunk's compacted line, remembered)."""
    stored = stored_line_tokens(memory, fmt, year, compact, grouped)
    if stored is None:
        return line_cost(memory, fmt, year, compact, grouped)
    return item_line(memory, fmt, year, compact, grouped), stored


def line_floor(
    memory: MemoryFields, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> int:
    """A lower bound of :func:`line_tokens` without counting: the count itself when it is
    known (remembered, or from the count kept with the row), else a count of words
    (:func:`content_floor` for a memory that is not a conversation chunk, without
    rendering its line; else :func:`~engrain.tokens.min_tokens` of the line, remembered
    with it). The count kept with the row is asked first: it is the exact count whatever
    is remembered, and a memory's :func:`signature` (its content, three times, its
    provenance) costs more than it."""
    stored = stored_line_tokens(memory, fmt, year, compact, grouped)
    if stored is not None:
        return stored
    key = signature(memory, fmt, year, compact, grouped)
    hit = _LINES.get(memory.id)
    if hit is not None and hit[0] == key:
        return hit[2]
    if not memory.provenance.turn_ids:
        return content_floor(memory.content)
    line = item_line(memory, fmt, year, compact, grouped)
    floor = min_tokens(line)
    _remember(memory.id, (key, line, floor, False))
    return floor


def content_floor(content: str) -> int:
    """A lower bound of the tokens of the line of a memory that is not a conversation chunk
    and holds ``content``, in either format: its words and one more. Such a line shows the
    content as it is (only chunks are compacted or grouped under a day), after a marker word
    and a space (``[TYPE] …``, ``- …``) and before nothing or a space (``(learned: …)``, the
    conflict note), so each of the content's words is a word of the line, as is the marker;
    each word is at least one token (:func:`~engrain.tokens.min_tokens`), unless the text
    holds a character where Python splits and the tokenizer does not (then 0)."""
    if not splits_as_tokenized(content):
        return 0
    return len(content.split()) + 1


def line_tokens(
    memory: MemoryFields, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> int:
    """``count_tokens(item_line(memory, fmt, year, compact, grouped))``: the count kept with
    the memory's row when it has one (neither its line rendered nor its :func:`signature`
    read: selection costs ~100-400 candidates' lines a large call and shows a fraction of
    them, whose lines :func:`line_cost` renders and remembers), else remembered
    (:func:`line_cost`)."""
    stored = stored_line_tokens(memory, fmt, year, compact, grouped)
    if stored is not None:
        return stored
    return line_cost(memory, fmt, year, compact, grouped)[1]


def clear() -> None:
    """Forget every remembered line (tests; a process never needs to)."""
    _LINES.clear()


def _remember(memory_id: str, entry: _Entry) -> None:
    if len(_LINES) >= LINES_MAX:
        _LINES.clear()
    _LINES[memory_id] = entry
