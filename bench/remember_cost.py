"""``remember`` per call, with and without a procedural key, of several source trees side
by side: what the key claims (checked inside the write transaction) cost, and that a call
without a key pays nothing for them.

    python bench/remember_cost.py --tree base=/tmp/s22-base --tree new=. \
        [--calls 300] [--rounds 4] [--prior 2000] [--out bench/results/remember_cost.json]

Each measurement is a fresh subprocess with its tree's ``src`` on ``PYTHONPATH``: a new
SQLite store in a temporary directory, the hash embedder (the model's cost is the same in
every tree and would only add noise), ``--prior`` memories of the user imported first,
then ``--calls`` remembers of facts without a key (new texts: each stores a memory) and
``--calls`` of golden paths under 20 keys (each after the first twenty updates its key's
memory). Per call: the calling thread's CPU time (``time.thread_time``; steady on a busy
machine) and the wall time. Rounds alternate the trees (the order rotates); the report
gives each tree's medians over rounds of the per-round medians and p95s, and the ratio to
the first tree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KEYS = 20


def _words(rng: random.Random, n: int) -> str:
    letters = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    return " ".join("".join(rng.choice(letters) + rng.choice(vowels) for _ in range(3))
                    for _ in range(n))  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(calls: int, prior: int, seed: int) -> dict[str, Any]:
    """One run in this process (the tree on ``PYTHONPATH``): per-call times by kind."""
    import warnings

    from engrain import Engine
    from engrain.config import Settings

    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="h8-remember-") as tmp:
        settings = Settings(embedder="hash", data_dir=Path(tmp), auto_compress=False)
        engine = Engine(f"sqlite:///{tmp}/s.db", settings=settings)
        engine.import_records([{"type": "remember", "user_id": "u", "content": _words(rng, 12)}
                               for _ in range(prior)])  # fmt: skip
        out: dict[str, Any] = {}
        for name in ("no_key", "key"):
            cpu, wall = [], []
            for i in range(calls):
                text = _words(rng, 12)
                c0, w0 = time.thread_time(), time.perf_counter()
                if name == "key":
                    engine.remember(text, "u", kind="golden_path", key=f"k{i % KEYS}")
                else:
                    engine.remember(text, "u")
                cpu.append(time.thread_time() - c0)
                wall.append(time.perf_counter() - w0)
            out[name] = {"cpu_p50_ms": statistics.median(cpu) * 1e3,
                         "cpu_p95_ms": _percentile(cpu, 0.95) * 1e3,
                         "wall_p50_ms": statistics.median(wall) * 1e3}  # fmt: skip
        engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="name=path, repeated")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--prior", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        print(json.dumps(measure(args.calls, args.prior, args.seed)))
        return
    trees = [t.split("=", 1) for t in args.tree]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    for r in range(args.rounds):
        for name, path in trees[r % len(trees) :] + trees[: r % len(trees)]:
            env = {**os.environ, "PYTHONPATH": str(Path(path) / "src"), "PYTHONHASHSEED": "0"}
            done = subprocess.run(
                [sys.executable, __file__, "--once", "--calls", str(args.calls),
                 "--prior", str(args.prior), "--seed", str(args.seed)],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r} {name}: {runs[name][-1]}", file=sys.stderr)
    first = trees[0][0]
    report: dict[str, Any] = {"calls": args.calls, "prior": args.prior, "rounds": args.rounds,
                              "load": os.getloadavg()[0], "trees": {}}  # fmt: skip
    for name, _ in trees:
        report["trees"][name] = {
            kind: {
                metric: statistics.median(run[kind][metric] for run in runs[name])
                for metric in runs[name][0][kind]
            }
            for kind in ("no_key", "key")
        }
    for name, _ in trees:
        for kind, metrics in report["trees"][name].items():
            base = report["trees"][first][kind]
            metrics["cpu_p50_ratio"] = metrics["cpu_p50_ms"] / base["cpu_p50_ms"]
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
