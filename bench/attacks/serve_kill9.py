"""Attack: ``kill -9`` of ``engrain serve --workers 2`` while client processes write, as a
crash, the OOM killer or a container runtime would do it.

``engrain serve`` (SQLite, hash embedder, two worker processes, its own process group) takes
writes from ``--clients`` client *processes*, each over its own kept-alive connection, in
turn: ``POST /v1/memories`` (a new fact), ``POST /v1/ingest``, ``POST /v1/import`` of three
memory records with ids of the client's choosing (all or nothing), and the MCP ``remember``
tool at ``/mcp`` (JSON-RPC, stateless). Each round kills, after a random 1-3 s:

- ``worker``: one worker process (SIGKILL, as the OOM killer does); the server must take
  requests again (uvicorn starts a new worker) and the clients keep writing;
- ``group``: the whole process group (SIGKILL to the supervisor and its workers, as a
  crash does); then a new ``engrain serve`` on the same port.

After each round: every write answered 2xx is in the store (its id present, its content
whole; an ingest's stored and merged ids present); an import is there whole or not at
all; a write that got no answer is whole or absent; ``PRAGMA integrity_check`` is ok; the
restarted server answers a write and a read.

Prints a JSON summary; exits 0 only when every round kept the rules.

    PYTHONPATH=src .venv/bin/python bench/attacks/serve_kill9.py [--rounds 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, round_environment
from served import free_port

USER = "alice"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def start(env: dict[str, str], port: int, workers: int, log: Path) -> subprocess.Popen[bytes]:
    """``engrain serve`` in a new session (its own process group), once it answers."""
    with log.open("ab") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "engrain.cli", "serve", "--port", str(port),
             "--workers", str(workers), "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
    if not answers(port, 300):
        os.killpg(server.pid, signal.SIGKILL)
        raise RuntimeError(f"engrain serve did not start: {log.read_text()[-600:]}")
    return server


def answers(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def words() -> str:
    """A sentence no other write resembles (the dedup merges look-alikes)."""
    w = [uuid.uuid4().hex[:6] for _ in range(5)]
    return f"Parcel {w[0]} left depot {w[1]} for {w[2]} with courier {w[3]} on route {w[4]}."


def write(http: httpx.Client, number: int, client: int, i: int) -> dict[str, Any]:
    """One write; what it sent and what the server said (``None``: no answer)."""
    kind = ("memory", "ingest", "import", "mcp")[i % 4]
    text = words()
    entry: dict[str, Any] = {"kind": kind, "text": text, "status": None, "ids": []}
    try:
        if kind == "memory":
            r = http.post("/v1/memories", json={"user_id": USER, "content": text})
        elif kind == "ingest":
            r = http.post("/v1/ingest", json={"user_id": USER, "text": text})
        elif kind == "import":
            entry["ids"] = [f"c{client}-{i}-{k}" for k in range(3)]
            entry["texts"] = [f"{text} Part {k}." for k in range(3)]
            lines = [json.dumps({"type": "memory", "id": mid, "user_id": USER, "content": t,
                                 "memory_type": "semantic", "kind": "fact",
                                 "created_at": "2026-01-02T03:04:05+00:00"})
                     for mid, t in zip(entry["ids"], entry["texts"], strict=True)]  # fmt: skip
            r = http.post("/v1/import", content="\n".join(lines).encode(),
                          headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
        else:
            call = {"jsonrpc": "2.0", "id": number, "method": "tools/call",
                    "params": {"name": "remember", "arguments": {"content": text}}}  # fmt: skip
            r = http.post("/mcp", json=call, headers=MCP_HEADERS)
    except httpx.HTTPError:
        return entry
    entry["status"] = r.status_code
    try:
        body = r.json()
    except ValueError:
        body = None
    if kind == "memory" and r.status_code == 201:
        entry["ids"] = [body["memory_id"]] if body.get("memory_id") else []
    if kind == "ingest" and r.status_code == 200:  # a chunk may be discarded: its ids only
        entry["ids"] = [*body.get("stored", []), *body.get("merged", [])]
    if kind == "mcp" and isinstance(body, dict):
        result = body.get("result") or {}
        entry["mcp_error"] = bool(result.get("isError")) or "error" in body
    return entry


def client(port: int, key: str, number: int, done: Any, stop: Any, out: str) -> None:
    """Writes until ``stop`` is set, counting answered writes in ``done``."""
    headers = {"Authorization": f"Bearer {key}"}
    log = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
        i = 0
        while not stop.is_set():
            entry = write(http, i, number, i)
            log.append(entry)
            i += 1
            if entry["status"] is None:
                time.sleep(0.1)  # the server is away: try again shortly
            else:
                with done.get_lock():
                    done.value += 1
    Path(out).write_text(json.dumps(log))


def one_round(root: Path, n: int, mode: str, clients: int) -> dict[str, Any]:
    d = root / f"round{n}"
    d.mkdir()
    db = d / "store.db"
    env = round_environment(d)
    made = subprocess.run([sys.executable, "-m", "engrain.cli", "keys", "create", "--user",
                           USER], env=env, capture_output=True, text=True, timeout=300,
                          check=True)  # fmt: skip
    key = made.stdout.strip().splitlines()[-1]
    port = free_port()
    server = start(env, port, 2, d / "serve.log")
    kill_after = random.uniform(1.0, 3.0)
    ctx = mp.get_context("spawn")
    done, stop = ctx.Value("i", 0), ctx.Event()
    logs = [d / f"client{c}.json" for c in range(clients)]
    procs = [ctx.Process(target=client, args=(port, key, c, done, stop, str(logs[c])))
             for c in range(clients)]  # fmt: skip
    for p in procs:
        p.start()
    deadline = time.monotonic() + 300
    while done.value < 10 * clients and time.monotonic() < deadline:  # every client writing
        time.sleep(0.1)
    time.sleep(kill_after)
    if mode == "worker":
        workers = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True,
                                 text=True, check=False).stdout.split()  # fmt: skip
        victims = [int(w) for w in workers]
        if victims:
            os.kill(random.choice(victims), signal.SIGKILL)
        served_again = answers(port, 60)
        time.sleep(3)  # writes served by the new worker too
    else:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
        served_again = None
        time.sleep(1)  # writes refused while the server is away
    stop.set()
    for p in procs:
        p.join(120)
    if mode == "worker":
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
    entries = [e for path in logs for e in json.loads(path.read_text())]
    with sqlite3.connect(db) as check:
        rows = dict(check.execute("SELECT id, content FROM memories WHERE user_id = ?", (USER,)))
        integrity = check.execute("PRAGMA integrity_check").fetchone()[0]
    contents = set(rows.values())
    ok_status = [e for e in entries if e["status"] in (200, 201) and not e.get("mcp_error")]
    lost = [e["text"] for e in ok_status if any(i not in rows for i in e["ids"])
            or (e["kind"] in ("memory", "mcp") and e["text"] not in contents)]  # fmt: skip
    halves = [e["ids"] for e in entries if e["kind"] == "import"
              and 0 < sum(i in rows for i in e["ids"]) < 3]  # fmt: skip
    torn = [c for c in contents if c.startswith("Parcel ") and not c.rstrip().endswith(".")]
    statuses = sorted({str(e["status"]) for e in entries})
    failed_wrongly = [e for e in entries if e["status"] is not None
                      and ((e["status"] >= 500 and e["status"] != 503)
                           or e.get("mcp_error"))]  # fmt: skip
    again = start(
        env, port, 1, d / "serve.log"
    )  # the same port: nothing of the killed server holds it
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as http:  # fmt: skip
        wrote = http.post("/v1/memories", json={"user_id": USER, "content": words()})
        read = http.post("/v1/context", json={"user_id": USER, "message": "Which parcel left?"})
    os.killpg(again.pid, signal.SIGTERM)
    again.wait(60)
    reopened = wrote.status_code == 201 and read.status_code == 200
    ok = (not lost and not halves and not torn and integrity == "ok"
          and reopened and served_again is not False and not failed_wrongly)  # fmt: skip
    return {"mode": mode, "killed_after_s": round(kill_after, 2), "writes": len(entries),
            "acknowledged": len(ok_status), "unanswered": sum(e["status"] is None for e in entries),
            "statuses": statuses, "rows": len(rows), "lost": lost[:5],
            "imports_half": halves[:5], "torn": torn[:5],
            "failed_wrongly": failed_wrongly[:5], "integrity": integrity,
            "served_after_worker_kill": served_again, "restarted_same_port": reopened,
            "ok": ok}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory(prefix="h6-kill9-") as tmp:
        rounds = [one_round(Path(tmp), i, ("group", "worker")[i % 2], args.clients)
                  for i in range(args.rounds)]  # fmt: skip
    finish({"attack": "serve_kill9", "rounds": rounds, "ok": all(r["ok"] for r in rounds)},
           args.json)  # fmt: skip


if __name__ == "__main__":
    main()
