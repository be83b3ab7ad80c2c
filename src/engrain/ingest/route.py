"""Step 5, memory type routing (spec 1.6). A hint overrides the rules."""

from __future__ import annotations

from engrain.ingest import signals
from engrain.model import MemoryType


def route(text: str, hint: MemoryType | None = None) -> MemoryType:
    """The memory type of a chunk, by the spec's table, first rule that holds:

    ========================================  ==========
    contains a preference signal              procedural
    explicitly about "now" / current session  working
    extractable as subject–predicate–object   semantic
    default (conversation turn, event)        episodic
    ========================================  ==========
    """
    if hint is not None:
        return hint
    if signals.has_preference(text):
        return MemoryType.PROCEDURAL
    if signals.is_about_now(text):
        return MemoryType.WORKING
    if signals.is_fact(text):
        return MemoryType.SEMANTIC
    return MemoryType.EPISODIC
