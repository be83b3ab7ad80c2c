"""How results look as text: plain functions of engrain's result types, no click."""

from __future__ import annotations

import json

from engrain.model import Memory, Outcome
from engrain.recall.results import ScoredMemory


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun`` as a summary reads them: ``1 memory``, ``2 memories``,
    ``0 tokens``, ``1 API key`` (a noun ending in a consonant and ``y`` takes ``ies``)."""
    if count == 1:
        return f"{count} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{count} {noun[:-1]}ies"
    return f"{count} {noun}s"


def one_line(text: str, width: int = 100) -> str:
    """``text`` with its whitespace collapsed, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def memory_line(memory: Memory) -> str:
    """A memory in one line: id, type/kind, pinned and muted flags, content."""
    flags = "".join(
        f" [{name}]" for name, on in (("pinned", memory.pinned), ("muted", memory.muted)) if on
    )
    label = f"{memory.memory_type.value}/{memory.kind.value}"
    return f"{memory.id}  {label:<22}{flags}  {one_line(memory.content)}"


def memory_block(memory: Memory) -> str:
    """Every field of a memory, one ``name: value`` line each."""
    lines = []
    for name, value in memory.to_dict().items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value
        lines.append(f"{name}: {'' if value is None else shown}")
    return "\n".join(lines)


def outcome_line(outcome: Outcome) -> str:
    """What happened to one ingested chunk: stored, merged or discarded (and why)."""
    if outcome.action == "discarded":
        return f"discarded  {outcome.reason}: {one_line(outcome.content, 60)}"
    mtype = outcome.memory_type.value if outcome.memory_type else "-"
    preview = one_line(outcome.content, 60)
    return f"{outcome.action:<9}  {outcome.memory_id}  {mtype:<10}  {preview}"


def scored_line(scored: ScoredMemory) -> str:
    """A recalled memory in one line: score, similarity, tokens, id, type and content."""
    memory = scored.memory
    return (
        f"{scored.score:6.3f}  sim {scored.similarity:6.3f}  {scored.tokens:>4} tok  "
        f"{memory.id}  [{memory.memory_type.value.upper()}] {one_line(memory.content, 70)}"
    )
