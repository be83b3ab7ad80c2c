"""The curation stage: what ``Engine.update`` (and ``pin``, ``mute``) may change, validated
into the fields of one :class:`~engrain.store.base.Patch`, and whether the change dates the
memory."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engrain import validate
from engrain.errors import ValidationError
from engrain.ingest.clean import clean_text
from engrain.model import Kind, Memory, Provenance, content_hash
from engrain.store import MemoryFilter, Store
from engrain.store.base import KeyClaim

#: Fields ``Engine.update`` may change.
UPDATABLE = frozenset(
    {"content", "kind", "memory_type", "domains", "importance", "confidence", "usefulness",
     "pinned", "muted", "event_at", "key", "project", "metadata"}
)  # fmt: skip

#: Fields that say how to use a memory, not what it says: changing only these leaves its
#: ``updated_at`` (which recency and the tiers' age filter read) alone, so pinning or
#: muting an old memory does not make it look new. Feedback changes usefulness the same way.
FLAGS = frozenset({"pinned", "muted", "usefulness"})
#: Fields that say which key entry a keyed memory holds (its key, of its kind and project).
ENTRY = frozenset({"key", "kind", "project"})


def changes(requested: Mapping[str, Any], *, max_chars: int) -> dict[str, Any]:
    """The requested changes as Memory fields, each validated; a new ``content`` brings its
    hash (its embedding is the caller's to add) and ``metadata`` is kept as given, to merge
    into the memory's own with :func:`merged_metadata`."""
    unknown = set(requested) - UPDATABLE
    if unknown:
        raise ValidationError(f"cannot update {sorted(unknown)}; updatable: {sorted(UPDATABLE)}")
    fields: dict[str, Any] = {}
    for name, value in requested.items():
        if name == "content":
            text = clean_text(validate.text(value, "content", max_chars=max_chars))
            fields.update(content=text, content_hash=content_hash(text))
        elif name == "kind":
            fields[name] = validate.kind(value)
        elif name == "memory_type":
            fields[name] = validate.memory_type(value)
        elif name == "domains":
            fields[name] = validate.domains(value)
        elif name in ("importance", "confidence", "usefulness"):
            fields[name] = validate.unit(value, name)
        elif name in ("pinned", "muted"):
            fields[name] = validate.flag(value, name)
        elif name == "event_at":
            fields[name] = validate.moment(value, name)
        elif name in ("key", "project"):
            fields[name] = validate.optional_identifier(value, name)
        else:  # metadata
            fields[name] = validate.callers_metadata(value, max_chars=max_chars)
    return fields


def stamped(fields: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The patch of ``fields``: with ``updated_at = now`` when any of them changes what the
    memory says (content, kind, metadata, …), as they are when only :data:`FLAGS` change."""
    if set(fields) <= FLAGS:
        return dict(fields)
    return {**fields, "updated_at": now}


def merged_metadata(memory: Memory, metadata: Mapping[str, Any]) -> Provenance:
    """The memory's provenance with ``metadata`` merged into its own."""
    return Provenance(memory.provenance.turn_ids, {**memory.provenance.metadata, **metadata})


def entry_of(memory: Memory) -> MemoryFilter | None:
    """The lookup of the key entry ``memory`` holds, as the planner looks up a keyed item
    (its key and project, of its kind or a correction's; a correction's key is its entry
    whatever the holder's kind), or ``None`` if it holds none (no key, or superseded)."""
    if memory.key is None or memory.superseded_by is not None:
        return None
    kinds = None if memory.kind is Kind.CORRECTION else (memory.kind, Kind.CORRECTION)
    return MemoryFilter(project=memory.project, key=memory.key, kinds=kinds,
                        include_superseded=False, include_compressed=False)  # fmt: skip


def key_claims(store: Store, memory: Memory, fields: Mapping[str, Any]) -> list[KeyClaim]:
    """What an update of ``memory`` to ``fields`` assumes about the key entry it moves the
    memory into: no other live memory holds it (docs/concurrency.md: a key has one live
    memory), or :class:`ValidationError` naming the one that does. An update that leaves
    the memory's entry as it is, or leaves it holding none, assumes nothing."""
    if not ENTRY & fields.keys():
        return []
    entry = entry_of(memory.evolve(**{k: v for k, v in fields.items() if k in ENTRY}))
    if entry is None or entry == entry_of(memory):
        return []
    held = [m for m in store.query(memory.user_id, entry, limit=2) if m.id != memory.id]
    if held:
        raise ValidationError(
            f"key {entry.key!r} is held by memory {held[0].id!r} ({held[0].kind.value}): "
            "forget it, or correct it (remember(..., corrects=id)), first"
        )
    # checked again by the write, ordered with every other writer of the user; a memory
    # that already passes the lookup (another project's entry, seen from no project) is
    # this one: only this process's lock orders it then
    return [] if entry.matches(memory) else [KeyClaim(memory.user_id, entry, None)]
