"""Export -> import into a fresh store -> export: byte-identical, and the copy answers
``context()`` exactly as the original does. What the engine learned for a user travels with
the export: co-occurrence taught by feedback, and the context records feedback refers to
(issue 11: they were dropped, so after an import the same message got its memories in
another order), and memories of equal relevance keep their order in the copy."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engrain import feedback as fb
from tests.pg import new_schema
from tests.reliability import helpers

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=30)
MESSAGES = [
    ("ada", "Invoice finalization fails with lock timeouts again, where should I look?"),
    ("ada", "How should I write the tests for the late fee service?"),
    ("bob", "Which port does the staging API listen on?"),
    ("bob", "Wie heißt der Server in Zürich?"),
]


def _build(e: Any) -> list[tuple[str, str]]:
    """A small store with pins, mutes, a correction, conversations, injections and positive
    feedback on several contexts; the ``(user, context id)`` pairs given feedback."""
    e.remember("I prefer pytest with plain asserts over unittest classes.", "ada",
               kind="preference", now=T0)  # fmt: skip
    e.remember("Invoice finalization takes a row lock on the tenant's invoice counter.", "ada",
               kind="fact", project="ledger", domains=["billing"], now=T0)  # fmt: skip
    e.remember("Lock timeouts in finalization came from a Stripe call inside the transaction.",
               "ada", kind="antipattern", pinned=True, now=T0)  # fmt: skip
    e.remember("Late fee service tests use a frozen clock fixture.", "ada", now=T0)
    lunch = e.remember("The team lunch is at 12:00 on Fridays.", "ada", now=T0)
    e.remember("Actually, the team lunch moved to 12:30.", "ada", kind="correction",
               corrects=lunch.memory_id, now=T0 + timedelta(days=1))  # fmt: skip
    muted = e.remember("Old note about the v1 invoice PDF renderer.", "ada", now=T0)
    e.mute(muted.memory_id, "ada")
    e.remember("The staging API listens on port 8080.", "bob", now=T0)
    # a conflicting pair of equal relevance: the copy's cosines differ in the seventh digit
    # (the vectors sit at other rows of its matrix), and its order must not (session 25)
    e.remember("The staging API listens on port 9090.", "bob", now=T0 + timedelta(hours=1))
    e.remember("Der Server in Zürich heißt zrh-01 — 東京 has tky-02 🚀.", "bob", now=T0)
    rng = random.Random(5)
    for s in range(4):
        turns = [{"speaker": "ada", "text": f"Session {s}: {helpers.paragraph(rng, None, 2)}",
                  "turn_id": f"s{s}t0", "at": (T0 + timedelta(days=s)).isoformat()},
                 {"speaker": "assistant", "text": helpers.paragraph(rng, None, 2),
                  "turn_id": f"s{s}t1",
                  "at": (T0 + timedelta(days=s, minutes=1)).isoformat()}]  # fmt: skip
        e.ingest_conversation(turns, "ada", session_id=f"sess-{s}", now=T0 + timedelta(days=s))
    given = []
    for user, message in MESSAGES:
        for _ in range(3):
            ctx = e.context(message, user, now=T0 + timedelta(days=10))
        if len(ctx.memories) > 1:
            e.feedback(user, ctx.id, helpful=True)
            given.append((user, ctx.id))
    e.wait(timeout=60)
    return given


def _export(e: Any) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n"
                   for r in e.export_records()).encode("utf-8")  # fmt: skip


def _answers(e: Any) -> list[tuple[str, list[str]]]:
    out = []
    for user, message in MESSAGES:
        ctx = e.context(message, user, now=LATER)
        out.append((ctx.text, [m.id for m in ctx.memories]))
    return out


def test_export_import_export_is_lossless(
    url: str, data_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The copy exports the same bytes, answers the same, and knows what the original
    learned; importing the file again duplicates nothing."""
    if helpers.sqlite_path(url) is not None:
        copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    else:
        copy_url = new_schema(request.getfixturevalue("pg_server"))
    src = helpers.open_engine(url, data_dir, auto_compress=False)
    dst = helpers.open_engine(copy_url, data_dir, auto_compress=False)
    try:
        given = _build(src)
        first = _export(src)
        dst.import_records(json.loads(line) for line in first.decode().splitlines())
        second = _export(dst)
        dst.import_records(json.loads(line) for line in first.decode().splitlines())
        third = _export(dst)  # before context() calls change access counts and records
        learned = {u: src.store.get_state(u, fb.COOCCURRENCE, fb.PAIRS) for u in ("ada", "bob")}
        copied = {u: dst.store.get_state(u, fb.COOCCURRENCE, fb.PAIRS) for u in ("ada", "bob")}
        before, after = _answers(src), _answers(dst)
        summary = {
            "records": first.count(b"\n"), "bytes": [len(first), len(second)],
            "byte_identical": first == second,
            "types": sorted({json.loads(x).get("type", "memory")
                             for x in first.decode().splitlines()}),
            "feedback_given": len(given),
            "cooccurrence_learned": {u: bool(v) for u, v in learned.items()},
            "cooccurrence_copied": learned == copied,
            "context_same": [a == b for a, b in zip(before, after, strict=True)],
            "reimport_identical": second == third,
        }  # fmt: skip
        print(f"\nroundtrip: {json.dumps(summary)}")
        assert given and any(learned.values())  # the store did learn something
        assert first == second
        assert before == after
        assert learned == copied
        assert second == third
        for user, context_id in given:  # feedback on a context served before the move
            dst.feedback(user, context_id, helpful=False)
    finally:
        src.close()
        dst.close()
