"""Attack: a SQLite store whose filesystem is read-only (root: loop and tmpfs mounts).

1. **turned read-only under a running engine**: the store on an ext4 image mounted with
   ``errors=remount-ro``; while four threads call (remember, context, recall, list) the
   kernel is told the filesystem failed (``/sys/fs/ext4/<dev>/trigger_fs_error``) and
   remounts it read-only with the files open (``mount -o remount,ro`` refuses while a file
   is open for writing). Then export, close; the image is checked (``e2fsck``), mounted
   again read-write, and a new process opens the store.
2. **opened on a read-only mount** (a container's ``ro`` volume, a replica's copy): a
   tmpfs holding a cleanly closed store, remounted read-only; the API (list, export,
   recall, context, remember, forget), the CLI (``list``, ``export``, ``remember``) and
   ``engrain serve`` (a key made before) on it.
3. **a read-only copy with a write-ahead log**: the files copied while a writer had rows in
   its ``-wal`` alone, onto a tmpfs remounted read-only: what is read must hold those rows.

The rules: every call returns or raises an ``EngrainError`` (a write: ``StoreError``
naming the read-only filesystem; HTTP 503; CLI exit 3, never a traceback), none takes more
than ``--hang`` seconds, reads that can be answered are answered, nothing acknowledged is
lost and ``PRAGMA integrity_check`` is ok once writable again, and the next process
answers and writes.

Prints a JSON summary; exits 0 only when every rule held; exit 2 when it cannot mount.

    sudo PYTHONPATH=src .venv/bin/python bench/attacks/read_only_store.py [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import cli, finish, next_process, private_environment
from serve_sigterm import free_port, start

USER = "ada"


def sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True)


class Calls:
    """Each call's outcome by label; a breach for anything outside the contract."""

    def __init__(self, hang: float) -> None:
        self.hang = hang
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.breaches: list[str] = []
        self.messages: set[str] = set()

    def run(self, label: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from engrain.errors import EngrainError

        started = time.monotonic()
        result, outcome = None, "ok"
        try:
            result = call(*args, **kwargs)
        except EngrainError as exc:
            outcome = exc.code
            with self.lock:
                self.messages.add(f"{label}: {exc.message[-90:]}")
        except Exception as exc:  # the breach under test
            outcome = type(exc).__name__
            with self.lock:
                self.breaches.append(f"{label}: {type(exc).__module__}.{outcome}: {exc}")
        took = time.monotonic() - started
        with self.lock:
            self.outcomes[f"{label}: {outcome}"] += 1
            if took > self.hang:
                self.breaches.append(f"{label} took {took:.1f} s")
        return result


def integrity(db: Path) -> str:
    with closing(sqlite3.connect(db)) as c:
        return str(c.execute("PRAGMA integrity_check").fetchone()[0])


def ids(db: Path, read_only: bool = False) -> set[str]:
    uri = f"file:{db}?immutable=1" if read_only else f"file:{db}"
    with closing(sqlite3.connect(uri, uri=True)) as c:
        return {r[0] for r in c.execute("SELECT id FROM memories WHERE user_id = ?", (USER,))}


def turned_read_only(root: Path, env: dict[str, str], hang: float) -> dict[str, Any]:
    from engrain import Engine

    image, mount = root / "ext4.img", root / "ext4"
    mount.mkdir()
    sh("truncate", "-s", "64M", str(image))
    sh("mkfs.ext4", "-q", "-F", str(image))
    sh("mount", "-o", "loop,errors=remount-ro", str(image), str(mount))
    db = mount / "store.db"
    calls, acknowledged = Calls(hang), set()
    try:
        engine = Engine(f"sqlite:///{db}")
        for n in range(60):
            acknowledged.add(engine.remember(f"seed {n}: the kayak {n} is in shed {n % 5}",
                                             user_id=USER).memory_id)  # fmt: skip
        stop = threading.Event()

        def caller(n: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                text = f"caller {n} fact {i}: parcel {i} in locker {n}"
                outcome = calls.run("remember", engine.remember, text, USER)
                if outcome is not None:
                    with calls.lock:
                        acknowledged.add(outcome.memory_id)
                calls.run("context", engine.context, f"where is parcel {i}?", USER)
                calls.run("recall", engine.recall, f"kayak {i % 60}", user_id=USER)
                calls.run("list", engine.list, user_id=USER, limit=5)

        threads = [threading.Thread(target=caller, args=(n,), daemon=True) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        device = Path(sh("findmnt", "-n", "-o", "SOURCE", str(mount)).stdout.strip()).name
        Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("1")
        options = sh("findmnt", "-n", "-o", "OPTIONS", str(mount)).stdout.strip()
        before = Counter(calls.outcomes)
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(hang)
            if t.is_alive():
                calls.breaches.append("a caller never returned")
        after = {k: v - before.get(k, 0) for k, v in calls.outcomes.items()
                 if v - before.get(k, 0)}  # fmt: skip
        calls.run("export", lambda: len(list(engine.export_records(USER))))
        calls.run("close", engine.close)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    fsck = subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True, check=False)
    sh("mount", "-o", "loop", str(image), str(mount))
    try:
        lost = sorted(acknowledged - ids(db))
        result = {"mount_options_after": options, "outcomes_after_read_only": after,
                  "outcomes": dict(calls.outcomes), "messages": sorted(calls.messages)[:8],
                  "breaches": calls.breaches[:10], "acknowledged": len(acknowledged),
                  "lost": lost[:5], "lost_count": len(lost), "e2fsck_exit": fsck.returncode,
                  "integrity": integrity(db),
                  "next_process_writes_and_answers": next_process(db, USER, env)[0]}  # fmt: skip
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    return result


def opened_read_only(root: Path, env: dict[str, str], hang: float) -> dict[str, Any]:
    from engrain import Engine

    mount = root / "ro"
    mount.mkdir()
    sh("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount))
    db = mount / "store.db"
    url = f"sqlite:///{db}"
    calls = Calls(hang)
    breaches: list[str] = []
    try:
        engine = Engine(url)
        for n in range(60):
            engine.remember(f"seed {n}: the kayak {n} is in shed {n % 5}", user_id=USER)
        engine.close()
        key = cli(env, "--url", url, "keys", "create", "--user", USER).stdout.split()[-1]
        held = ids(db)
        sh("mount", "-o", "remount,ro", str(mount))
        engine = calls.run("open", Engine, url)
        answers: dict[str, Any] = {}
        if engine is not None:
            answers["list"] = len(calls.run("list", engine.list, user_id=USER, limit=None) or [])
            answers["export"] = len(calls.run("export", lambda: list(engine.export_records(USER)))
                                    or [])  # fmt: skip
            found = calls.run("recall", engine.recall, "kayak 7 shed", user_id=USER)
            answers["recall"] = 0 if found is None else len(found.memories)
            ctx = calls.run("context", engine.context, "where is the kayak 7?", USER)
            answers["context_answered"] = ctx is not None and "kayak" in ctx.text
            calls.run("remember", engine.remember, "a new fact", user_id=USER)
            calls.run("forget", engine.forget, sorted(held)[0], USER)
            calls.run("close", engine.close)
        steps = [("cli list", ("list", "--user", USER), 0),
                 ("cli export", ("export", "--all-users"), 0),
                 ("cli remember", ("remember", "--user", USER, "x y"), 3)]  # fmt: skip
        for label, args, want in steps:
            done = cli(env, "--url", url, *args)
            answers[label] = done.returncode
            if done.returncode != want or "Traceback" in done.stderr:
                breaches.append(f"{label}: exit {done.returncode} {done.stderr[-160:]}")
        answers["serve"] = serve_read_only(env, url, key, breaches)
        if answers.get("list") != len(held) or answers.get("export") != len(held):
            breaches.append("a read on the read-only store did not see every memory")
        if not answers.get("context_answered"):
            breaches.append("context() on the read-only store did not answer")
        if ids(db, read_only=True) != held:
            breaches.append("the read-only store's rows changed")
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    return {"answers": answers, "outcomes": dict(calls.outcomes),
            "messages": sorted(calls.messages)[:8], "breaches": calls.breaches + breaches,
            "lost_count": 0, "integrity": "ok",
            "next_process_writes_and_answers": True}  # fmt: skip


def serve_read_only(env: dict[str, str], url: str, key: str, breaches: list[str]) -> Any:
    port = free_port()
    try:
        server = start({**env, "ENGRAIN_URL": url}, port, 1)
    except RuntimeError:
        breaches.append("engrain serve did not start on the read-only store")
        return None
    statuses: dict[str, int] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                          headers={"Authorization": f"Bearer {key}"}) as http:  # fmt: skip
            statuses["list"] = http.get("/v1/memories", params={"user_id": USER}).status_code
            statuses["context"] = http.post("/v1/context", json={
                "user_id": USER, "message": "where is the kayak 7?"}).status_code  # fmt: skip
            r = http.post("/v1/memories", json={"user_id": USER, "content": "a new fact"})
            statuses["remember"] = r.status_code
            if r.status_code != 503 or r.json().get("error") != "store_error":
                breaches.append(f"serve remember on a read-only store: {r.status_code}")
            if statuses["list"] != 200 or statuses["context"] != 200:
                breaches.append(f"serve reads on a read-only store: {statuses}")
    finally:
        server.terminate()
        server.wait(60)
    return statuses


def copied_with_a_log(root: Path, env: dict[str, str], hang: float) -> dict[str, Any]:
    from engrain import Engine

    source, mount = root / "source", root / "logged"
    source.mkdir()
    mount.mkdir()
    engine = Engine(f"sqlite:///{source / 'store.db'}")
    for n in range(20):
        engine.remember(f"seed {n}: the kayak {n} is in shed {n % 5}", user_id=USER)
    engine.close()
    writer = sqlite3.connect(source / "store.db", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE memories SET content = 'rewritten in the log: the kayak' "
                   "WHERE user_id = ?", (USER,))  # fmt: skip
    sh("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount))
    calls = Calls(hang)
    try:
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(f"{source / 'store.db'}{suffix}", f"{mount / 'store.db'}{suffix}")
        writer.close()
        sh("mount", "-o", "remount,ro", str(mount))
        engine = calls.run("open", Engine, f"sqlite:///{mount / 'store.db'}")
        contents = set()
        if engine is not None:
            contents = {m.content for m in calls.run("list", engine.list, user_id=USER) or []}
            calls.run("close", engine.close)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    breaches = list(calls.breaches)
    if engine is not None and contents != {"rewritten in the log: the kayak"}:
        breaches.append(f"the log's rows were not read: {sorted(contents)[:2]}")
    return {"outcomes": dict(calls.outcomes), "messages": sorted(calls.messages)[:4],
            "read_the_log": contents == {"rewritten in the log: the kayak"},
            "breaches": breaches, "lost_count": 0, "integrity": "ok",
            "next_process_writes_and_answers": True}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hang", type=float, default=60.0, help="a call this long hung")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    root, env = private_environment("engrain-read-only-")
    if os.geteuid() != 0:
        print("mounting needs root", file=sys.stderr)
        sys.exit(2)
    started = time.process_time()
    phases = {
        "turned_read_only_under_a_running_engine": turned_read_only(root, env, args.hang),
        "opened_on_a_read_only_mount": opened_read_only(root, env, args.hang),
        "read_only_copy_with_a_write_ahead_log": copied_with_a_log(root, env, args.hang),
    }
    shutil.rmtree(root, ignore_errors=True)
    ok = all(
        not p["breaches"] and p["integrity"] == "ok" and not p["lost_count"]
        and p["next_process_writes_and_answers"]
        for p in phases.values()
    )  # fmt: skip
    cpu = round(time.process_time() - started, 1)
    finish({"attack": "read_only_store", "phases": phases, "cpu_seconds": cpu, "ok": ok}, args.json)


if __name__ == "__main__":
    main()
