"""Prompt assembly (spec section 4): the ``<memory>`` block of ``[TYPE] content`` lines."""

from __future__ import annotations

from collections.abc import Sequence

from engrain.model import Memory, MemoryType


def render_line(memory: Memory) -> str:
    """``[TYPE] content``; episodic memories carry their date, as in the spec's example."""
    prefix = f"[{memory.memory_type.value.upper()}] "
    if memory.memory_type is MemoryType.EPISODIC:
        prefix += f"{memory.when.date().isoformat()}: "
    return prefix + memory.content


def render_tagged(memories: Sequence[Memory]) -> str:
    """The spec's block, or the empty string when there is nothing to inject."""
    if not memories:
        return ""
    lines = "\n".join(render_line(m) for m in memories)
    return f"<memory>\n{lines}\n</memory>"
