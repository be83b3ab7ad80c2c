"""Where an ingest turn's CPU goes, step by step: LoCoMo dev through ``ingest_conversation``
(one call per session, as ``bench/ingest_throughput.py --paths locomo`` feeds it) on a fresh
SQLite store, with the thread CPU of each step taken around it (issue 18, session 16).

    python bench/ingest_stages.py --out bench/results/ingest-stages.json
    python bench/ingest_stages.py --tree /tmp/base --repeat 2 --out …   # side by side

``--tree`` measures another checkout the same way (its ``src`` and its ``bench`` modules,
this script's wrapping) in fresh processes alternating with this one, ``--repeat`` rounds,
and reports each step's median on both sides; a step an older checkout does not have is
left out of its side.

Each step is wrapped where the engine calls it (``time.thread_time`` before and after, on
whichever thread runs it: the model's runs on the embedder's workers, the embedding on the
planner's side thread, planning and writing on the calling thread), so the sum over a step's
calls is its CPU whatever the machine's load does to the wall clock. A step's figure includes
the steps it calls on its own thread (dedup inside planning; a one-text call's model run
inside the embedding call); ``rest`` is the process's CPU outside every step, each step's own
time counted once (thread hand-offs, the compression check, WAL checkpoints, validation).
The model's share is the number issue 18's target depends on: what is not the model bounds
what any cut outside it can give.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The checkout whose bench modules (``locomo``, ``baselines``, ``ingest_throughput``) a run
#: uses: this one, or ``--tree``'s in the child process that measures it.
BENCH = Path(os.environ.get("ENGRAIN_STAGES_BENCH", ROOT / "bench"))
sys.path.insert(0, str(BENCH))

#: (owner's import path, attribute, label): the steps timed.
STEPS = (
    ("engrain.embed.minilm:MiniLMEmbedder", "_run", "model runs (workers)"),
    ("engrain.embed.minilm", "_encode_batch", "tokenizing"),
    ("engrain.embed.cache:CachedEmbedder", "embed", "embedding call (side thread)"),
    ("engrain.ingest.plan", "chunk_turns", "chunking"),
    ("engrain.ingest.plan:imp", "salience", "salience"),
    ("engrain.ingest.plan", "bigram_bits", "bigram bits"),
    ("engrain.ingest.plan:Planner", "conversation", "planning (under the lock)"),
    ("engrain.ingest.plan:Planner", "find_existing", "- dedup"),
    ("engrain.ingest.plan:Planner", "_centroid", "- centroid"),
    ("engrain.engine:Engine", "_write", "write"),
)


def owner(spec: str) -> Any:
    """The module or class ``spec`` names (``module`` or ``module:attribute``)."""
    import importlib

    module, _, attribute = spec.partition(":")
    found: Any = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


class Steps:
    """Each step's thread CPU, inclusive (``cpu``) and without the steps nested in it on the
    same thread (``own``), its wall time, inclusive (``wall``: a step's wall above its CPU
    is waiting, e.g. a durable commit's wait for the disk), and its calls. Threads update
    the dicts under the GIL; a lost update between two threads' ``+=`` would need a switch
    inside one, which CPython makes rare, not impossible, and a bench tolerates it."""

    def __init__(
        self,
        clock: Callable[[], float] = time.thread_time,
        wall_clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.cpu: dict[str, float] = defaultdict(float)
        self.own: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.local = threading.local()

    def clear(self) -> None:
        for table in (self.cpu, self.own, self.wall, self.calls):
            table.clear()

    def timed(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        """``function`` with its thread CPU added to ``label``'s figures on every call."""

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer = getattr(self.local, "nested", 0.0)
            self.local.nested = 0.0
            began, began_wall = self.clock(), self.wall_clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent = self.clock() - began
                self.wall[label] += self.wall_clock() - began_wall
                self.cpu[label] += spent
                self.own[label] += spent - self.local.nested
                self.calls[label] += 1
                self.local.nested = outer + spent

        return wrapper


def measure(data: Path) -> dict[str, Any]:
    """One timed ingest of LoCoMo dev; the process's CPU and each step's."""
    import baselines as bl
    import ingest_throughput as it
    import locomo

    from engrain import Engine, Settings

    steps = Steps()
    timed = []
    for spec, name, label in STEPS:
        try:
            target = owner(spec)
            function = getattr(target, name)
        except (ImportError, AttributeError):  # an older checkout without this step
            continue
        setattr(target, name, steps.timed(function, label))
        timed.append(label)
    conversations = bl.load_locomo(data)
    embedder = it.make_embedder()
    embedder.embed(["a first text to load the model", "and a second"])  # load, start workers
    with tempfile.TemporaryDirectory(prefix="engrain-stages-") as tmp, \
            locomo.backend_stores("sqlite", Path(tmp)) as new_store:  # fmt: skip
        engine = Engine(settings=Settings(data_dir=Path(tmp)), store=new_store("ingest"),
                        embedder=embedder)  # fmt: skip
        with engine:
            steps.clear()
            process, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
            totals = it.feed_locomo(engine, conversations)
            process = time.process_time() - process
            thread, wall = time.thread_time() - thread, time.perf_counter() - wall
            engine.wait()
    table = {label: {"cpu_s": round(steps.cpu[label], 3), "wall_s": round(steps.wall[label], 3),
                     "calls": steps.calls[label], "share": round(steps.cpu[label] / process, 4)}
             for label in timed}  # fmt: skip
    return {
        "turns": totals["turns"],
        "process_cpu_s": round(process, 3),
        "calling_thread_cpu_s": round(thread, 3),
        "wall_s": round(wall, 3),
        "steps": table,
        "rest_cpu_s": round(process - sum(steps.own.values()), 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def side_by_side(data: Path, tree: Path, repeat: int) -> dict[str, Any]:
    """``repeat`` rounds of one :func:`measure` per side in a fresh process, ``tree``'s
    (before: its ``src`` and ``bench``) then this checkout's (after); every run and each
    figure's median per side."""
    sides = {"before": tree, "after": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for _ in range(repeat):
        for side, checkout in sides.items():
            env = {**os.environ, "PYTHONPATH": str(checkout / "src"),
                   "ENGRAIN_STAGES_BENCH": str(checkout / "bench")}  # fmt: skip
            command = [sys.executable, __file__, "--locomo", str(data), "--once"]
            done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print_run(f"{side} ({checkout})", runs[side][-1])
    middle = {side: medians(rows) for side, rows in runs.items()}
    return {"tree": str(tree), "repeat": repeat, "medians": middle, "runs": runs}


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure of ``rows`` (runs of one side), steps included."""
    figures = ("process_cpu_s", "calling_thread_cpu_s", "wall_s", "rest_cpu_s")
    out: dict[str, Any] = {k: round(statistics.median(r[k] for r in rows), 3) for k in figures}
    out["steps"] = {
        label: {k: round(statistics.median(r["steps"][label][k] for r in rows), 3)
                for k in ("cpu_s", "wall_s")}
        for label in rows[0]["steps"] if all(label in r["steps"] for r in rows)
    }  # fmt: skip
    return out


def print_run(title: str, report: dict[str, Any]) -> None:
    print(f"{title}: LoCoMo dev, {report['turns']} turns: process CPU "
          f"{report['process_cpu_s']} s, calling thread {report['calling_thread_cpu_s']} s, "
          f"wall {report['wall_s']} s, load {report['load_average_1m']}",
          file=sys.stderr)  # fmt: skip
    for label, step in report["steps"].items():
        print(f"  {label:32s} {step['cpu_s']:8.3f} s  {step['share']:6.1%}  wall "
              f"{step['wall_s']:8.3f} s  ({step['calls']} calls)", file=sys.stderr)  # fmt: skip
    print(f"  {'rest':32s} {report['rest_cpu_s']:8.3f} s", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, default=ROOT.parent / "shared" / "data" /
                        "locomo" / "locomo_dev.json")  # fmt: skip
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tree", type=Path, help="another checkout, measured side by side")
    parser.add_argument("--repeat", type=int, default=2, help="rounds with --tree")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    if args.once:
        print(json.dumps(measure(args.locomo)))
        return 0
    if args.tree is not None:
        report = side_by_side(args.locomo, args.tree.resolve(), args.repeat)
    else:
        report = measure(args.locomo)
        print_run("this checkout", report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
