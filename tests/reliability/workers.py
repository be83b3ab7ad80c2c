"""Bodies of the processes the reliability tests spawn (``multiprocessing`` with the spawn
start method imports this module by name in the child). Each opens its own engine, says it
is ready, waits for the common start, and leaves its results in files: a JSON summary and,
for writes, a ledger of ids flushed after each call returned."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

from tests.reliability import helpers

USERS = ("u0", "u1", "u2", "u3")


def _wait_for_start(ready: Any, go: Any) -> None:
    ready.set()
    if not go.wait(timeout=300):
        raise RuntimeError("the start signal never came")


def churn(
    role: str, index: int, url: str, data_dir: str, seconds: float, threads: int, out: str,
    ready: Any, go: Any,
) -> None:  # fmt: skip
    """``threads`` threads sharing one engine for ``seconds``: a writer loops remember (70%)
    and ingest (30%), a reader context (60%) and recall (40%), over users shared by every
    process. Every exception is counted; logged background errors too."""
    tally = helpers.Tally()
    ledger = helpers.Ledger(Path(f"{out}.ids")) if role == "writer" else None
    with helpers.LoggedErrors() as logged:
        engine = helpers.open_engine(url, Path(data_dir))
        _wait_for_start(ready, go)
        deadline = time.monotonic() + seconds

        def loop(thread: int) -> None:
            rng = random.Random(index * 1009 + thread * 17 + (role == "reader"))
            while time.monotonic() < deadline:
                user = rng.choice(USERS)
                op = "?"
                try:
                    if role == "writer":
                        if rng.random() < 0.7:
                            op = "remember"
                            outcomes = [engine.remember(helpers.sentence(rng, f"w{index}"), user)]
                        else:
                            op = "ingest"
                            text = helpers.paragraph(rng, f"w{index}", 3)
                            outcomes = engine.ingest(text, user).outcomes
                        assert ledger is not None
                        ledger.write("C", user, [o.memory_id for o in outcomes if o.memory_id])
                    elif rng.random() < 0.6:
                        op = "context"
                        engine.context(helpers.query(rng), user)
                    else:
                        op = "recall"
                        engine.recall(helpers.query(rng), user, top_k=10)
                except Exception as exc:  # counted, never hidden
                    tally.failed(op, exc)
                else:
                    tally.ok(op)

        try:
            pool = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            engine.wait(timeout=60)
        finally:
            with contextlib.suppress(Exception):
                engine.close()
            if ledger is not None:
                ledger.close()
    result = {**tally.to_dict(), "background_errors": dict(logged.counts)}
    Path(f"{out}.json").write_text(json.dumps(result))


def flip(
    action: str, url: str, data_dir: str, user: str, ids: list[str], out: str, ready: Any,
    go: Any,
) -> None:  # fmt: skip
    """One side of a lost-update race: ``pin``, ``mute`` or ``forget`` each of ``ids`` in
    order. Records which calls took effect (``forget`` returned 1, or the flag was set) and
    how many answered NotFoundError; any other exception is counted."""
    from engrain import NotFoundError

    tally = helpers.Tally()
    done: list[str] = []
    not_found = 0
    engine = helpers.open_engine(url, Path(data_dir), auto_compress=False)
    _wait_for_start(ready, go)
    try:
        for memory_id in ids:
            try:
                if action == "forget":
                    if engine.forget([memory_id], user) == 1:
                        done.append(memory_id)
                else:
                    getattr(engine, action)(memory_id, user)
                    done.append(memory_id)
            except NotFoundError:
                not_found += 1
            except Exception as exc:  # counted, never hidden
                tally.failed(action, exc)
            else:
                tally.ok(action)
    finally:
        engine.close()
    Path(out).write_text(json.dumps({**tally.to_dict(), "done": done, "not_found": not_found}))


def remember_keys(
    n: int, url: str, data_dir: str, user: str, rounds: int, barrier: Any, out: str,
    ready: Any, go: Any,
) -> None:  # fmt: skip
    """One side of a key race: for each round, wait on ``barrier`` (shared with the other
    side) and remember :func:`keyed_value` under that round's new key (:func:`round_key`)."""
    tally = helpers.Tally()
    engine = helpers.open_engine(url, Path(data_dir), auto_compress=False)
    _wait_for_start(ready, go)
    try:
        remember_rounds(engine, n, user, rounds, barrier, tally)
    finally:
        engine.close()
    Path(out).write_text(json.dumps(tally.to_dict()))


def remember_twins(
    n: int, url: str, data_dir: str, user: str, rounds: int, barrier: Any, out: str,
    ready: Any, go: Any,
) -> None:  # fmt: skip
    """:func:`remember_keys` with near-identical values under each side's own key
    (:func:`twin_key`, :func:`twin_value`)."""
    tally = helpers.Tally()
    engine = helpers.open_engine(url, Path(data_dir), auto_compress=False)
    _wait_for_start(ready, go)
    try:
        remember_rounds(engine, n, user, rounds, barrier, tally, twins=True)
    finally:
        engine.close()
    Path(out).write_text(json.dumps(tally.to_dict()))


def remember_rounds(
    engine: Any, n: int, user: str, rounds: int, barrier: Any, tally: helpers.Tally,
    *, twins: bool = False,
) -> None:  # fmt: skip
    """The rounds of :func:`remember_keys` on ``engine`` (a process's, or a thread's); with
    ``twins``, those of :func:`remember_twins`."""
    for r in range(rounds):
        barrier.wait(timeout=120)
        key, value = (
            (twin_key(n, r), twin_value(n, r)) if twins else (round_key(r), keyed_value(n, r))
        )
        try:
            engine.remember(value, user, kind="golden_path", key=key)
        except Exception as exc:  # counted, never hidden
            tally.failed("remember", exc)
        else:
            tally.ok("remember")


def round_key(r: int) -> str:
    """The key both sides of round ``r`` remember under."""
    return f"deploy-{r}"


def twin_key(n: int, r: int) -> str:
    """Side ``n``'s own key in round ``r`` of :func:`remember_twins`."""
    return f"twin-{r}-{n}"


def twin_value(n: int, r: int) -> str:
    """What side ``n`` remembers in round ``r`` of :func:`remember_twins`: one sentence of
    pseudo-words per round, side 1's with an extra "!", a near-duplicate of side 0's
    (before session 23, whichever came second updated the other key's memory)."""
    return helpers.sentence(random.Random(f"twin-{r}"), "twin") + ("!" if n else "")


def keyed_value(n: int, r: int) -> str:
    """What side ``n`` remembers in round ``r``: pseudo-words of its own, so no round's
    value is a near-duplicate of another round's memory (which it would update instead)."""
    return helpers.sentence(random.Random(f"key-{r}-{n}"), f"side{n}")


def crash_writer(url: str, data_dir: str, seed: int, ledger_path: str, ready: Any) -> None:
    """Write until killed: remember, ingest, a conversation or a bulk import of 20-300
    records with ids chosen in advance. Each id goes to the ledger after the call that wrote
    it returned; an import's ids also go there before the call (``I.<batch>``), and its
    commit after (``B.<batch>``), so the parent can check the batch is all-or-nothing."""
    import uuid

    rng = random.Random(seed)
    ledger = helpers.Ledger(Path(ledger_path))
    engine = helpers.open_engine(url, Path(data_dir))
    ready.set()
    users = ("ada", "bob", "cyd")
    while True:
        user = rng.choice(users)
        op = rng.choices(["remember", "ingest", "conversation", "import"], [4, 2, 1, 3])[0]
        if op == "remember":
            outcomes = [engine.remember(helpers.sentence(rng, f"mk{user}"), user)]
        elif op == "ingest":
            text = helpers.paragraph(rng, f"mk{user}", rng.randint(2, 12))
            outcomes = engine.ingest(text, user).outcomes
        elif op == "conversation":
            turns = [{"speaker": rng.choice(["ada", "assistant"]),
                      "text": helpers.sentence(rng), "turn_id": f"t{i}"}
                     for i in range(rng.randint(2, 20))]  # fmt: skip
            outcomes = engine.ingest_conversation(turns, user, session_id=uuid.uuid4().hex).outcomes
        else:
            batch = uuid.uuid4().hex[:12]
            records = [{"type": "memory", "id": f"{batch}-{i}", "user_id": user,
                        "content": helpers.sentence(rng, f"mk{user}"), "memory_type": "semantic",
                        "kind": "fact", "created_at": "2025-06-01T00:00:00+00:00"}
                       for i in range(rng.randint(20, 300))]  # fmt: skip
            ledger.write(f"I.{batch}", user, [r["id"] for r in records])
            engine.import_records(records)
            ledger.write(f"B.{batch}", user, ["-"])
            continue
        ledger.write("C", user, [o.memory_id for o in outcomes if o.memory_id])
