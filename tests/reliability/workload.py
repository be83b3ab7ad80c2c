"""A mixed workload for many callers of one engine (threads, or ``AsyncEngine`` tasks):
remember, ingest, context, recall, feedback, pin, mute, forget and list for a few users,
with a model of what must be in the store afterwards.

The workload only plans calls and books their results; the caller runs them (directly in a
thread, or awaited in a task), so threads and tasks share the same bookkeeping.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.reliability import helpers

USERS = ("u0", "u1", "u2")

#: Relative weights of the operations.
WEIGHTS = {
    "remember": 24, "ingest": 8, "context": 24, "recall": 12, "feedback": 4, "pin": 8,
    "mute": 6, "forget": 6, "list": 8,
}  # fmt: skip


@dataclass
class Call:
    """One planned engine call."""

    op: str
    user: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    target: str | None = None  # the memory id a pin / mute / forget names


class Workload:
    """Plans calls and keeps the model: ids stored, ids forgotten, contexts served."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[str, set[str]] = {u: set() for u in USERS}
        self.stored: dict[str, set[str]] = {u: set() for u in USERS}
        self.forgotten: dict[str, set[str]] = {u: set() for u in USERS}
        self.contexts: dict[str, list[str]] = {u: [] for u in USERS}
        self.not_found: list[tuple[str, str, str]] = []  # (op, user, id) answered NotFound
        self.forget_missed: list[tuple[str, str]] = []  # a live id forget did not find
        self.tally = helpers.Tally()

    def plan(self, rng: random.Random) -> Call:
        """The next call, arguments drawn from ``rng`` and the model."""
        user = rng.choice(USERS)
        op = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        with self.lock:
            live = sorted(self.live[user])
            contexts = list(self.contexts[user])
        if op in ("pin", "mute", "forget") and not live:
            op = "remember"
        if op == "feedback" and not contexts:
            op = "context"
        if op == "remember":
            return Call(op, user, (helpers.sentence(rng, f"mk{user}"), user))
        if op == "ingest":
            return Call(op, user, (helpers.paragraph(rng, f"mk{user}", 3), user))
        if op == "context":
            return Call(op, user, (helpers.query(rng), user))
        if op == "recall":
            return Call(op, user, (helpers.query(rng), user), {"top_k": 10})
        if op == "feedback":
            return Call(op, user, (user, rng.choice(contexts)), {"helpful": rng.random() < 0.7})
        if op == "list":
            return Call(op, user, (user,), {"limit": 50})
        memory_id = rng.choice(live)
        if op == "forget":
            with self.lock:  # one forget per id: a second would rightly find nothing
                if memory_id not in self.live[user]:
                    return Call("list", user, (user,), {"limit": 50})
                self.live[user].discard(memory_id)
            return Call(op, user, ([memory_id], user), target=memory_id)
        flag = rng.random() < 0.8
        return Call(op, user, (memory_id, user, flag), target=memory_id)

    def done(self, call: Call, result: Any) -> None:
        """Book a call that returned."""
        with self.lock:
            if call.op == "remember":
                self._stored(call.user, [result])
            elif call.op == "ingest":
                self._stored(call.user, result.outcomes)
            elif call.op == "context":
                if result.id and result.memories:  # an empty block records no context
                    self.contexts[call.user].append(result.id)
            elif call.op == "forget":
                assert call.target is not None
                if result == 1:
                    self.forgotten[call.user].add(call.target)
                else:
                    self.forget_missed.append((call.user, call.target))
        self.tally.ok(call.op)

    def _stored(self, user: str, outcomes: Any) -> None:
        for outcome in outcomes:
            if outcome.action == "stored" and outcome.memory_id:
                self.stored[user].add(outcome.memory_id)
                self.live[user].add(outcome.memory_id)

    def failed(self, call: Call, exc: BaseException) -> None:
        """Book a call that raised: a NotFoundError naming a memory is judged at the end
        (it must have been forgotten); anything else is an error."""
        from engrain import NotFoundError

        if isinstance(exc, NotFoundError) and call.target is not None:
            with self.lock:
                self.not_found.append((call.op, call.user, call.target))
            self.tally.ok(f"{call.op} (not found)")
            return
        self.tally.failed(call.op, exc)

    def verdict(self, engine: Any) -> dict[str, Any]:
        """What the store holds against the model, once every caller has finished."""
        expected = {u: self.stored[u] - self.forgotten[u] for u in USERS}
        lost = helpers.missing(engine, expected)
        back = [(u, m.id) for u in USERS
                for m in engine.store.get(u, sorted(self.forgotten[u]))]  # fmt: skip
        unexpected = [x for x in self.not_found if x[2] not in self.forgotten[x[1]]]
        return {
            "ops": dict(self.tally.ops),
            "calls": sum(self.tally.ops.values()),
            "errors": sum(self.tally.errors.values()),
            "stored": sum(len(v) for v in self.stored.values()),
            "forgotten": sum(len(v) for v in self.forgotten.values()),
            "lost": len(lost),
            "lost_examples": lost[:5],
            "resurrected": len(back),
            "forget_missed": len(self.forget_missed),
            "unexpected_not_found": len(unexpected),
        }
