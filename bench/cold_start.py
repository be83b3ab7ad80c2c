"""Cold start of a large user's SQLite store, trees side by side (issue 18).

    python bench/cold_start.py --store /tmp/engrain-bench/stores/latency-100000-….db \
        --tree base=/tmp/s21-base --tree new=. --rounds 7 --workdir /tmp/cold \
        --out bench/results/cold-start-100k.json

Each tree gets its own copy of ``--store`` in ``--workdir``, prepared by one process of
that tree (open, a few calls, the index waited for, close: its saved indexes are stamped,
as a store closed after serving is). Then, per round, one fresh process per tree (the
order alternating) loads the model and runs it once, opens an ``Engine`` on its copy and
runs the first ``context()`` (``bench/latency.py``'s first warm-up query), and reports:

- ``cold_ms``: the open plus that call, wall (``bench/latency.py``'s ``cold_start_ms``);
- ``caller_cpu_s``: the calling thread's CPU; ``longest_thread_cpu_s``: the CPU of the
  thread that spent most (the serial part of the load: with the reads overlapped, the
  working set is loaded on a read thread while the caller waits), ``second_thread_cpu_s``
  the next one; ``process_cpu_s``: every thread's;
- ``rss_mb``: ``VmRSS`` after the call; ``vmhwm_mb``: the peak (the model's included);
- ``block``: the call's block (compared across trees round by round);
- with ``--calls N``: N more calls after it (``bench/latency.py``'s next warm-up and timed
  queries, the same in every process), their wall and calling-thread CPU (medians), and
  each one's block compared with the other tree's and with the steady state's (the first
  call's question asked again last: a first call served before a load ended must answer
  as the steady state does); ``settled_s``: when the user's index was ready
  (``wait_for_index``) after the first call;
- ``--keep``: the prepared copies are left in ``--workdir`` (to run other probes on them).

Medians per tree. Under load, wall times are the machine's; the CPU columns are not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

USER = "bench-user"
BENCH = Path(__file__).resolve().parent
_KEYS = ("cold_ms", "open_ms", "first_ms", "caller_cpu_s", "longest_thread_cpu_s",
         "second_thread_cpu_s", "process_cpu_s", "rss_mb", "vmhwm_mb", "load_1m")  # fmt: skip
_CALL_KEYS = ("calls_wall_ms", "calls_thread_cpu_ms", "rss_after_calls_mb", "settled_s")


def _thread_cpu() -> dict[str, float]:
    """Each thread's CPU so far (``/proc/self/task/*/stat``: user + system), seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        out[task] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def _query() -> str:
    return common.make_queries(1, seed=8)[0]  # bench/latency.py's first warm-up query


def _later_queries(calls: int) -> list[str]:
    """The ``calls`` questions after the first: bench/latency.py's pool past it."""
    return common.make_queries(1 + calls, seed=8)[1:]


def serve(db: str, prepare: bool, calls: int = 0) -> dict[str, Any]:
    """One measuring (or preparing) process."""
    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    settings = Settings(url=f"sqlite:///{db}", data_dir=Path(db).parent / "data")
    if prepare:
        with Engine(settings=settings, embedder=embedder) as engine:
            for query in common.make_queries(5, seed=8):
                engine.context(query, USER, now=common.NOW)
            engine.store.wait_for_index(USER)  # type: ignore[attr-defined]
            time.sleep(2.0)  # the learnings' index job publishes after the first's
        return {}
    before = _thread_cpu()
    load = os.getloadavg()[0]
    wall, process, caller = time.perf_counter(), time.process_time(), time.thread_time()
    engine = Engine(settings=settings, embedder=embedder)
    opened = time.perf_counter()
    with engine:
        block = engine.context(_query(), USER, now=common.NOW).text
        done = time.perf_counter()
        caller_cpu, process_cpu = time.thread_time() - caller, time.process_time() - process
        after = _thread_cpu()
        rss, hwm = common.status_mb("VmRSS"), common.status_mb("VmHWM")
        later: dict[str, Any] = {}
        if calls:
            later = _calls(engine, calls)
    spent = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    return later | {
        "cold_ms": round((done - wall) * 1000.0, 1),
        "open_ms": round((opened - wall) * 1000.0, 1),
        "first_ms": round((done - opened) * 1000.0, 1),
        "caller_cpu_s": round(caller_cpu, 3),
        "longest_thread_cpu_s": round(spent[0], 3),
        "second_thread_cpu_s": round(spent[1] if len(spent) > 1 else 0.0, 3),
        "process_cpu_s": round(process_cpu, 3),
        "rss_mb": rss,
        "vmhwm_mb": hwm,
        "load_1m": round(load, 2),
        "block": block,
    }


def _calls(engine: Any, calls: int) -> dict[str, Any]:
    """``calls`` more calls after the first, then the first call's question again (the
    steady state's answer to it): medians of wall and calling-thread CPU, the blocks."""
    started = time.perf_counter()
    ready = engine.store.wait_for_index(USER)
    settled = time.perf_counter() - started
    walls: list[float] = []
    cpus: list[float] = []
    blocks: list[str] = []
    for query in _later_queries(calls):
        wall, cpu = time.perf_counter(), time.thread_time()
        blocks.append(engine.context(query, USER, now=common.NOW).text)
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {
        "calls_wall_ms": round(statistics.median(walls) * 1000.0, 2),
        "calls_thread_cpu_ms": round(statistics.median(cpus) * 1000.0, 2),
        "rss_after_calls_mb": common.status_mb("VmRSS"),
        "settled_s": round(settled, 3) if ready else None,
        "blocks": blocks,
        "steady_block": engine.context(_query(), USER, now=common.NOW).text,
    }


def _run(tree: Path, db: Path, prepare: bool = False, calls: int = 0) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{BENCH}"}
    args = [sys.executable, str(Path(__file__).resolve()), "--serve", str(db)]
    args += ["--calls", str(calls)] if calls else []
    done = subprocess.run(args + (["--prepare"] if prepare else []), env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: the measuring process failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", type=Path, help="the SQLite store to copy")
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeat)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engrain-cold"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=0, help="calls after the first")
    parser.add_argument("--keep", action="store_true", help="leave the prepared copies")
    args = parser.parse_args()
    if args.serve is not None:
        print(json.dumps(serve(args.serve, args.prepare, args.calls)))
        return
    if args.store is None or len(args.tree) < 2 or args.rounds < 1:
        parser.error("--store, two or more --tree and a positive --rounds are needed")
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    copies: dict[str, Path] = {}
    for name, tree in trees.items():
        copies[name] = args.workdir / name / args.store.name
        copies[name].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.store, copies[name])
        _run(tree, copies[name], prepare=True)
        print(f"  {name}: copy prepared", file=sys.stderr, flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):  # alternating: both trees see the same load
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            result = _run(trees[name], copies[name], calls=args.calls)
            runs[name].append(result)
            line = " ".join(f"{k} {result[k]}" for k in _KEYS + _CALL_KEYS if k in result)
            print(f"  {name} round {round_ + 1}: {line}", file=sys.stderr, flush=True)
    first = next(iter(trees))
    keys = _KEYS + (_CALL_KEYS if args.calls else ())
    summary: dict[str, Any] = {
        name: {k: round(statistics.median(r[k] for r in rows if r.get(k) is not None), 3)
               for k in keys if any(r.get(k) is not None for r in rows)}
        for name, rows in runs.items()
    }  # fmt: skip
    for name in list(trees)[1:]:
        same = sum(a["block"] == b["block"] for a, b in zip(runs[first], runs[name], strict=True))
        summary[f"identical_blocks_{name}_vs_{first}"] = f"{same} of {args.rounds}"
        if args.calls:
            pairs = [(x, y) for a, b in zip(runs[first], runs[name], strict=True)
                     for x, y in zip(a["blocks"], b["blocks"], strict=True)]  # fmt: skip
            summary[f"identical_later_blocks_{name}_vs_{first}"] = (
                f"{sum(x == y for x, y in pairs)} of {len(pairs)}"
            )
    if args.calls:
        for name, rows in runs.items():
            steady = sum(r["block"] == r["steady_block"] for r in rows)
            summary[f"first_block_as_steady_state_{name}"] = f"{steady} of {len(rows)}"
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    if not args.keep:
        for copy in copies.values():
            shutil.rmtree(copy.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
