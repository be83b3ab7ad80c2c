"""Attack: SIGTERM (or SIGINT) to ``engrain serve`` while callers write.

``engrain serve`` (a child process, SQLite, hash embedder, ``--workers 1`` or more) takes
``POST /v1/memories`` (each a new fact) and ``POST /v1/ingest`` from several threads;
the signal comes after a random 0.5-2 s, the callers keep going until the server stops
answering. The rules: the server shuts down within 60 s, gracefully (exit 0, or killed
by the signal it got, which uvicorn raises again once it has shut down); every write
answered 201/200 is in the store afterwards with what its answer said; a write that got
no answer either
finished (its memory is there, whole) or wrote nothing; the store's ``integrity_check``
is ok and the next ``engrain serve`` opens it.

Prints a JSON summary; exits 0 only when every round kept the rules.

    PYTHONPATH=src .venv/bin/python bench/attacks/serve_sigterm.py [--rounds 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, round_environment
from served import free_port


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engrain.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip


def start(
    env: dict[str, str], port: int, workers: int, wait: float = 90
) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "engrain.cli", "serve", "--port", str(port),
         "--workers", str(workers), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("engrain serve did not start")


def writer(url: str, key: str, n: int, stop: threading.Event, log: list[dict[str, Any]]) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        for i in range(100_000):
            if stop.is_set():
                return
            text = f"writer {n} fact {i}: the {i}th parcel went to locker {n * 1000 + i}"
            entry: dict[str, Any] = {"text": text, "answered": None, "id": None}
            log.append(entry)
            try:
                if i % 5 == 4:
                    r = http.post("/v1/ingest", json={"user_id": "alice", "text": text})
                else:
                    r = http.post("/v1/memories", json={"user_id": "alice", "content": text,
                                                        "kind": "fact"})  # fmt: skip
            except httpx.HTTPError:
                entry["answered"] = "no answer"
                return  # the server is going away
            entry["answered"] = r.status_code
            if r.status_code in (200, 201) and "memory_id" in r.json():
                entry["id"] = r.json()["memory_id"]


def one_round(root: Path, n: int, workers: int, sig: int) -> dict[str, Any]:
    d = root / f"round{n}"
    d.mkdir()
    db = d / "store.db"
    env = round_environment(d)
    key = cli(env, "keys", "create", "--user", "alice").stdout.strip().splitlines()[-1]
    port = free_port()
    server = start(env, port, workers)
    stop, logs = threading.Event(), [[] for _ in range(4)]  # type: list[list[dict[str, Any]]]
    threads = [threading.Thread(target=writer, args=(f"http://127.0.0.1:{port}", key, i, stop,
                                                     logs[i])) for i in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    time.sleep(random.uniform(0.5, 2.0))
    server.send_signal(sig)
    try:
        code = server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "hung"
    stop.set()
    for t in threads:
        t.join(60)
    rows = {r[0]: r[1] for r in sqlite3.connect(db).execute(
        "SELECT id, content FROM memories WHERE user_id = 'alice'")}  # fmt: skip
    integrity = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
    entries = [e for log in logs for e in log]
    acknowledged = [e for e in entries if e["answered"] in (200, 201)]
    lost = [e["text"] for e in acknowledged if e["id"] is not None and e["id"] not in rows]
    unanswered = [e for e in entries if e["answered"] == "no answer"]
    stored_texts = "\n".join(rows.values())
    half = [e["text"] for e in unanswered if e["text"][:20] in stored_texts
            and e["text"] not in stored_texts]  # fmt: skip
    other = sorted({str(e["answered"]) for e in entries
                    if e["answered"] not in (200, 201, "no answer", None)})  # fmt: skip
    again = start(env, free_port(), 1)
    again.send_signal(signal.SIGTERM)
    reopened = again.wait(60) in (0, -signal.SIGTERM)
    graceful = code in (0, -sig)
    ok = graceful and not lost and not half and integrity == "ok" and reopened
    return {"workers": workers, "signal": signal.Signals(sig).name, "exit": code,
            "acknowledged": len(acknowledged), "unanswered": len(unanswered),
            "other_statuses": other, "rows": len(rows), "lost": lost[:5], "half_written": half,
            "integrity": integrity, "reopened": reopened, "ok": ok}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    random.seed(args.seed)
    plans = [(1 + (i % 2), signal.SIGTERM if i % 3 != 2 else signal.SIGINT)
             for i in range(args.rounds)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="h7-sigterm-") as tmp:
        rounds = [one_round(Path(tmp), i, w, s) for i, (w, s) in enumerate(plans)]
    summary = {"attack": "serve_sigterm", "rounds": rounds,
               "ok": all(r["ok"] for r in rounds)}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
