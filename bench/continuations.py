"""Continuations with and without the turn before: does ``previous`` help where it should?

``bench/gating/continuations.jsonl`` holds labelled pairs over the gating evaluation's
projects (ledgerly, forecasting, pulse, sensor): the conversation's ``previous`` turn, the
message (``text``: a continuation, a short follow-up naming no subject of its own, or a
message that opens a new topic after an unrelated turn), its ``intent``, ``complexity``,
``turn``, ``must_include`` / ``must_exclude`` memory ids and ``split`` (``tune``/``held``,
alternating in file order). Written before any code ran on them.

Each pair is answered twice by a fresh copy of its project (as ``bench/gating.py`` does):
``context(text, turn=turn)`` alone, and ``context(text, turn=turn, previous=previous)``.
Reported per split (``tune``, ``held``, ``all``) for both: must-include recall,
messages injecting a must-exclude memory, mean tokens, intent accuracy, how often the
previous turn was used (``explain()``'s signal) and the median process CPU time of the
``context()`` call (the two modes alternate, pair by pair, in one process).

``--assistant`` answers ``bench/gating/continuations-assistant.jsonl`` instead: labelled
triples that also hold the assistant's answer to the turn before (``assistant``), each
answered alone and with the user's turn (``user``: what the proxy passes), the assistant's
(``assistant``) and both (``both``: the user's turn, a newline, the assistant's), to choose
which turn before the proxy passes.

Usage: ``python bench/continuations.py --out bench/results/continuations.json
[--embedder minilm|hash] [--assistant]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import DATA, SETS, USER, Dataset, Projects, load_data, split_rows

import engrain
from engrain import Engine
from engrain.embed import make_embedder

PAIRS = DATA / "continuations.jsonl"
TRIPLES = DATA / "continuations-assistant.jsonl"
#: The turns before a message that ``--assistant`` compares, as ``previous``: the user's
#: turn (what the proxy passes), the assistant's answer to it, or both, the user's first.
TURNS = ("user", "assistant", "both")
#: Each pair is answered alone and with its previous turn at each of these weights
#: (``GateOptions.previous_weight``; 1.0 the default).
WEIGHTS = (1.0,)


def load(path: Path = PAIRS) -> Dataset:
    """The pairs and the projects they name; every label must name a memory of its
    project."""
    with path.open(encoding="utf-8") as fh:
        pairs = [json.loads(line) for line in fh if line.strip()]
    projects = {}
    for name in sorted({p["project"] for p in pairs}):
        with (DATA / f"{name}.jsonl").open(encoding="utf-8") as fh:
            projects[name] = [json.loads(line) for line in fh if line.strip()]
    for p in pairs:
        known = {row["id"] for row in projects[p["project"]]}
        unknown = [i for i in [*p["must_include"], *p["must_exclude"]] if i not in known]
        if unknown:
            raise ValueError(f"{p['id']}: labels {unknown} are not memories of {p['project']}")
    return Dataset(projects, pairs, [])


def mode_name(weight: float | None) -> str:
    """``alone``, ``previous`` (the default weight) or ``previous@<weight>``."""
    if weight is None:
        return "alone"
    return "previous" if weight == 1.0 else f"previous@{weight:g}"


def turn_before(pair: Mapping[str, Any], turn: str) -> str:
    """The text passed as ``previous`` for ``turn`` (one of :data:`TURNS`)."""
    if turn == "user":
        return str(pair["previous"])
    if turn == "assistant":
        return str(pair["assistant"])
    if turn == "both":
        return f"{pair['previous']}\n{pair['assistant']}"
    raise ValueError(f"turn must be one of {TURNS}, not {turn!r}")


def answer(
    engine: Engine, pair: Mapping[str, Any], weight: float | None, turn: str = "user"
) -> dict[str, Any]:
    """One pair answered alone (``weight`` ``None``) or with its turn before (``turn``, the
    user's by default) at ``weight``."""
    previous = None if weight is None else turn_before(pair, turn)
    options = engine.options.update(previous_weight=1.0 if weight is None else weight)
    args = {"project": pair["project"], "turn": pair["turn"], "now": NOW,
            "previous": previous, "options": options}  # fmt: skip
    gated = engine.explain(pair["text"], USER, **args)
    cpu = time.process_time()
    context = engine.context(pair["text"], USER, **args)
    cpu_ms = (time.process_time() - cpu) * 1000.0
    injected = [m.id for m in context.memories]
    used = any(s.startswith("previous turn used") for s in gated.classification.signals)
    return {
        "id": pair["id"], "split": pair["split"], "intent": pair["intent"],
        "predicted_intent": gated.classification.intent.value, "previous_used": used,
        "injected": injected, "tokens": context.tokens, "cpu_ms": round(cpu_ms, 2),
        "included": [i for i in pair["must_include"] if i in injected],
        "missed": [i for i in pair["must_include"] if i not in injected],
        "leaked": [i for i in pair["must_exclude"] if i in injected],
    }  # fmt: skip


def measures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Must-include recall, must-exclude rate, mean tokens, intent accuracy, previous used."""
    wanted = sum(len(r["included"]) + len(r["missed"]) for r in rows)
    n = len(rows)
    return {
        "pairs": n,
        "must_include_recall": round(sum(len(r["included"]) for r in rows) / wanted, 4),
        "must_exclude_rate": round(sum(bool(r["leaked"]) for r in rows) / n, 4),
        "mean_tokens": round(sum(r["tokens"] for r in rows) / n, 1),
        "intent_accuracy": round(sum(r["predicted_intent"] == r["intent"] for r in rows) / n, 4),
        "previous_used": sum(r["previous_used"] for r in rows),
        "median_cpu_ms": round(statistics.median(r["cpu_ms"] for r in rows), 2),
    }


def run(
    embedder_name: str = "minilm",
    note: str | None = None,
    weights: Sequence[float] = WEIGHTS,
    only: str | None = None,
    assistant: bool = False,
) -> dict[str, Any]:
    """Every pair (of the split ``only``, else all) answered in every mode, alternating,
    and the measures per split. With ``assistant``, the triples, in the modes ``alone``
    and each of :data:`TURNS` (at the first of ``weights``)."""
    data = load(TRIPLES if assistant else PAIRS)
    embedder = make_embedder(embedder_name)
    start = time.perf_counter()
    modes: list[tuple[str, float | None, str]] = [("alone", None, "user")]
    if assistant:
        modes += [(turn, weights[0], turn) for turn in TURNS]
    else:
        modes += [(mode_name(w), w, "user") for w in weights]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in modes}
    with tempfile.TemporaryDirectory(prefix="engrain-continuations-") as tmp:
        projects = Projects(data, embedder, Path(tmp))
        for pair in data.messages:
            if only is not None and pair["split"] != only:
                continue
            for name, weight, turn in modes:
                with projects.fresh(pair["project"]) as engine:
                    rows[name].append(answer(engine, pair, weight, turn))
    splits = {
        split: {mode: measures(split_rows(answers, split)) for mode, answers in rows.items()}
        for split in ("tune", "held", "all")
        if only is None or split in (only, "all")
    }
    return {
        "benchmark": "continuations", "embedder": embedder.model_id,
        "engrain_source": str(Path(engrain.__file__).resolve().parent), "note": note,
        "now": NOW.isoformat(), "pairs": len(data.messages), "only": only,
        "weights": list(weights), "assistant": assistant,
        "seconds": round(time.perf_counter() - start, 1), "splits": splits,
        "answers": rows, "machine": machine_info(),
    }  # fmt: skip


def gating_check(embedder_name: str = "minilm") -> dict[str, Any]:
    """The gating evaluation's labelled messages that are not continuations, each explained
    alone and with the labelled message before it (of its project, in file order) as
    ``previous``: an unrelated turn before a self-contained message. Per split: how many
    leaned on it, how many selections changed, and must-include recall and must-exclude
    rate both ways. ``explain()`` writes nothing, so one engine per project serves all."""
    embedder = make_embedder(embedder_name)
    rows: list[dict[str, Any]] = []
    for name in SETS:
        data = load_data(name=name)
        with tempfile.TemporaryDirectory(prefix="engrain-continuations-") as tmp:
            projects = Projects(data, embedder, Path(tmp))
            for project in data.projects:
                with projects.fresh(project) as engine:
                    before = None
                    for m in (m for m in data.messages if m["project"] == project):
                        if m["intent"] != "continuation" and before is not None:
                            rows.append(_both(engine, m, before))
                        before = m["text"]
    out = {}
    for split in ("tune", "held", "all"):
        chosen = split_rows(rows, split)
        wanted = sum(len(r["must_include"]) for r in chosen)
        out[split] = {
            "messages": len(chosen),
            "previous_used": sum(r["used"] for r in chosen),
            "selection_changed": sum(r["alone"] != r["previous"] for r in chosen),
            **{f"must_include_recall_{mode}": round(
                sum(len(set(r["must_include"]) & set(r[mode])) for r in chosen) / wanted, 4)
               for mode in ("alone", "previous")},
            **{f"must_exclude_rate_{mode}": round(
                sum(bool(set(r["must_exclude"]) & set(r[mode])) for r in chosen) / len(chosen), 4)
               for mode in ("alone", "previous")},
        }  # fmt: skip
    return {"splits": out, "leaned": [r for r in rows if r["used"]]}


def _both(engine: Engine, message: Mapping[str, Any], before: str) -> dict[str, Any]:
    """``message`` explained alone and with ``before`` as its previous turn."""
    args = {"project": message["project"], "turn": max(message.get("turn", 0), 1), "now": NOW}
    alone = engine.explain(message["text"], USER, **args)
    given = engine.explain(message["text"], USER, previous=before, **args)
    used = any(s.startswith("previous turn used") for s in given.classification.signals)
    return {"id": message["id"], "split": message["split"], "text": message["text"],
            "previous_text": before, "used": used,
            "must_include": message["must_include"], "must_exclude": message["must_exclude"],
            "alone": [m.id for m in alone.memories],
            "previous": [m.id for m in given.memories]}  # fmt: skip


def table(report: Mapping[str, Any]) -> str:
    """The measures as a text table, one line per split and mode."""
    lines = [f"{'split':6} {'mode':9} {'pairs':>5} {'incl':>6} {'excl':>6} {'tokens':>7} "
             f"{'intent':>6} {'used':>4} {'cpu ms':>6}"]  # fmt: skip
    for split, modes in report["splits"].items():
        for mode, m in modes.items():
            lines.append(
                f"{split:6} {mode:9} {m['pairs']:5d} {m['must_include_recall']:6.3f} "
                f"{m['must_exclude_rate']:6.2f} {m['mean_tokens']:7.0f} "
                f"{m['intent_accuracy']:6.2f} {m['previous_used']:4d} {m['median_cpu_ms']:6.1f}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pairs and print (and with ``--out``, write) the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the JSON report")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--note", help="what was measured, stored in the report")
    parser.add_argument("--details", action="store_true", help="print each pair's misses")
    parser.add_argument(
        "--weights", default="1.0", help="previous_weight values to answer with, comma-separated"
    )
    parser.add_argument("--only", choices=("tune", "held"), help="only this split's pairs")
    parser.add_argument("--assistant", action="store_true",
                        help="the triples with the assistant's answer: the user's turn, the "
                             "assistant's or both as previous")  # fmt: skip
    parser.add_argument("--gating-check", action="store_true",
                        help="only the gating messages that are not continuations, with the "
                             "message before as previous")  # fmt: skip
    args = parser.parse_args(argv)
    if args.gating_check:
        checked = gating_check(args.embedder)
        for split, m in checked["splits"].items():
            print(split, json.dumps(m))
        for r in checked["leaned"]:
            print(f"{r['id']} {r['split']} {r['text'][:70]!r}: {r['alone']} -> {r['previous']}")
        if args.out:
            report = {"benchmark": "continuations-gating-check", **checked,
                      "embedder": args.embedder, "machine": machine_info()}  # fmt: skip
            write_json(args.out, report)
        return 0
    weights = [float(w) for w in args.weights.split(",")]
    report = run(args.embedder, args.note, weights, args.only, args.assistant)
    print(table(report))
    if args.details:
        answers = report["answers"]
        for mode in [m for m in answers if m != "alone"]:
            for alone, prev in zip(answers["alone"], answers[mode], strict=True):
                print(f"{alone['id']} {alone['split']:4} {mode:9} "
                      f"used={prev['previous_used']!s:5} "
                      f"missed {alone['missed']}->{prev['missed']} "
                      f"leaked {alone['leaked']}->{prev['leaked']} "
                      f"tokens {alone['tokens']}->{prev['tokens']}")  # fmt: skip
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
