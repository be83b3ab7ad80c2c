"""Several conversation sessions in one call (``Engine.ingest_conversations``, issue 18).

One ``ingest_conversation`` call runs its steps one after the other: chunk and embed (the
model's workers on both cores), then plan and write (one core, the workers idle, and on
PostgreSQL the round trips and the server's work while the client waits). Over many
sessions :func:`pipelined` embeds session *i + 1* on a side thread while session *i* is
planned and written, so the serial part of each session runs beside the next session's
model runs.

What is stored is exactly what one ``ingest_conversation`` per session, in the same order,
stores: each session is planned under the engine's lock after the previous session's write
committed (so its novelty and dedup see it) and written in its own transaction. Embedding
reads no memory, so embedding ahead changes no decision.

Failure: every session is validated before anything is read or written, so a malformed
session refuses the whole call. A failure later (the model, the store) raises after the
sessions before the failing one were written, each whole; nothing of the failing session or
of the ones after it is written. The error carries a note saying how many were stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime

from engrain import validate
from engrain.errors import ValidationError
from engrain.ingest.plan import Draft, Origin, checked_turns
from engrain.model import IngestReport, Turn
from engrain.threads import Pool

#: The keys a session may have: ``Engine.ingest_conversation``'s parameters.
SESSION_FIELDS = (
    "turns", "user_id", "session_id", "project", "domains", "memory_type_hint", "metadata",
    "now",
)  # fmt: skip
#: The most sessions one call takes (a call holds every session's turns in memory).
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Session:
    """One session of a call, validated: its turns, origin and ``now`` (``None``: the
    clock when the session is planned, as for a call of its own)."""

    turns: list[Turn]
    origin: Origin
    now: datetime | None


def checked_sessions(sessions: object, max_chars: int) -> list[Session]:
    """``sessions`` (mappings with the keys of :data:`SESSION_FIELDS`; ``turns`` and
    ``user_id`` required) validated as ``ingest_conversation`` validates its arguments;
    :class:`ValidationError` naming the session otherwise."""
    if isinstance(sessions, str | bytes | Mapping) or not isinstance(sessions, Sequence):
        raise ValidationError("sessions must be a list of sessions (mappings)")
    if len(sessions) > MAX_SESSIONS:
        raise ValidationError(f"{len(sessions):,} sessions in one call; the limit is "
                              f"{MAX_SESSIONS:,}")  # fmt: skip
    return [_checked(index, session, max_chars) for index, session in enumerate(sessions)]


def _checked(index: int, session: object, max_chars: int) -> Session:
    """One session of :func:`checked_sessions`, errors prefixed with its position."""
    where = f"sessions[{index}]"
    if not isinstance(session, Mapping):
        raise ValidationError(f"{where} must be a mapping, not {type(session).__name__}")
    unknown = sorted(str(k) for k in session if k not in SESSION_FIELDS)
    if unknown:
        raise ValidationError(f"{where} has unknown keys {unknown}; a session's keys are "
                              f"{list(SESSION_FIELDS)}")  # fmt: skip
    for required in ("turns", "user_id"):
        if required not in session:
            raise ValidationError(f"{where} has no {required!r}")
    try:
        return Session(
            checked_turns(session["turns"], max_chars),
            Origin.checked(session["user_id"], session.get("session_id"), session.get("project"),
                           session.get("domains"), session.get("memory_type_hint"),
                           session.get("metadata"), max_chars=max_chars),
            validate.moment(session.get("now"), "now"),
        )  # fmt: skip
    except ValidationError as exc:
        raise type(exc)(f"{where}: {exc.message}") from exc


def pipelined(
    sessions: Sequence[Session],
    drafts: Callable[[Sequence[Turn]], list[Draft]],
    store: Callable[[list[Draft], Session], IngestReport],
) -> list[IngestReport]:
    """``store(drafts(s.turns), s)`` for each session in order, the next session's
    ``drafts`` (chunking and embedding) running on a side thread while ``store`` (plan
    and write, the caller's lock) runs for this one; the reports in order. A failure
    raises once the sessions before it are stored, with a note of how many were."""
    reports: list[IngestReport] = []
    if not sessions:
        return reports
    with Pool(1, "engrain-ahead") as ahead:
        pending: Future[list[Draft]] = ahead.submit(drafts, sessions[0].turns)
        for index, session in enumerate(sessions):
            try:
                ready = pending.result()
                if index + 1 < len(sessions):
                    pending = ahead.submit(drafts, sessions[index + 1].turns)
                reports.append(store(ready, session))
            except BaseException as exc:
                exc.add_note(f"ingest_conversations: the {index} sessions before sessions"
                             f"[{index}] were stored; sessions[{index}] and the "
                             f"{len(sessions) - index - 1} after it were not")  # fmt: skip
                raise
    return reports
