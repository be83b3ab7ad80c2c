"""A large user's saved BM25 copy loaded, trees side by side (issue 18; docs/scale.md
"Session 29: …"): the step of a cold start that turns the saved bytes into the index.

    python bench/bm25_parse.py --store STORE.db --tree base=/tmp/s29-base --tree new=. \\
        --rounds 5 --workdir /tmp/bm25-parse --out bench/results/bm25-parse.json

The store's saved copy (``derived_indexes``, kind ``bm25``, of ``--user``) is read once and
written again by each tree in its own format (a process of that tree parses the copy it
can read, or builds the index from the copy's arrays, and dumps it: the same postings), to a
file in ``--workdir``. Then, per round, one fresh process per tree (the order alternating)
reads its file and parses it (``lexical_file.parsed``), and reports the calling thread's
CPU and wall for the parse, ``VmHWM`` and ``VmRSS`` before and after (the bytes read are
held throughout, as an open holds them), and a digest of the index's top 50 documents and
scores for 20 queries (``bench/common.make_queries``): the trees' digests must be equal.
Medians per tree; under load the CPU columns are the ones to read.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

USER = "bench-user"
BENCH = Path(__file__).resolve().parent


def convert(store: Path, user: str, out: Path) -> dict[str, Any]:
    """Write the store's BM25 copy in this tree's format to ``out`` (a process of the tree)."""
    import numpy as np

    from engrain.store import derived_blobs, lexical_file
    from engrain.store.lexical import LexicalIndex

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        data = derived_blobs.read(db, user, "bm25")
    if data is None:
        raise SystemExit(f"{store}: no saved BM25 copy of {user!r}")
    saved = lexical_file.parsed(data)
    if saved is None:  # another version's layout: the same postings from its arrays
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            fingerprint = bytes(arrays["fingerprint"].tobytes())
            index = LexicalIndex.from_arrays(
                {n: arrays[n] for n in ("terms", "offsets", "docs", "tfs", "lengths")}
            )
    else:
        fingerprint, index = saved.fingerprint, saved.index
    out.write_bytes(lexical_file.dump(index, fingerprint))
    return {"bytes": out.stat().st_size}


def measure(copy: Path) -> dict[str, Any]:
    """Parse the copy at ``copy`` (a fresh process of the tree)."""
    from engrain.store import lexical_file

    data = copy.read_bytes()
    before_rss, before_hwm = common.status_mb("VmRSS"), common.status_mb("VmHWM")
    wall, cpu = time.perf_counter(), time.thread_time()
    saved = lexical_file.parsed(data)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    if saved is None:
        raise SystemExit(f"{copy}: not read")
    digest = hashlib.blake2b(digest_size=16)
    for query in common.make_queries(20, seed=8):
        rows, scores = saved.index.top(query, 50)
        digest.update(rows.astype("int64").tobytes() + scores.tobytes())
    return {
        "parse_cpu_s": round(cpu, 4),
        "parse_wall_s": round(wall, 4),
        "vmhwm_mb": common.status_mb("VmHWM"),
        "hwm_before_mb": before_hwm,
        "rss_before_mb": before_rss,
        "rss_mb": common.status_mb("VmRSS"),
        "load_1m": round(os.getloadavg()[0], 2),
        "answers": digest.hexdigest(),
    }


def _run(tree: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{BENCH}"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: the process failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path)
    parser.add_argument("--user", default=USER)
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeat)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engrain-bm25-parse"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--convert", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.convert:
        print(json.dumps(convert(Path(args.convert[0]), args.user, Path(args.convert[1]))))
        return
    if args.measure:
        print(json.dumps(measure(Path(args.measure))))
        return
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    args.workdir.mkdir(parents=True, exist_ok=True)
    copies = {name: args.workdir / f"bm25-{name}.npz" for name in trees}
    sizes = {name: _run(tree, "--user", args.user, "--convert", str(args.store), str(copies[name]))
             for name, tree in trees.items()}  # fmt: skip
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    names = list(trees)
    for number in range(args.rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        for name in order:
            row = _run(trees[name], "--measure", str(copies[name]))
            rounds[name].append(row)
            print(f"  {name} round {number + 1}: " + " ".join(
                f"{k} {v}" for k, v in row.items() if k != "answers"), file=sys.stderr)  # fmt: skip
    keys = [k for k in rounds[names[0]][0] if k != "answers"]
    result: dict[str, Any] = {
        name: {"bytes": sizes[name]["bytes"]}
        | {k: statistics.median(r[k] for r in rows) for k in keys}
        for name, rows in rounds.items()
    }
    answers = {row["answers"] for rows in rounds.values() for row in rows}
    result["same_answers"] = f"{len(answers) == 1} ({sum(map(len, rounds.values()))} processes)"
    print(json.dumps(result, indent=1))
    given = {k: v if isinstance(v, int | list) else str(v) for k, v in vars(args).items()}
    common.write_json(args.out, {"args": given, "summary": result, "rounds": rounds,
                                 "machine": common.machine_info()})  # fmt: skip


if __name__ == "__main__":
    main()
