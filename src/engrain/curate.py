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
from engrain.model import Memory, Provenance, content_hash

#: Fields ``Engine.update`` may change.
UPDATABLE = frozenset(
    {"content", "kind", "memory_type", "domains", "importance", "confidence", "usefulness",
     "pinned", "muted", "event_at", "key", "project", "metadata"}
)  # fmt: skip

#: Fields that say how to use a memory, not what it says: changing only these leaves its
#: ``updated_at`` (which recency and the tiers' age filter read) alone, so pinning or
#: muting an old memory does not make it look new. Feedback changes usefulness the same way.
FLAGS = frozenset({"pinned", "muted", "usefulness"})


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
