"""User isolation with look-alike user ids: random interleaved operations of ``alice``,
``Alice``, ``alice ``, ``al_ce``, ``alice%``, ``alice'--``, … and nothing of one user is
returned, changed or deleted by another user's call.

User ids are exact strings (case and surrounding whitespace significant): each user's texts
carry a marker of their own, queries tempt cross-user matches with other users' markers,
and a model of each user's ids is compared with what every call returns."""

from __future__ import annotations

import collections
import contextlib
import json
import random
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import EngrainError, Memory, NotFoundError
from tests.reliability import helpers
from tests.reliability.scale import scales

USERS = ["alice", "Alice", "alice ", "al_ce", "alice%", "alice'--", "bob", "carol"]

WEIGHTS = {
    "remember": 14, "ingest": 6, "conversation": 4, "import": 3, "forget_own": 4,
    "forget_other": 4, "pin_own": 3, "touch_other": 8, "feedback_other_context": 2,
    "context": 16, "recall": 10, "explain": 3, "list": 6, "export": 2,
}  # fmt: skip


def marker(user: str) -> str:
    """The token only ``user``'s texts carry."""
    return f"ownerqx{USERS.index(user):02d}q"


class Checker:
    """Runs random operations and collects violations of isolation."""

    def __init__(self, engine: Any, rng: random.Random) -> None:
        self.e = engine
        self.rng = rng
        self.model: dict[str, set[str]] = {u: set() for u in USERS}
        self.contexts: dict[str, list[str]] = {u: [] for u in USERS}
        self.violations: list[str] = []
        self.ops: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()

    def text(self, user: str) -> str:
        return helpers.sentence(self.rng, marker(user))

    def tempting(self, user: str) -> str:
        other = self.rng.choice([u for u in USERS if u != user])
        words = " ".join(self.rng.sample(helpers.WORDS, 6))
        return f"What about {marker(other)} {words} and {marker(user)}?"

    def check(self, op: str, user: str, memories: Iterable[Memory]) -> None:
        others = [marker(u) for u in USERS if u != user]
        for m in memories:
            if m.user_id != user:
                self.violations.append(f"{op}({user!r}) returned {m.id} of {m.user_id!r}")
            elif any(x in m.content for x in others):
                self.violations.append(f"{op}({user!r}) returned another user's text")
            elif m.id not in self.model[user]:
                self.violations.append(f"{op}({user!r}) returned {m.id}, not the user's")

    def check_text(self, op: str, user: str, text: str) -> None:
        for u in USERS:
            if u != user and marker(u) in text:
                self.violations.append(f"{op}({user!r}) text holds {u!r}'s marker")

    def someone_elses(self, user: str) -> tuple[str, str] | None:
        others = [u for u in USERS if u != user and self.model[u]]
        if not others:
            return None
        victim = self.rng.choice(others)
        return victim, self.rng.choice(sorted(self.model[victim]))

    @contextlib.contextmanager
    def untouched(self, op: str, victim: str, memory_id: str) -> Iterator[None]:
        before = [m.to_dict() for m in self.e.store.get(victim, [memory_id])]
        yield
        after = [m.to_dict() for m in self.e.store.get(victim, [memory_id])]
        if before != after:
            self.violations.append(f"{op} changed {victim!r}'s memory {memory_id}")

    # -- operations --------------------------------------------------------------------

    def op_remember(self, user: str) -> None:
        outcome = self.e.remember(
            self.text(user), user, kind=self.rng.choice(["fact", "preference", "decision"])
        )
        self.model[user].add(outcome.memory_id)

    def op_ingest(self, user: str) -> None:
        report = self.e.ingest(helpers.paragraph(self.rng, marker(user), 3), user)
        self.model[user].update(o.memory_id for o in report.outcomes if o.memory_id)

    def op_conversation(self, user: str) -> None:
        turns = [{"speaker": "user", "text": self.text(user)} for _ in range(3)]
        report = self.e.ingest_conversation(turns, user, session_id=uuid.uuid4().hex)
        self.model[user].update(o.memory_id for o in report.outcomes if o.memory_id)

    def op_import(self, user: str) -> None:
        records: list[dict[str, Any]] = [
            {"type": "memory", "id": uuid.uuid4().hex, "user_id": user,
             "content": self.text(user), "memory_type": "semantic", "kind": "fact",
             "created_at": "2025-06-01T00:00:00+00:00"}
            for _ in range(self.rng.randint(1, 5))
        ]  # fmt: skip
        records.append({"type": "text", "user_id": user, "text": self.text(user)})
        before = {m.id for m in self.e.list(user, limit=None)}
        self.e.import_records(records)
        after = {m.id for m in self.e.list(user, limit=None)}
        self.model[user].update(r["id"] for r in records if r["type"] == "memory")
        self.model[user].update(after - before)  # the text record's chunks

    def op_forget_own(self, user: str) -> None:
        if self.model[user]:
            memory_id = self.rng.choice(sorted(self.model[user]))
            if self.e.forget([memory_id], user) != 1:
                self.violations.append(f"forget of {user!r}'s own {memory_id} found nothing")
            self.model[user].discard(memory_id)

    def op_forget_other(self, user: str) -> None:
        pick = self.someone_elses(user)
        if pick is not None:
            victim, memory_id = pick
            with self.untouched(f"forget by {user!r}", victim, memory_id):
                if self.e.forget([memory_id], user) != 0:
                    self.violations.append(f"forget by {user!r} took {victim!r}'s memory")

    def op_pin_own(self, user: str) -> None:
        if self.model[user]:
            memory_id = self.rng.choice(sorted(self.model[user]))
            self.e.pin(memory_id, user, pinned=self.rng.random() < 0.5)

    def op_touch_other(self, user: str) -> None:
        pick = self.someone_elses(user)
        if pick is None:
            return
        victim, memory_id = pick
        action = self.rng.choice(["pin", "mute", "update", "get", "correct", "feedback"])
        with self.untouched(f"{action} by {user!r}", victim, memory_id):
            try:
                if action == "pin":
                    self.e.pin(memory_id, user)
                elif action == "mute":
                    self.e.mute(memory_id, user)
                elif action == "update":
                    self.e.update(memory_id, user, content=self.text(user))
                elif action == "get":
                    self.e.get(memory_id, user)
                elif action == "correct":
                    self.e.remember(f"Actually {self.text(user)}", user, kind="correction",
                                    corrects=memory_id)  # fmt: skip
                else:
                    self.e.feedback(user, memory_ids=[memory_id], helpful=False)
                    return  # unknown memories are skipped: the documented behaviour
            except NotFoundError:
                return
        self.violations.append(f"{action} by {user!r} of {victim!r}'s memory succeeded")

    def op_feedback_other_context(self, user: str) -> None:
        others = [u for u in USERS if u != user and self.contexts[u]]
        if not others:
            return
        context_id = self.rng.choice(self.contexts[self.rng.choice(others)])
        try:
            self.e.feedback(user, context_id, helpful=True)
        except NotFoundError:
            return
        self.violations.append(f"feedback by {user!r} on another user's context succeeded")

    def op_context(self, user: str) -> None:
        budget = self.rng.choice([None, 100, 500, 5000])
        ctx = self.e.context(self.tempting(user), user, token_budget=budget)
        self.check("context", user, ctx.memories)
        self.check_text("context", user, ctx.text)
        if ctx.memories:
            self.contexts[user].append(ctx.id)

    def op_recall(self, user: str) -> None:
        result = self.e.recall(self.tempting(user), user, top_k=self.rng.randint(1, 20))
        self.check("recall", user, result.memories)

    def op_explain(self, user: str) -> None:
        report = self.e.explain(self.tempting(user), user).to_dict()
        for row in report["candidates"]:
            self.check_text("explain", user, row["content"])

    def op_list(self, user: str) -> None:
        listed = self.e.list(user, limit=None)
        self.check("list", user, listed)
        ids = {m.id for m in listed}
        if ids != self.model[user]:
            self.violations.append(f"list({user!r}): {len(ids - self.model[user])} extra, "
                                   f"{len(self.model[user] - ids)} missing")  # fmt: skip
            self.model[user] = ids  # report one fault once

    def op_export(self, user: str) -> None:
        records = [r for r in self.e.export_records(user) if r.get("type", "memory") == "memory"]
        self.check("export", user, [Memory.from_dict(r) for r in records])
        for r in self.e.export_records(user):
            if r.get("user_id") != user:
                self.violations.append(f"export({user!r}) holds a record of {r.get('user_id')!r}")

    def step(self) -> None:
        user = self.rng.choice(USERS)
        name = self.rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        self.ops[name] += 1
        try:
            getattr(self, f"op_{name}")(user)
        except EngrainError as exc:  # refused cleanly; counted and shown
            self.refused[f"{name}: {type(exc).__name__}: {exc.message[:80]}"] += 1


@pytest.mark.filterwarnings("ignore:user_id .* whitespace")  # the look-alikes are on purpose
@pytest.mark.parametrize("ops", scales(300, 5000))
def test_look_alike_users_stay_apart(url: str, data_dir: Path, ops: int) -> None:
    """``ops`` random operations, then a full list and export of every user."""
    engine = helpers.open_engine(url, data_dir, auto_compress=False)
    try:
        checker = Checker(engine, random.Random(1))
        for _ in range(ops):
            checker.step()
        for user in USERS:
            checker.op_list(user)
            checker.op_export(user)
        engine.wait(timeout=60)
    finally:
        engine.close()
    summary = {"ops": sum(checker.ops.values()), "by_op": dict(checker.ops),
               "memories": {u: len(v) for u, v in checker.model.items()},
               "refused": dict(checker.refused), "violations": len(checker.violations)}  # fmt: skip
    print(f"\nisolation: {json.dumps(summary)}")
    assert not checker.violations, checker.violations[:10]
    assert not checker.refused
    assert sum(len(v) for v in checker.model.values()) > 0
