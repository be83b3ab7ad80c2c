"""Recent activity: the contexts a user's assistant received, and the feedback given on them.

Every ``context()`` that injects memories records which ones under its id
(``feedback.CONTEXTS``, kept ``context_retention_days``); this module reads those records
back, newest first, with the memories that still exist. It only reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engrain import feedback as fb
from engrain.model import Memory, as_utc
from engrain.store.base import Store


@dataclass(frozen=True)
class ContextRecord:
    """One context as recorded: its id, when it was served, the ids it injected (in
    rendering order), those memories still stored, and every feedback target given on it
    (1.0 helpful, 0.0 not, or a score)."""

    id: str
    at: datetime
    memory_ids: tuple[str, ...]
    memories: tuple[Memory, ...] = field(default=(), compare=False)
    feedback: tuple[float, ...] = ()

    @property
    def forgotten(self) -> int:
        """How many of the injected memories were deleted since."""
        return len(self.memory_ids) - len(self.memories)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (memories without their embeddings)."""
        return {"context_id": self.id, "at": self.at.isoformat(),
                "memory_ids": list(self.memory_ids),
                "memories": [m.to_dict() for m in self.memories],
                "feedback": list(self.feedback)}  # fmt: skip


def recent(
    store: Store, user_id: str, *, project: str | None = None, limit: int = 20
) -> list[ContextRecord]:
    """The user's ``limit`` most recent recorded contexts, newest first. With ``project``,
    only contexts whose remaining memories all belong to it (a context mixing projects
    says something about each of them, so it is shown to neither)."""
    records = sorted(
        ((s.key, s.value) for s in store.states(user_id, fb.CONTEXTS) if s.value is not None),
        key=lambda kv: (str(kv[1].get("at", "")), kv[0]),
        reverse=True,
    )
    found: list[ContextRecord] = []
    for key, value in records:
        if len(found) >= limit:
            break
        ids = tuple(str(i) for i in value.get("memory_ids") or ())
        memories = tuple(store.get(user_id, list(ids)))
        if project is not None and any(m.project != project for m in memories):
            continue
        found.append(ContextRecord(
            id=key, at=as_utc(datetime.fromisoformat(str(value["at"]))), memory_ids=ids,
            memories=memories,
            feedback=tuple(float(t) for t in value.get("feedback") or ()),
        ))  # fmt: skip
    return found
