"""Short messages, trivial or not (issue 12): which get no memory, tree against tree.

    python bench/short_messages.py [--tree base=/tmp/s20-base --tree new=.] \
        [--project harbor] [--rounds 5] [--out bench/results/short-messages.json]

The data is two sets of short messages labelled ``trivial`` or ``not``, each written blind
to the rules (``bench/gating/README.md``): ``short-messages.jsonl`` (534, session 20, split
tune / held by file order) and ``short-messages-2.jsonl`` (319 from ten invented writers,
session 22, split by writer; its first line states the labelling rule). Each tree answers every
message in a process of its own (``PYTHONPATH=<tree>/src``) through the public API, on one
engine holding a gating project (default ``harbor``) with the MiniLM embedder, at the
evaluation's fixed ``now``:

- ``trivial_empty``: trivial messages whose ``context()`` is empty, without and with
  ``token_budget=2000`` (both must be);
- ``not_kept``: not-trivial messages that ``explain()`` does not classify trivial (a
  not-trivial message made trivial silently drops memory: the worse failure);
- the same by the writer's ``kind``, and every miss with the signals that decided it;
- ``other_sets``: every gating set's messages classified the same way (``explain()`` at
  their ``turn``): those labelled trivial (the ``trivial*`` files, complexity ``trivial``)
  read trivial, and every labelled non-trivial message read trivial (none should be).

A classification does not depend on what the store holds, so one engine answers every
message. Then the classifier's speed: the rules alone (``classify()``) and the rules then
the models' second reading on vectors embedded beforehand (``models_us``), over these
messages and every gating set's labelled and trivial messages, timed on the thread's CPU
clock, the trees alternating over ``--rounds`` rounds (medians per message), and the 99th
percentile of one message's time (``classify_p99_us``, ``models_p99_us``; medians of the
rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, open_engine, write_json

DATA = Path(__file__).resolve().parent / "gating"
#: The short-message sets, each measured on its own.
SETS = (DATA / "short-messages.jsonl", DATA / "short-messages-2.jsonl")
USER = "dev"
BUDGET = 2000  # the gating evaluation's explicit budget for trivial messages
SPLITS = ("tune", "held", "all")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def messages(path: Path) -> list[dict[str, Any]]:
    """A short-message set's messages (a line without a ``text``, the second set's header
    stating its rule, is not one)."""
    return [m for m in _jsonl(path) if "text" in m]


def timing_texts() -> list[str]:
    """The texts the speed is measured on: these messages and every labelled and trivial
    message of the gating sets."""
    texts = [m["text"] for path in SETS for m in messages(path)]
    for path in sorted(DATA.glob("messages*.jsonl")) + sorted(DATA.glob("trivial*.jsonl")):
        texts += [m["text"] for m in _jsonl(path)]
    return texts


def answers(project: str) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Every short message of every set answered by this process's engrain (the worker's
    side; each row names its ``set``), and every message of the other sets classified
    (:func:`other_files`)."""
    import gating

    from engrain.embed import make_embedder

    data = gating.load_data(name="main" if project in ("ledgerly", "forecasting") else project)
    with tempfile.TemporaryDirectory(prefix="h8-short-") as tmp:
        engine = open_engine(Path(tmp), embedder=make_embedder("minilm"))
        with engine:
            engine.import_records(gating.memory_records(data.projects[project], project), now=NOW)
            rows = [{**_answer(engine, m, project), "set": path.name}
                    for path in SETS for m in messages(path)]  # fmt: skip
            others = {path.name: [_read(engine, m, project) for m in _jsonl(path)]
                      for path in other_files()}  # fmt: skip
    return rows, others


def other_files() -> list[Path]:
    """The gating sets' labelled messages (``messages*``, ``classify-train*``: a label of
    complexity ``trivial`` marks the greetings) and trivial messages (``trivial*``)."""
    return [p for pattern in ("messages*.jsonl", "classify-train*.jsonl", "trivial*.jsonl")
            for p in sorted(DATA.glob(pattern))]  # fmt: skip


def _read(engine: Any, message: Mapping[str, Any], project: str) -> dict[str, Any]:
    """One message of another set classified (``explain()``, at its ``turn``): whether it
    should be trivial (a trivial file's, or labelled ``trivial``) and whether it is."""
    gated = engine.explain(message["text"], USER, project=project, turn=message.get("turn", 0),
                           now=NOW)  # fmt: skip
    return {
        "text": message["text"],
        "trivial": message.get("complexity", "trivial") == "trivial",
        "read_trivial": gated.classification.complexity.value == "trivial",
        "signals": list(gated.classification.signals),
    }


def _answer(engine: Any, message: Mapping[str, Any], project: str) -> dict[str, Any]:
    text = message["text"]
    gated = engine.explain(text, USER, project=project, now=NOW)
    plain = engine.context(text, USER, project=project, now=NOW)
    budgeted = engine.context(text, USER, project=project, token_budget=BUDGET, now=NOW)
    return {
        "id": message["id"], "text": text, "label": message["label"], "kind": message["kind"],
        "split": message["split"],
        "complexity": gated.classification.complexity.value,
        "intent": gated.classification.intent.value,
        "signals": list(gated.classification.signals),
        "tokens": plain.tokens, "tokens_with_budget": budgeted.tokens,
        "memories": len(plain.memories) + len(budgeted.memories),
    }  # fmt: skip


def classify_cpu_us(texts: Sequence[str], repeat: int = 3) -> float:
    """The rules' thread CPU time per message, in microseconds (the best of ``repeat``
    passes over ``texts``, after one untimed pass)."""
    from engrain.recall.classify import classify

    for text in texts:
        classify(text)
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time_ns()
        for text in texts:
            classify(text)
        best = min(best, (time.thread_time_ns() - start) / len(texts) / 1000)
    return best


def models_cpu_us(texts: Sequence[str], repeat: int = 3) -> dict[str, float]:
    """The thread CPU time per message, in microseconds, of ``classify()`` then the models'
    second reading (:func:`engrain.recall.intent_model.refine`: the acknowledgement and
    intent models) on each text's MiniLM vector, embedded once beforehand and not timed (the
    best of ``repeat`` passes, after one untimed pass): ``models_us``; and the 99th
    percentile over the messages of each one's time, alone and then with the models (its
    best of ``repeat``): ``classify_p99_us``, ``models_p99_us``."""
    from engrain.embed import make_embedder
    from engrain.recall.classify import Complexity, classify
    from engrain.recall.intent_model import refine

    embedder = make_embedder("minilm")
    vectors = embedder.embed(list(texts))
    model_id = embedder.model_id

    def read(text: str, vector: Any) -> None:
        rules = classify(text)
        if rules.complexity is not Complexity.TRIVIAL:
            refine(rules, text, vector, model_id)

    pairs = list(zip(texts, vectors, strict=True))
    for text, vector in pairs:
        read(text, vector)
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time_ns()
        for text, vector in pairs:
            read(text, vector)
        best = min(best, (time.thread_time_ns() - start) / len(pairs) / 1000)
    alone = [_best_ns(lambda t=text: classify(t), repeat) for text in texts]
    with_models = [_best_ns(lambda t=text, v=vector: read(t, v), repeat) for text, vector in pairs]
    return {"models_us": best, "classify_p99_us": _p99(alone) / 1000,
            "models_p99_us": _p99(with_models) / 1000}  # fmt: skip


def _best_ns(call: Any, repeat: int) -> int:
    """The least thread CPU time of ``repeat`` calls of ``call``, in nanoseconds."""
    best = None
    for _ in range(repeat):
        start = time.thread_time_ns()
        call()
        spent = time.thread_time_ns() - start
        best = spent if best is None else min(best, spent)
    return best or 0


def _p99(values: Sequence[float]) -> float:
    return float(statistics.quantiles(values, n=100)[98])


def measures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The measures over answered ``rows``: trivial ones empty, not-trivial ones kept."""
    trivial = [r for r in rows if r["label"] == "trivial"]
    not_trivial = [r for r in rows if r["label"] == "not"]
    empty = [r for r in trivial if not r["memories"] and not r["tokens"]
             and not r["tokens_with_budget"]]  # fmt: skip
    kept = [r for r in not_trivial if r["complexity"] != "trivial"]
    kinds = sorted({(r["label"], r["kind"]) for r in rows})
    by_kind = {}
    for label, kind in kinds:
        group = [r for r in rows if r["label"] == label and r["kind"] == kind]
        good = [r for r in group if (r in empty if label == "trivial" else r in kept)]
        by_kind[f"{label}/{kind}"] = f"{len(good)}/{len(group)}"
    return {
        "trivial": len(trivial), "not_trivial": len(not_trivial),
        "trivial_empty": _rate(len(empty), len(trivial)),
        "trivial_missed": len(trivial) - len(empty),
        "not_kept": _rate(len(kept), len(not_trivial)),
        "not_made_trivial": len(not_trivial) - len(kept),
        "by_kind": by_kind,
        "missed_trivial": [_miss(r) for r in trivial if r not in empty],
        "made_trivial": [_miss(r) for r in not_trivial if r not in kept],
    }  # fmt: skip


def split_measures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`measures` of one set's ``rows`` in each split (:data:`SPLITS`)."""
    return {s: measures([r for r in rows if s == "all" or r["split"] == s]) for s in SPLITS}


def other_measures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Another set's messages: those that should be trivial and are, those that should not
    be and are (each listed)."""
    should = [r for r in rows if r["trivial"]]
    return {
        "trivial": len(should),
        "read_trivial": sum(r["read_trivial"] for r in should),
        "not_trivial": len(rows) - len(should),
        "made_trivial": [r["text"] for r in rows if not r["trivial"] and r["read_trivial"]],
        "missed_trivial": [r["text"] for r in should if not r["read_trivial"]],
    }


def _miss(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "text", "kind", "complexity", "intent", "signals")}


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _worker(args: argparse.Namespace) -> int:
    """The child process: ``--answer`` the messages or time ``--speed``, JSON on stdout."""
    if args.speed:
        texts = timing_texts()
        out: Any = {"classify_us": classify_cpu_us(texts), **models_cpu_us(texts)}
    else:
        import engrain

        rows, others = answers(args.project)
        out = {"source": str(Path(engrain.__file__).resolve().parent), "rows": rows,
               "others": others}  # fmt: skip
    json.dump(out, sys.stdout)
    return 0


def _run(tree: Path, *flags: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *flags], env=env, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def measure(trees: Mapping[str, Path], project: str, rounds: int) -> dict[str, Any]:
    """Each tree's answers and measures, then the classifier's speed with the trees
    alternating (the order rotating every round)."""
    report: dict[str, Any] = {"trees": {}}
    for name, tree in trees.items():
        answered = _run(tree, "--project", project)
        rows = answered["rows"]
        report["trees"][name] = {
            "source": answered["source"],
            "other_sets": {f: other_measures(r) for f, r in answered["others"].items()},
            "sets": {path.name: split_measures([r for r in rows if r["set"] == path.name])
                     for path in SETS},
        }  # fmt: skip
    names = list(trees)
    speeds: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            speeds[name].append(_run(trees[name], "--speed"))
    for name in names:
        for key in ("classify_us", "models_us", "classify_p99_us", "models_p99_us"):
            runs = [s[key] for s in speeds[name]]
            report["trees"][name][f"{key}_median"] = round(statistics.median(runs), 2)
            report["trees"][name][f"{key}_rounds"] = [round(r, 2) for r in runs]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a tree to measure (repeat; default: this one)")  # fmt: skip
    parser.add_argument("--project", default="harbor", help="the gating project loaded")
    parser.add_argument("--rounds", type=int, default=5, help="speed rounds per tree")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--speed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    here = Path(__file__).resolve().parent.parent
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(here)}
    report = measure({n: Path(p).resolve() for n, p in trees.items()}, args.project, args.rounds)
    report.update(project=args.project, budget=BUDGET, now=NOW.isoformat(),
                  machine=machine_info(), load_1m=os.getloadavg()[0])  # fmt: skip
    for name, tree in report["trees"].items():
        for file, splits in tree["sets"].items():
            for split in SPLITS:
                m = splits[split]
                print(f"{name:>6} {file} {split:>4}: trivial empty {m['trivial_empty']:.3f} "
                      f"({m['trivial_missed']} of {m['trivial']} missed), not kept "
                      f"{m['not_kept']:.3f} ({m['not_made_trivial']} of {m['not_trivial']} "
                      f"made trivial)")  # fmt: skip
        print(f"{name:>6} classify(): {tree['classify_us_median']:.1f} µs, with the models "
              f"{tree['models_us_median']:.1f} µs thread CPU per message; p99 of a message "
              f"{tree['classify_p99_us_median']:.1f} / {tree['models_p99_us_median']:.1f} "
              f"µs")  # fmt: skip
        for file, m in tree["other_sets"].items():
            print(f"{name:>6} {file:>28}: trivial {m['read_trivial']}/{m['trivial']}, "
                  f"made trivial {len(m['made_trivial'])}/{m['not_trivial']}")  # fmt: skip
    labels = {p.name: dict(Counter(m["label"] for m in messages(p))) for p in SETS}
    print(f"load {report['load_1m']:.1f}; labels: {labels}")
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
