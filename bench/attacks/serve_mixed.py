"""Attack: ``engrain serve --workers 2`` under many clients of look-alike users at once,
mixing writes, ``context``, forgets, exports and resolutions of one pair from both sides,
then SIGTERM while they keep going.

Six users whose ids differ by case, one character or a URL character (``alice``,
``Alice``, ``al_ce``, ``alice%``, ``alice_``, ``aIice``), each with a key of its own and two
client threads (``httpx``, kept-alive connections; the two workers each take some). Every
user's memories carry a token of that user. Each thread loops: remember a fact (three
times in six), ask ``POST /v1/context``, forget one of its own acknowledged memories
(``DELETE /v1/memories/{id}``), export the user (``GET /v1/export``); and every fifth
loop the user's two threads meet and resolve one of the user's pre-written pairs at once,
thread 0 keeping the first memory and thread 1 the second (``POST /v1/review/resolve``),
so both workers may settle one pair in opposite directions at once. After ``--seconds``
the server gets SIGTERM while the clients go on until it stops answering.

Rules: no 5xx before the signal; no answer for one user holds another user's token; every
memory acknowledged (201) and not forgotten is in the store afterwards, and every memory
whose forget was acknowledged is not; every pair keeps at least one live memory (on the
code before session 24 two opposite ``keep``s forgot both); the server exits gracefully
within 60 s; ``integrity_check`` is ok.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/serve_mixed.py [--seconds 20] \
        [--json bench/results/attack-serve-mixed-s24-h2.json]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, round_environment
from serve_sigterm import cli, free_port, start

from engrain import Engine
from engrain.config import Settings

USERS = ("alice", "Alice", "al_ce", "alice%", "alice_", "aIice")
PAIRS = 12


def token(n: int) -> str:
    """User ``n``'s token: a word no other user's memory holds."""
    return f"zq{n}x{'kvw'[n % 3]}tok"


class Log:
    """What one client thread saw."""

    def __init__(self) -> None:
        self.acknowledged: dict[str, str] = {}  # id → content
        self.forgotten: set[str] = set()
        self.statuses: dict[str, int] = {}
        self.server_errors: list[str] = []
        self.leaks: list[str] = []
        self.unanswered = 0

    def status(self, what: str, r: httpx.Response, signalled: bool) -> None:
        key = f"{what} {r.status_code}"
        self.statuses[key] = self.statuses.get(key, 0) + 1
        if r.status_code >= 500 and not signalled:
            self.server_errors.append(f"{key}: {r.text[:200]}")


def client(base: str, key: str, n: int, side: int, pairs: list[tuple[str, str]],
           meet: threading.Barrier, stop: threading.Event, signalled: threading.Event,
           log: Log) -> None:  # fmt: skip
    user, mine = USERS[n], token(n)
    others = [token(i) for i in range(len(USERS)) if i != n]
    rng = random.Random(n * 2 + side)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"},
                      timeout=60) as http:  # fmt: skip
        for i in range(1_000_000):
            if stop.is_set():
                return
            step = i % 6
            try:
                if i % 5 == 4 and i // 5 < len(pairs):
                    x, y = pairs[i // 5]
                    first, second = (x, y) if side == 0 else (y, x)
                    try:  # both of the user's threads send it at once
                        meet.wait(10)
                    except threading.BrokenBarrierError:
                        continue
                    r = http.post("/v1/review/resolve", json={"user_id": user, "memory_id": first,
                                  "other_id": second, "resolution": "keep"})  # fmt: skip
                    log.status("resolve", r, signalled.is_set())
                    continue
                if step < 3:
                    text = f"{mine} fact {side}-{i}: the parcel went to locker {i}"
                    r = http.post("/v1/memories", json={"user_id": user, "content": text})
                    log.status("remember", r, signalled.is_set())
                    if r.status_code == 201 and r.json().get("action") == "stored":
                        log.acknowledged[r.json()["memory_id"]] = text
                elif step == 3:
                    ask = {"user_id": user, "message": "which locker got the parcel?"}
                    r = http.post("/v1/context", json=ask)
                    log.status("context", r, signalled.is_set())
                    body = r.text
                    log.leaks += [f"context of {user}: {t}" for t in others if t in body]
                elif step == 4:
                    alive = [m for m in log.acknowledged if m not in log.forgotten]
                    if not alive:
                        continue
                    victim = rng.choice(alive)
                    r = http.delete(f"/v1/memories/{victim}", params={"user_id": user})
                    log.status("forget", r, signalled.is_set())
                    if r.status_code == 200:
                        log.forgotten.add(victim)
                else:
                    r = http.get("/v1/export", params={"user_id": user})
                    log.status("export", r, signalled.is_set())
                    if r.status_code == 200:
                        for line in r.text.splitlines():
                            record = json.loads(line)
                            if record.get("user_id") not in (None, user):
                                log.leaks.append(f"export of {user}: {record.get('user_id')}")
                            log.leaks += [f"export of {user}: {t}" for t in others if t in line]
            except httpx.HTTPError:
                log.unanswered += 1
                if signalled.is_set():
                    return
                time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve-mixed-") as tmp:
        d = Path(tmp)
        env = round_environment(d)
        db = d / "store.db"
        keys = [cli(env, "keys", "create", "--user", u).stdout.strip().splitlines()[-1]
                for u in USERS]  # fmt: skip
        engine = Engine(f"sqlite:///{db}", settings=Settings(embedder="hash", data_dir=d))
        pairs: list[list[tuple[str, str]]] = []
        for n, user in enumerate(USERS):  # each user's pairs, written before the server
            made = []
            for p in range(PAIRS):
                texts = [f"{token(n)} {side} pair {p}: desk {p} is by the {side} window"
                         for side in ("alpha", "beta")]  # fmt: skip
                x, y = (engine.remember(text, user).memory_id for text in texts)
                assert x is not None and y is not None
                made.append((x, y))
            pairs.append(made)
        engine.close()
        port = free_port()
        server = start(env, port, args.workers)
        stop, signalled = threading.Event(), threading.Event()
        logs = [[Log(), Log()] for _ in USERS]
        meets = [threading.Barrier(2) for _ in USERS]
        threads = [threading.Thread(target=client, args=(f"http://127.0.0.1:{port}", keys[n], n,
                   side, pairs[n], meets[n], stop, signalled, logs[n][side]))
                   for n in range(len(USERS)) for side in (0, 1)]  # fmt: skip
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        signalled.set()
        server.send_signal(signal.SIGTERM)
        try:
            code: int | str = server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "hung"
        stop.set()
        for meet in meets:
            meet.abort()
        for t in threads:
            t.join(60)
        con = sqlite3.connect(db)
        rows = {(u, i): sup for u, i, sup in con.execute(
            "SELECT user_id, id, superseded_by FROM memories")}  # fmt: skip
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        con.close()
    every = [log for pair in logs for log in pair]
    lost, resurrected = [], []
    for n, user in enumerate(USERS):
        for log in logs[n]:
            lost += [
                i for i in log.acknowledged if i not in log.forgotten and (user, i) not in rows
            ]
            resurrected += [i for i in log.forgotten if (user, i) in rows]
    empty_pairs = [(USERS[n], x, y) for n in range(len(USERS)) for x, y in pairs[n]
                   if not any((USERS[n], i) in rows and rows[(USERS[n], i)] is None
                              for i in (x, y))]  # fmt: skip
    statuses: dict[str, int] = {}
    for log in every:
        for k, v in log.statuses.items():
            statuses[k] = statuses.get(k, 0) + v
    server_errors = [e for log in every for e in log.server_errors]
    leaks = [e for log in every for e in log.leaks]
    graceful = code in (0, -signal.SIGTERM)
    summary = {
        "attack": "serve_mixed", "seconds": args.seconds, "workers": args.workers,
        "users": list(USERS), "statuses": dict(sorted(statuses.items())),
        "acknowledged": sum(len(log.acknowledged) for log in every),
        "forgotten": sum(len(log.forgotten) for log in every),
        "unanswered": sum(log.unanswered for log in every),
        "server_errors_before_the_signal": server_errors[:5], "leaks": leaks[:5],
        "lost": lost[:5], "forgotten_but_stored": resurrected[:5],
        "pairs_with_nothing_live": len(empty_pairs), "exit": code, "integrity": integrity,
        "ok": (not server_errors and not leaks and not lost and not resurrected
               and not empty_pairs and graceful and integrity == "ok"),
    }  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
