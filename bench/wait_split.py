"""Where a ``context()`` call's wall time goes that its own CPU does not: trees and
settings side by side, alternating, under a load this bench controls.

    python bench/wait_split.py --db /tmp/h7-store/s100k.db --workdir /tmp/h7-work \
        --variant base=/tmp/s28-base/src --variant s21=/tmp/lead28-s21/src \
        --variant "nodefer=/tmp/s28-base/src ENGRAIN_DEFER_USES=off" \
        [--burn 2] [--rounds 2] [--queries 100] [--out bench/results/wait-split.json]

Each ``--variant LABEL=SRC [NAME=VALUE …]`` is a source tree's ``src`` and the environment
its process gets (``ENGRAIN_*`` settings: one suspect switched off at a time). Every
measurement is a fresh process on a fresh copy of ``--db`` (a ``bench/latency.py`` store,
its indexes saved), with ``PYTHONHASHSEED`` fixed: the first call and the index's load
untimed, ``--warmup`` calls, then ``--queries`` timed calls of ``bench/latency.py``'s
queries. Per call it keeps the wall time, the calling thread's CPU (``time.thread_time``)
and the process's (every thread's), their difference *waited* (wall minus the calling
thread's CPU: the model's own threads' share of the embedding, a core not given, a lock
or a pool thread waited for), the gate's stage laps (``Gated.timings_ms``, wall) and the
block's digest. Rounds rotate the variants' order. ``--burn N`` keeps N processes
spinning in pure Python for the whole run (a steady load the bench owns; the machine's
own load adds to it): a call that waits for another thread of its process waits longer
when that thread must queue for a core.

The report is each variant's median over rounds of its p50 / p95 wall, thread CPU,
process CPU and waited time, the deep calls (budget ≥ ``DEEP_BUDGET``) apart, each stage
lap's median, and the blocks differing from the first variant's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common

USER = "bench-user"
#: A deep call's budget (``bench/latency.py``'s ``DEEP_BUDGET``).
DEEP_BUDGET = 51 * 40
BENCH = Path(__file__).resolve().parent


def _sched() -> tuple[float, float, int, int]:
    """The calling thread's CPU and run-queue milliseconds (``/proc/thread-self/schedstat``:
    time on a core, time runnable but not given one) and its voluntary and involuntary
    context switches so far (``/proc/thread-self/status``)."""
    with open("/proc/thread-self/schedstat", encoding="ascii") as handle:
        cpu_ns, queued_ns, _ = handle.read().split()
    switches = {}
    with open("/proc/thread-self/status", encoding="ascii") as handle:
        for line in handle:
            if "ctxt_switches" in line:
                name, value = line.split(":")
                switches[name] = int(value)
    return (
        int(cpu_ns) / 1e6,
        int(queued_ns) / 1e6,
        switches["voluntary_ctxt_switches"],
        switches["nonvoluntary_ctxt_switches"],
    )


def _timed(engine: Any, query: str) -> dict[str, Any]:
    """One ``context()`` call, timed (module docstring)."""
    before = _sched()
    thread, process = time.thread_time(), time.process_time()
    start = time.perf_counter()
    result = engine.context(query, USER, now=common.NOW)
    wall = (time.perf_counter() - start) * 1000.0
    after = _sched()
    thread_ms = (time.thread_time() - thread) * 1000.0
    process_ms = (time.process_time() - process) * 1000.0
    gated = getattr(result, "gated", None)
    shown = "\n".join(m.id for m in result.memories)
    block = f"{result.text}\0{result.tokens}\0{shown}"
    return {
        "query": query, "wall": wall, "thread": thread_ms, "process": process_ms,
        "waited": wall - thread_ms,
        # runnable without a core / asleep (a lock, the GIL, a future, the disk)
        "queued": after[1] - before[1],
        "blocked": wall - (after[0] - before[0]) - (after[1] - before[1]),
        "voluntary": after[2] - before[2], "involuntary": after[3] - before[3],
        "budget": gated.budget.tokens if gated is not None else 0,
        "laps": dict(getattr(gated, "timings_ms", {}) or {}),
        "block": hashlib.sha256(block.encode()).hexdigest()[:16],
    }  # fmt: skip


def _serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this (fresh) process: the calls of ``spec``, each timed."""
    from engrain import Engine, Settings
    from engrain.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.embed(["warm the model up"])
    settings = Settings(url=spec["url"], data_dir=Path(spec["data_dir"]))
    calls = []
    with Engine(settings=settings, embedder=embedder) as engine:
        engine.context(spec["warmup"][0], USER, now=common.NOW)
        wait = getattr(engine.store, "wait_for_index", None)
        if wait is not None:
            wait(USER)
        for query in spec["warmup"][1:]:
            engine.context(query, USER, now=common.NOW)
        load = os.getloadavg()[0]
        if not spec.get("lockstep"):
            for query in spec["queries"]:
                calls.append(_timed(engine, query))
        else:  # blocks of queries when the parent says (``--lockstep``)
            print("ready", flush=True)
            for line in sys.stdin:
                if line.strip() == "end":
                    break
                first, last = map(int, line.split())
                calls.extend(_timed(engine, query) for query in spec["queries"][first:last])
                print("done", flush=True)
    return {"calls": calls, "load": round((load + os.getloadavg()[0]) / 2, 2)}


def _child(label: str, src: str, env: dict[str, str], spec: dict[str, Any], db: Path,
           workdir: Path) -> tuple[list[str], dict[str, str], Path]:  # fmt: skip
    """The command, environment and spec file of a variant's process on a new copy of
    ``db`` in a directory of its own."""
    run = workdir / label
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    copy = run / "store.db"
    shutil.copyfile(db, copy)
    # written back before any call: the copy's dirty pages, flushed during the calls, would
    # hold up the store's writes (dirty-page throttling) of whichever process met it
    os.sync()
    child_env = {**os.environ, **env, "PYTHONHASHSEED": "0",
                 "PYTHONPATH": os.pathsep.join([src, str(BENCH)])}  # fmt: skip
    spec_file = run / "spec.json"
    spec_file.write_text(json.dumps({**spec, "url": f"sqlite:///{copy}", "data_dir": str(run)}))
    return [sys.executable, __file__, "--serve", str(spec_file)], child_env, run


def _run(label: str, src: str, env: dict[str, str], spec: dict[str, Any], db: Path,
         workdir: Path) -> dict[str, Any]:  # fmt: skip
    """One measurement of a variant in a new process on a new copy of ``db``."""
    command, child_env, run = _child(label, src, env, spec, db, workdir)
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env)
    shutil.rmtree(run, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"{label} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _lockstep(variants: dict[str, tuple[str, dict[str, str]]], spec: dict[str, Any], db: Path,
              workdir: Path, block: int, round_no: int) -> dict[str, dict[str, Any]]:  # fmt: skip
    """One round with every variant's process open at once, each loaded and warmed up, then
    asked for ``block`` queries at a time in turn (the order rotating every block), so the
    variants' calls of a query run seconds apart under the same load; each variant's
    background work after a call still meets its own next call (a block's calls run back to
    back)."""
    children: dict[str, subprocess.Popen[str]] = {}
    runs = {}
    try:
        # started in an order rotating every round: identical processes differ by up to
        # ~10 % in a round by where they started (an A/A run, session 28)
        shift = round_no % len(variants)
        for label in [*list(variants)[shift:], *list(variants)[:shift]]:
            src, env = variants[label]
            command, child_env, runs[label] = _child(label, src, env, {**spec, "lockstep": True},
                                                     db, workdir)  # fmt: skip
            children[label] = subprocess.Popen(command, stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, text=True,
                                               env=child_env)  # fmt: skip
        for label, child in children.items():
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{label} did not start")
        labels = list(variants)
        for number, first in enumerate(range(0, len(spec["queries"]), block)):
            shift = (number + round_no) % len(labels)
            for label in labels[shift:] + labels[:shift]:
                child = children[label]
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(f"{first} {first + block}\n")
                child.stdin.flush()
                if child.stdout.readline().strip() != "done":
                    raise RuntimeError(f"{label} failed in block {number}")
        results = {}
        for label, child in children.items():
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("end\n")
            child.stdin.flush()
            results[label] = dict(json.loads(child.stdout.read().strip().splitlines()[-1]))
            child.wait()
        return results
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
        for run in runs.values():
            shutil.rmtree(run, ignore_errors=True)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(calls: Sequence[dict[str, Any]]) -> dict[str, float]:
    """p50 / p95 of each measure over ``calls`` (all, and the deep ones apart)."""
    out: dict[str, float] = {}
    for group, chosen in (("all", calls),
                          ("deep", [c for c in calls if c["budget"] >= DEEP_BUDGET])):  # fmt: skip
        if not chosen:
            continue
        out[f"{group}_calls"] = len(chosen)
        for measure in (
            "wall",
            "thread",
            "process",
            "waited",
            "queued",
            "blocked",
            "voluntary",
            "involuntary",
        ):
            values = [c[measure] for c in chosen]
            out[f"{group}_{measure}_p50"] = round(_pct(values, 0.5), 2)
            out[f"{group}_{measure}_p95"] = round(_pct(values, 0.95), 2)
    laps: dict[str, list[float]] = {}
    for call in calls:
        for name, value in call["laps"].items():
            laps.setdefault(name, []).append(value)
    for name, values in laps.items():
        out[f"lap_{name}_p50"] = round(_pct(values, 0.5), 2)
        out[f"lap_{name}_p95"] = round(_pct(values, 0.95), 2)
    return out


def _round_line(round_no: int, label: str, result: dict[str, Any]) -> str:
    """One run's medians, as printed while the bench runs."""
    line = summarize(result["calls"])
    return (f"round {round_no + 1} {label:>12}: wall p50 {line['all_wall_p50']:.1f} "
            f"p95 {line['all_wall_p95']:.1f}  thread p50 {line['all_thread_p50']:.1f}  "
            f"queued {line['all_queued_p50']:.1f}  blocked {line['all_blocked_p50']:.1f}  "
            f"switches {line['all_voluntary_p50']:.0f}+{line['all_involuntary_p50']:.0f}  "
            f"load {result['load']}")  # fmt: skip


def _burners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes spinning in pure Python until ended."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="a bench/latency.py SQLite store (copied)")
    parser.add_argument("--workdir", type=Path, help="where the copies are made")
    parser.add_argument("--variant", action="append", metavar="LABEL=SRC [NAME=VALUE …]")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--burn", type=int, default=0, help="spinning processes meanwhile")
    parser.add_argument(
        "--lockstep",
        type=int,
        default=0,
        metavar="BLOCK",
        help="every variant's process open at once, BLOCK queries each in turn",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        print(json.dumps(_serve(json.loads(args.serve.read_text(encoding="utf-8")))))
        return 0
    if not args.variant or args.db is None or args.workdir is None:
        parser.error("give --db, --workdir and at least one --variant")
    variants: dict[str, tuple[str, dict[str, str]]] = {}
    for item in args.variant:
        head, *assignments = item.split()
        label, _, src = head.partition("=")
        env = dict(a.split("=", 1) for a in assignments)
        variants[label] = (str(Path(src).resolve()), env)
    warmup, queries, _ = common.latency_pool(args.warmup, args.queries, args.seed)
    spec = {"warmup": warmup, "queries": queries}
    labels = list(variants)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    burners = _burners(args.burn)
    try:
        for round_no in range(args.rounds if args.lockstep else 0):
            started = time.perf_counter()
            results = _lockstep(variants, spec, args.db, args.workdir, args.lockstep, round_no)
            for label, result in results.items():
                runs[label].append(result)
                print(_round_line(round_no, label, result), file=sys.stderr, flush=True)
            print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        for round_no in range(0 if args.lockstep else args.rounds):
            order = labels[round_no % len(labels) :] + labels[: round_no % len(labels)]
            for label in order:
                src, env = variants[label]
                started = time.perf_counter()
                result = _run(label, src, env, spec, args.db, args.workdir)
                runs[label].append(result)
                took = time.perf_counter() - started
                line = _round_line(round_no, label, result)
                print(f"{line}  ({took:.0f} s)", file=sys.stderr, flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    first = labels[0]
    report: dict[str, Any] = {"db": str(args.db), "burn": args.burn, "rounds": args.rounds,
                              "queries": args.queries, "variants": {}}  # fmt: skip
    for label in labels:
        per_round = [summarize(r["calls"]) for r in runs[label]]
        median = {k: round(statistics.median(r[k] for r in per_round if k in r), 2)
                  for k in per_round[0]}  # fmt: skip
        pairs = [list(zip(r["calls"], f["calls"], strict=True))
                 for r, f in zip(runs[label], runs[first], strict=True)]  # fmt: skip
        differing = [sum(a["block"] != b["block"] for a, b in run) for run in pairs]
        # each call against the first variant's call of the same query (same round)
        paired = {m: round(statistics.median(a[m] / b[m] for run in pairs for a, b in run
                                             if b[m] > 0), 3)
                  for m in ("wall", "thread", "process")}  # fmt: skip
        report["variants"][label] = {
            "src": variants[label][0], "env": variants[label][1], **median,
            "paired_ratio": paired,
            "loads": [r["load"] for r in runs[label]],
            "blocks_differing_from_first": differing, "rounds": per_round,
        }  # fmt: skip
    print(f"\nmedians over {args.rounds} rounds, {args.queries} calls each, burn {args.burn}")
    print(
        f"{'variant':>12} {'wall p50':>9} {'p95':>7} {'thread':>7} {'process':>8} {'waited':>7}"
        f" {'queued':>7} {'blocked':>8} {'vol sw':>7} {'invol':>6}"
        f" {'deep wall':>10} {'deep p95':>9} {'deep thr':>9} {'deep blk':>9} differing"
    )
    for label, row in report["variants"].items():
        print(
            f"{label:>12} {row['all_wall_p50']:>9.1f} {row['all_wall_p95']:>7.1f} "
            f"{row['all_thread_p50']:>7.1f} {row['all_process_p50']:>8.1f} "
            f"{row['all_waited_p50']:>7.1f} {row['all_queued_p50']:>7.1f} "
            f"{row['all_blocked_p50']:>8.1f} {row['all_voluntary_p50']:>7.1f} "
            f"{row['all_involuntary_p50']:>6.1f} {row.get('deep_wall_p50', 0):>10.1f} "
            f"{row.get('deep_wall_p95', 0):>9.1f} {row.get('deep_thread_p50', 0):>9.1f} "
            f"{row.get('deep_blocked_p50', 0):>9.1f} {row['blocks_differing_from_first']}"
        )
    print(f"\neach call against {first}'s of the same query, median ratio")
    for label, row in report["variants"].items():
        print(f"{label:>12} " + "  ".join(f"{m} {v:.3f}" for m, v in row["paired_ratio"].items()))
    laps = sorted({k for row in report["variants"].values() for k in row
                   if k.startswith("lap_") and k.endswith("_p50")})  # fmt: skip
    print("\nstage laps p50 (wall ms)")
    for label, row in report["variants"].items():
        print(f"{label:>12} " + " ".join(f"{k[4:-4]}={row.get(k, 0):.1f}" for k in laps))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
