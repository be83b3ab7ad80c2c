"""Attack: a really full disk under a SQLite store (root: a tmpfs of a few MB).

The store's directory is a tmpfs of ``--size-mb``; a filler file beside the store takes
the free space at chosen moments, so the WAL, the ``-shm``, the journal and the derived
indexes saved into the file (``ENGRAIN_ANN_MIN_VECTORS=0``: a small user has an
approximate index too) each meet ENOSPC at their own moment:

1. **during a big ingest**: remember / ingest / context in a loop while the filler leaves
   a few hundred KB, until 30 calls failed;
2. **before each call**: the disk filled to the last byte, then every kind of public call
   (remember, ingest, conversation, context, recall, list, export, import, compress,
   pin, update, forget);
3. **at close**: the engine closed with the disk full (derived indexes saved at close);
4. **the CLI**: ``engrain export`` to a file on the full disk, ``engrain import`` and
   ``engrain migrate --from`` into the full store, ``engrain serve`` answering writes
   (HTTP), each with the disk full, then again after space is freed.

After each phase the filler is removed and a new process opens the store. The rules: every
failure is an ``EngrainError`` subclass (HTTP 503 / CLI exit 3 for a store failure, as
documented), a failed call wrote nothing, no acknowledged memory is missing after
reopening, ``PRAGMA integrity_check`` is ok, no half-written export file is left where
the user asked for one, and the next process answers and writes.

Prints a JSON summary; exits 0 only when every rule held; exit 2 when it cannot mount.

    sudo PYTHONPATH=src .venv/bin/python bench/attacks/full_disk.py [--size-mb 8] [--json out.json]
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


class Disk:
    """A tmpfs at ``mount`` and a filler file that takes its free space on demand."""

    def __init__(self, mount: Path, size_mb: int) -> None:
        self.mount = mount
        self.filler = mount / "filler"
        mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount)],
                       check=True, capture_output=True)  # fmt: skip

    def fill(self, leave: int = 0) -> None:
        """Make the filler take all but ``leave`` bytes (about) of the free space."""
        self.free()
        with self.filler.open("ab") as out:
            while True:
                free = os.statvfs(self.mount).f_bavail * os.statvfs(self.mount).f_frsize
                if free <= leave:
                    return
                try:
                    out.write(b"\0" * min(65536, max(4096, free - leave)))
                    out.flush()
                except OSError:
                    return

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        self.free()
        subprocess.run(["umount", str(self.mount)], check=False)


class Calls:
    """Every call's outcome: ok, an engrain error (by code), or a contract breach."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.breaches: list[str] = []
        self.failures = 0

    def run(self, label: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from engrain.errors import EngrainError

        try:
            result = call(*args, **kwargs)
        except EngrainError as exc:
            self.failures += 1
            self.outcomes[f"{label}: {exc.code}"] += 1
            if exc.http_status < 500 and exc.code != "not_found":
                self.breaches.append(f"{label}: {exc.code} {exc.message[:120]}")
            return None
        except Exception as exc:  # the breach under test
            self.failures += 1
            self.breaches.append(f"{label}: {type(exc).__module__}.{type(exc).__name__}: {exc}")
            return None
        self.outcomes[f"{label}: ok"] += 1
        return result


def rows(db: Path) -> dict[str, str]:
    with closing(sqlite3.connect(db)) as c:
        return dict(c.execute("SELECT id, content FROM memories WHERE user_id = ?", (USER,)))


def reopen_checks(db: Path, acknowledged: set[str], env: dict[str, str]) -> dict[str, Any]:
    """A new process opens the store after space is freed: integrity, what it holds, a
    write and a context."""
    answered, error = next_process(db, USER, env)
    with closing(sqlite3.connect(db)) as c:
        integrity = c.execute("PRAGMA integrity_check").fetchone()[0]
    held = rows(db)
    lost = sorted(acknowledged - set(held))
    return {"integrity": integrity, "rows": len(held), "lost": lost[:5], "lost_count": len(lost),
            "next_process_writes_and_answers": answered,
            "next_process_error": "" if answered else error}  # fmt: skip


def ingest_until_full(disk: Disk, db: Path, env: dict[str, str]) -> dict[str, Any]:
    from engrain import Engine

    calls, acknowledged = Calls(), set()
    engine = Engine(f"sqlite:///{db}")
    disk.fill(leave=1_500_000)
    i = 0
    while calls.failures < 30 and i < 20_000:
        i += 1
        text = f"fact {i}: parcel {i * 7919} went to locker {i % 97} at dock {i % 13} " * 3
        if i % 5 == 0:
            turns = [{"speaker": "user", "text": f"turn {i}.{t}: {text}"} for t in range(4)]
            report = calls.run("ingest_conversation", engine.ingest_conversation, turns,
                               user_id=USER, session_id=f"s{i}")  # fmt: skip
            if report is not None:
                acknowledged.update(report.stored)
        elif i % 3 == 0:
            calls.run("context", engine.context, f"where did parcel {i} go?", USER)
        else:
            outcome = calls.run("remember", engine.remember, text, user_id=USER)
            if outcome is not None and outcome.memory_id:
                acknowledged.add(outcome.memory_id)
    calls.run("close", engine.close)
    disk.free()
    return {
        "calls": i,
        "acknowledged": len(acknowledged),
        "outcomes": dict(calls.outcomes),
        "breaches": calls.breaches,
        **reopen_checks(db, acknowledged, env),
    }


def each_call_on_a_full_disk(disk: Disk, db: Path, env: dict[str, str]) -> dict[str, Any]:
    from engrain import Engine

    calls = Calls()
    engine = Engine(f"sqlite:///{db}")
    held = engine.list(user_id=USER, limit=5)
    exported = list(engine.export_records(USER))[:3]
    imported = [{**r, "id": f"imported-{n}"} for n, r in enumerate(exported)]
    acknowledged = set(rows(db))
    disk.fill()
    before = rows(db)
    probes: list[tuple[str, Any]] = [
        ("remember", lambda: engine.remember("a new fact on a full disk", user_id=USER)),
        ("ingest", lambda: engine.ingest("I moved to Lisbon in May. " * 20, user_id=USER)),
        ("ingest_conversation", lambda: engine.ingest_conversation(
            [{"speaker": "user", "text": "my cat is called Miso"}], user_id=USER)),
        ("context", lambda: engine.context("where did parcel 12 go?", USER)),
        ("recall", lambda: engine.recall("parcel 12 locker", user_id=USER)),
        ("list", lambda: engine.list(user_id=USER)),
        ("export", lambda: list(engine.export_records(USER))),
        ("import", lambda: engine.import_records(imported)),
        ("compress", lambda: engine.compress(USER, force=True)),
        ("pin", lambda: engine.pin(held[0].id, USER)),
        ("update", lambda: engine.update(held[1].id, USER, content="changed on a full disk")),
        ("forget", lambda: engine.forget(held[2].id, USER)),
    ]  # fmt: skip
    half: list[str] = []
    for label, call in probes:
        ahead = rows(db)
        result = calls.run(label, call)
        now = rows(db)
        if result is None and now != ahead:
            half.append(f"{label} failed yet changed the rows")
        elif result is not None and label in ("remember",):
            acknowledged.add(result.memory_id)
    calls.run("close", engine.close)
    disk.free()
    checks = reopen_checks(db, acknowledged - {held[2].id}, env)
    return {
        "outcomes": dict(calls.outcomes),
        "breaches": calls.breaches + half,
        "rows_before": len(before),
        **checks,
    }


def the_cli_on_a_full_disk(disk: Disk, db: Path, env: dict[str, str],
                           outside: Path) -> dict[str, Any]:  # fmt: skip
    breaches: list[str] = []
    results: dict[str, Any] = {}
    url = f"sqlite:///{db}"
    source = outside / "source.db"
    from engrain import Engine

    seeding = Engine(f"sqlite:///{source}")
    for n in range(200):
        seeding.remember(f"source fact {n}: the ferry {n} leaves from pier {n % 9} " * 4, USER)
    seeding.close()
    dump = outside / "dump.jsonl"
    cli(env, "--url", f"sqlite:///{source}", "export", "--all-users", str(dump))
    acknowledged = set(rows(db))

    def step(label: str, *args: str, target: Path | None = None, at: str = url) -> None:
        done = cli(env, "--url", at, *args)
        entry = {"exit": done.returncode, "stderr": done.stderr.strip().splitlines()[-1:]}
        if "Traceback" in done.stderr:
            breaches.append(f"{label}: traceback")
        if done.returncode not in (0, 3) and not (label == "export" and done.returncode == 2):
            breaches.append(f"{label}: exit {done.returncode}")
        if target is not None and done.returncode and target.exists():
            entry["partial_file_left"] = target.stat().st_size
            breaches.append(f"{label}: a failed export left {target.name} "
                            f"({target.stat().st_size} bytes)")  # fmt: skip
        results[label] = entry

    before = rows(db)
    disk.fill()
    step("list", "list", "--user", USER)  # a first connection must make the -shm
    out = disk.mount / "export.jsonl"
    # the source store is on another disk: the export file alone meets the full one
    step("export", "export", "--all-users", str(out), target=out, at=f"sqlite:///{source}")
    out.unlink(missing_ok=True)
    disk.fill(leave=300_000)  # the store opens; its import or copy meets the full disk
    step("import", "import", str(dump))
    disk.free()
    if results["import"]["exit"] and rows(db) != before:
        breaches.append("import failed yet changed the rows")
    disk.fill(leave=300_000)
    step("migrate --from", "migrate", "--from", f"sqlite:///{source}")
    step("remember", "remember", "--user", USER, "a fact on a full disk")
    results["serve"] = serve_on_a_full_disk(disk, db, env, breaches, acknowledged)
    disk.free()
    again = cli(env, "--url", url, "migrate", "--from", f"sqlite:///{source}")
    copied = set(rows(source))
    missing = copied - set(rows(db))
    if again.returncode or missing:
        breaches.append(f"migrate after freeing: exit {again.returncode}, "
                        f"{len(missing)} memories not copied")  # fmt: skip
    exported = cli(env, "--url", url, "export", "--all-users", str(out))
    if exported.returncode:
        breaches.append(f"export after freeing: exit {exported.returncode}")
    checks = reopen_checks(db, acknowledged, env)
    return {"steps": results, "breaches": breaches, **checks}


def serve_on_a_full_disk(disk: Disk, db: Path, env: dict[str, str], breaches: list[str],
                         acknowledged: set[str]) -> dict[str, Any]:  # fmt: skip
    """``engrain serve`` on the store: writes over HTTP while the disk is full, then
    after space is freed (the same server)."""
    disk.free()
    key = cli(env, "--url", f"sqlite:///{db}", "keys", "create", "--user", USER)
    token = key.stdout.strip().splitlines()[-1]
    port = free_port()
    server = start({**env, "ENGRAIN_URL": f"sqlite:///{db}"}, port, 1)
    statuses: Counter[str] = Counter()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as http:  # fmt: skip
            disk.fill()
            for n in range(20):
                body = {"user_id": USER, "content": f"served fact {n} on a full disk " * 8}
                r = http.post("/v1/memories", json=body)
                statuses[f"full: {r.status_code}"] += 1
                if r.status_code in (200, 201):
                    acknowledged.add(r.json()["memory_id"])
                elif r.status_code != 503 or r.json().get("error") != "store_error":
                    breaches.append(f"serve on a full disk: {r.status_code} {r.text[:120]}")
                r = http.post("/v1/context", json={"user_id": USER, "message": f"fact {n}?"})
                statuses[f"full context: {r.status_code}"] += 1
                if r.status_code not in (200, 503):
                    breaches.append(f"serve context on a full disk: {r.status_code}")
            disk.free()
            r = http.post("/v1/memories", json={"user_id": USER, "content": "served once freed"})
            statuses[f"freed: {r.status_code}"] += 1
            if r.status_code not in (200, 201):
                breaches.append(f"serve after freeing: {r.status_code} {r.text[:120]}")
            else:
                acknowledged.add(r.json()["memory_id"])
    finally:
        server.terminate()
        server.wait(60)
    return dict(statuses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=8, help="the tmpfs's size")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    root, env = private_environment("engrain-full-disk-")
    try:
        disk = Disk(root / "mnt", args.size_mb)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"cannot mount a tmpfs (root needed): {exc}", file=sys.stderr)
        sys.exit(2)
    phases: dict[str, Any] = {}
    started = time.process_time()
    try:
        db = disk.mount / "store.db"
        phases["during_ingest"] = ingest_until_full(disk, db, env)
        phases["before_each_call"] = each_call_on_a_full_disk(disk, db, env)
        phases["cli_and_serve"] = the_cli_on_a_full_disk(disk, db, env, root)
    finally:
        disk.close()
        shutil.rmtree(root, ignore_errors=True)
    ok = all(
        not p["breaches"] and p["integrity"] == "ok" and not p["lost_count"]
        and p["next_process_writes_and_answers"]
        for p in phases.values()
    )  # fmt: skip
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    finish({"attack": "full_disk", "size_mb": args.size_mb, "phases": phases,
            "cpu_seconds": round(time.process_time() - started, 1),
            "threads_left": threads, "ok": ok}, args.json)  # fmt: skip


if __name__ == "__main__":
    main()
