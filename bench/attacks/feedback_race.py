"""Attack: feedback on the same memories and contexts from several processes at once (an
``engrain serve --workers 2`` whose clients rate answers, or two apps on one store).

Three races per trial, every racer a process of its own on one SQLite file, started
together on one event:

- **usefulness**: each racer gives ``--rounds`` ``feedback(memory_ids=[m], helpful=True)``
  to the same memory. Each moves usefulness 20% of the way to 1, so after ``n`` of them in
  any order it is ``1 − 0.5 × 0.8ⁿ``; a lower value lost feedback.
- **pairs**: each racer asks ``context()`` its own questions and gives each context
  ``helpful=True``. Each positive context counts one more shared context for each pair of
  the memories it injected, so every pair's stored count must equal the number of contexts
  that injected both; a lower count lost a context's lesson.
- **one context**: every racer gives ``helpful=True`` to the same context at once. It
  teaches its pairs once (a context is learned from once) and its record keeps every
  racer's feedback.

Prints a JSON summary; exits 0 only when nothing was lost, nothing learned twice and no
call failed.

    PYTHONPATH=src .venv/bin/python bench/attacks/feedback_race.py --trials 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import sqlite3
import sys
import tempfile
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine

from engrain import Engine
from engrain.feedback import CONTEXTS, COOCCURRENCE, PAIRS

FACTS = [f"Project {name} deploys with {tool} on {day}." for name, tool, day in [
    ("atlas", "terraform", "mondays"), ("borealis", "helm", "tuesdays"),
    ("cobalt", "ansible", "wednesdays"), ("delta", "pulumi", "thursdays"),
    ("ember", "nomad", "fridays"), ("fjord", "kustomize", "saturdays")]]  # fmt: skip
QUESTIONS = ["How does atlas deploy?", "When does borealis deploy?", "What does cobalt use?",
             "Which tool for delta?", "When is ember deployed?",
             "How is fjord shipped?"]  # fmt: skip


def engine(db: Path) -> Engine:
    return hash_engine(db, auto_compress=False)


def racer(db: Path, number: int, job: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    """One process: its share of each race, after every racer is ready."""
    with engine(db) as e:
        contexts = []
        for q in range(job["contexts"]):  # asked before the start: their records exist
            ctx = e.context(QUESTIONS[(number + q) % len(QUESTIONS)] + f" ({number}.{q})",
                            "pairs", token_budget=2000)  # fmt: skip
            if ctx.id:
                contexts.append((ctx.id, [m.id for m in ctx.memories]))
        ready.put(True)
        go.wait()
        failures = []
        try:
            for _ in range(job["rounds"]):
                e.feedback("use", memory_ids=[job["target"]], helpful=True)
            for context_id, _ in contexts:
                e.feedback("pairs", context_id, helpful=True)
            e.feedback("one", job["shared"], helpful=True)
        except Exception as exc:  # any failure is a finding
            failures.append(f"{type(exc).__name__}: {exc}")
        out.put({"contexts": contexts, "failures": failures})


def trial(work: Path, racers: int, rounds: int, contexts: int) -> dict[str, Any]:
    db = work / "e.db"
    with engine(db) as e:
        target = e.remember("The staging database is called mercury.", "use").memory_id
        for fact in FACTS:
            e.remember(fact, "pairs")
            e.remember(fact, "one")
        shared = e.context("How does atlas deploy and when does borealis deploy?", "one",
                           token_budget=2000)  # fmt: skip
        shared_ids = [m.id for m in shared.memories]
    assert target and shared.id and len(shared_ids) > 1, "the set-up injected nothing"
    job = {"target": target, "shared": shared.id, "rounds": rounds,
           "contexts": contexts}  # fmt: skip
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=racer, args=(db, n, job, ready, go, out)) for n in range(racers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    with engine(db) as e:
        usefulness = e.get(target, "use").usefulness
        pairs = (e.store.get_state("pairs", COOCCURRENCE, PAIRS) or {}).get(PAIRS, {})
        one_pairs = (e.store.get_state("one", COOCCURRENCE, PAIRS) or {}).get(PAIRS, {})
        one_record = e.store.get_state("one", CONTEXTS, shared.id) or {}
    expected_use = 1 - 0.5 * 0.8 ** (racers * rounds)
    expected_pairs: Counter[tuple[str, str]] = Counter()
    for result in results:
        for _, ids in result["contexts"]:
            expected_pairs.update(combinations(sorted(set(ids)), 2))
    lost_pairs = sum(n - pairs.get(a, {}).get(b, 0) for (a, b), n in expected_pairs.items())
    extra_pairs = sum(max(0, pairs.get(a, {}).get(b, 0) - n)
                      for (a, b), n in expected_pairs.items())  # fmt: skip
    one_counts = [one_pairs.get(a, {}).get(b, 0) for a, b in combinations(sorted(shared_ids), 2)]
    with sqlite3.connect(db) as check:
        integrity = check.execute("PRAGMA integrity_check").fetchone()[0]
    return {
        "usefulness": round(usefulness, 6),
        "usefulness_expected": round(expected_use, 6),
        "usefulness_lost": usefulness < expected_use - 1e-9,
        "pair_contexts": sum(len(r["contexts"]) for r in results),
        "pair_counts_lost": lost_pairs,
        "pair_counts_extra": extra_pairs,
        "one_context_pair_counts": sorted(set(one_counts)),
        "one_context_feedback_kept": len(one_record.get("feedback", [])),
        "failures": [f for r in results for f in r["failures"]],
        "integrity": integrity,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--racers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15, help="usefulness feedbacks per racer")
    parser.add_argument("--contexts", type=int, default=6, help="contexts rated per racer")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trials = []
    for _ in range(args.trials):
        work = Path(tempfile.mkdtemp(prefix="engrain-feedback-race-"))
        try:
            trials.append(trial(work, args.racers, args.rounds, args.contexts))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    broken = [t for t in trials if t["usefulness_lost"] or t["pair_counts_lost"]
              or t["pair_counts_extra"] or t["one_context_pair_counts"] != [1]
              or t["one_context_feedback_kept"] != args.racers or t["failures"]
              or t["integrity"] != "ok"]  # fmt: skip
    summary = {"attack": "feedback_race", "racers": args.racers, "rounds": args.rounds,
               "trials": trials, "broken_trials": len(broken), "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
