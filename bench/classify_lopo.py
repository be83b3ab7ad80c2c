"""A change to the classifier's rules, judged on projects it was not drawn from (issue 12).

:mod:`complexity_lopo` leaves one project out to judge the *learned* parts; a rule is not
fitted, but it is chosen: someone reads the misses of some sets and writes a rule for them.
This bench judges such a choice the same way. Each ``--tree`` (the first is the baseline)
classifies every labelled message of ``bench/gating/`` in a process of its own, with that
tree's ``src`` first on the path, as the gate does: the rules
(:func:`engrain.recall.classify.classify`) and the shipped pipeline (the rules with the
intent model's second opinion, :func:`engrain.recall.intent_model.refine`). Then, for every
tree against the baseline and every gating set ``S`` (the eleven, meridian, kestrel, anvil and
wrench included: no rule was ever tuned on them):

- ``others``: the change in messages classified as labelled on the other sets' tune halves
  — the evidence someone who never saw ``S`` would have had;
- ``left out``: the change on ``S``'s tune half;
- ``LOPO gain``: the sum, over the sets whose ``others`` is positive, of ``left out``:
  what adopting the change on the other projects' evidence brings to a project nobody
  read. A rule that transfers gains on most left-out sets; one fitted to one writer gains
  where it was read and nowhere else.

Intent and complexity are judged separately. The change on the three ``classify-train``
files (no halves; the earlier rules were written against them, so in-sample) is shown
beside, not counted. The disagreements of the last tree on the tune
halves are listed grouped by the signal that misread them (:func:`family`): the verbs, the
question's shape, code, length and structure, domain and symptom words, the intent model's
second opinion, or none (a level the intent gives by default). ``--held`` also scores the
held halves (read once, at the end, after the choice). Also measured per tree: the thread
CPU time of classifying one message (rules and second opinion), median and 99th percentile.

Usage::

    .venv/bin/python bench/classify_lopo.py --tree base=/tmp/s21-base --tree new=. \\
        [--held] [--vectors /tmp/….npy] [--out bench/results/classify-lopo-….json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine_info, write_json
from complexity_lopo import EXTRA, FRESH, SETS, load_rows, vectors_of

#: the eleven gating sets scored (meridian, kestrel, anvil and wrench too: nothing was ever
#: tuned on them)
SCORED = (*SETS, *FRESH)
READINGS = ("rules", "shipped")
MEASURES = ("intent", "complexity")
#: signal → the family of cue that produced it (the issue's grouping: verbs, question
#: shape, code, length, domain words); a signal not listed decides nothing ("jargon",
#: "history_reference", "turn>5" are noted, not used), and a miss with none decided is its
#: intent's default level
FAMILIES = {
    "code": ("code", "snippet", "error line", "quoted error", "quoted output"),
    "verbs": ("asks for analysis", "asks to write", "imperative", "request in the final sentence",
              "request in the final question", "deliberation", "note", "problem word",
              "revision", "repeat the work", "what it does", "what if", "a piece for it"),
    "question shape": ("procedure", "how-to", "how it is", "rationale", "mechanism",
                       "follow-up", "quick"),
    "length": ("long", "short", "one unit", "many parts", "restructure", "small piece",
               "multi-file"),
    "domain words": ("symptom", "architecture", "architecture: a design asked for"),
    "trivial": ("trivial_phrase", "trivial: no content word"),
}  # fmt: skip
_FAMILY_OF = {signal: name for name, signals in FAMILIES.items() for signal in signals}


def family(signals: Sequence[str], measure: str) -> str:
    """The family of the signal that decided ``measure`` (intent or complexity): for the
    intent, the last signal fired before it (the model's second opinion when it changed
    it); for the complexity, the last signal fired after the intent (else the intent's
    default level)."""
    if any(s.startswith("model intent:") for s in signals):
        if measure == "intent":
            return "intent model"
        signals = [s for s in signals if not s.startswith("model intent:")]
    cut = next((i for i, s in enumerate(signals) if s.startswith("intent:")), len(signals))
    if signals and signals[0] in FAMILIES["trivial"]:
        return "trivial"
    part = signals[:cut] if measure == "intent" else signals[cut + 1 :]
    decided = [_FAMILY_OF[s] for s in part if s in _FAMILY_OF and s != "deep: lower thresholds"]
    return decided[-1] if decided else "none (the intent's default)"


def classify_rows(rows: Sequence[dict[str, Any]], vectors: Any) -> list[dict[str, Any]]:
    """Every row read by the engrain on the path: rules, shipped, signals, CPU seconds."""
    from engrain.recall import intent_model as im
    from engrain.recall.classify import classify

    model = im.load()
    embedder = model.embedder if model else None
    out = []
    for row, vector in zip(rows, vectors, strict=True):
        start = time.thread_time()
        rules = classify(row["text"], turn=row.get("turn", 0))
        shipped = im.refine(rules, row["text"], vector, embedder)
        spent = time.thread_time() - start
        out.append({"rules": [rules.intent.value, rules.complexity.value],
                    "shipped": [shipped.intent.value, shipped.complexity.value],
                    "signals": list(shipped.signals), "cpu": spent})  # fmt: skip
    return out


def run_tree(src: Path, vectors: Path) -> list[dict[str, Any]]:
    """:func:`classify_rows` in a process with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(vectors)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return list(json.loads(done.stdout))


def accuracy(rows: Sequence[dict[str, Any]], reads: Sequence[dict[str, Any]], reading: str,
             measure: str, index: Sequence[int]) -> int:  # fmt: skip
    """How many of the rows at ``index`` ``reading`` classifies as labelled on ``measure``."""
    slot = MEASURES.index(measure)
    return sum(reads[i][reading][slot] == rows[i][measure] for i in index)


def judge(
    rows: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]],
    split: str,
) -> dict[str, Any]:  # fmt: skip
    """Per reading and measure, each set's change left out, the others' change and the
    LOPO gain (see the module docstring)."""
    index = {s: [i for i, r in enumerate(rows) if r["group"] == s and r["split"] == split]
             for s in SCORED}  # fmt: skip
    out: dict[str, Any] = {}
    for reading in READINGS:
        for measure in MEASURES:
            delta = {
                s: accuracy(rows, new, reading, measure, idx)
                - accuracy(rows, base, reading, measure, idx)
                for s, idx in index.items()
            }
            total = sum(delta.values())
            sets = {s: {"left_out": d, "others": total - d} for s, d in delta.items()}
            gain = sum(d["left_out"] for d in sets.values() if d["others"] > 0)
            wins = sum(d["left_out"] > 0 for d in sets.values() if d["others"] > 0)
            losses = sum(d["left_out"] < 0 for d in sets.values() if d["others"] > 0)
            extra = [i for i, r in enumerate(rows) if r["group"] in EXTRA]
            files = (accuracy(rows, new, reading, measure, extra)
                     - accuracy(rows, base, reading, measure, extra))  # fmt: skip
            out[f"{reading} {measure}"] = {"sets": sets, "total": total, "lopo_gain": gain,
                                           "left_out_wins": wins, "left_out_losses": losses,
                                           "training_files": files}  # fmt: skip
    return out


def rates(rows: Sequence[dict[str, Any]], reads: Sequence[dict[str, Any]], split: str
          ) -> dict[str, dict[str, float]]:  # fmt: skip
    """Each set's share classified as labelled: ``{set: {"shipped intent": …}}``."""
    out = {}
    for name in SCORED:
        idx = [i for i, r in enumerate(rows) if r["group"] == name and r["split"] == split]
        out[name] = {f"{reading} {measure}": round(
            accuracy(rows, reads, reading, measure, idx) / len(idx), 3)
            for reading in READINGS for measure in MEASURES}  # fmt: skip
        out[name]["n"] = len(idx)
    return out


def misses(rows: Sequence[dict[str, Any]], reads: Sequence[dict[str, Any]], split: str
           ) -> dict[str, dict[str, list[str]]]:  # fmt: skip
    """The shipped pipeline's disagreements on ``split``: measure → family → lines."""
    out: dict[str, dict[str, list[str]]] = {m: {} for m in MEASURES}
    for row, read in zip(rows, reads, strict=True):
        if row["split"] != split or row["group"] not in SCORED:
            continue
        for slot, measure in enumerate(MEASURES):
            got = read["shipped"][slot]
            if got != row[measure]:
                name = family(read["signals"], measure)
                if measure == "complexity" and read["shipped"][0] != row["intent"]:
                    name = "the intent misread"
                out[measure].setdefault(name, []).append(
                    f"{row['group']} {row['id']} {row[measure]} → {got}: {row['text'][:90]!r}"
                )
    return out


def cpu(reads: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Median and 99th percentile of one message's classification, thread CPU ms."""
    spent = sorted(r["cpu"] * 1000 for r in reads)
    return {"p50_ms": round(spent[len(spent) // 2], 4),
            "p99_ms": round(spent[int(len(spent) * 0.99)], 4)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Classify with every tree, print the judgement and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path (≥ 2)")
    parser.add_argument("--held", action="store_true", help="also score the held halves")
    parser.add_argument("--vectors", type=Path, default=Path("/tmp/classify-lopo-vectors.npy"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    rows = load_rows()
    vectors_of(rows, args.vectors)  # computed once, read by every tree's process
    reads = {name: run_tree(Path(path).resolve() / "src", args.vectors)
             for name, path in trees.items()}  # fmt: skip
    names = list(trees)
    splits = ("tune", "held") if args.held else ("tune",)
    report: dict[str, Any] = {"trees": trees, "rates": {}, "judged": {}, "cpu": {}}
    for split in splits:
        report["rates"][split] = {n: rates(rows, reads[n], split) for n in names}
        report["judged"][split] = {n: judge(rows, reads[names[0]], reads[n], split)
                                   for n in names[1:]}  # fmt: skip
    report["misses"] = misses(rows, reads[names[-1]], "tune")
    report["cpu"] = {n: cpu(reads[n]) for n in names}
    report["machine"] = machine_info()
    _print(report, names, splits)
    write_json(args.out, report)
    return 0


def _print(report: dict[str, Any], names: Sequence[str], splits: Sequence[str]) -> None:
    for split in splits:
        print(f"\n{split} halves: intent / complexity as labelled, shipped (rules)")
        print(f"{'tree':<10}" + "".join(f"{s:>24}" for s in SCORED))
        for n in names:
            cells = report["rates"][split][n]
            print(f"{n:<10}" + "".join(
                f"{c['shipped intent']:.2f}/{c['shipped complexity']:.2f}"
                f" ({c['rules intent']:.2f}/{c['rules complexity']:.2f})".rjust(24)
                for c in (cells[s] for s in SCORED)))  # fmt: skip
        for n in names[1:]:
            for key, verdict in report["judged"][split][n].items():
                per = " ".join(f"{s}:{v['left_out']:+d}/{v['others']:+d}"
                               for s, v in verdict["sets"].items())  # fmt: skip
                print(
                    f"  {n} {key:<20} total {verdict['total']:+d}  LOPO gain "
                    f"{verdict['lopo_gain']:+d} (left out: {verdict['left_out_wins']} win, "
                    f"{verdict['left_out_losses']} lose); training files "
                    f"{verdict['training_files']:+d}  [set: left out/others] {per}"
                )
    for measure, by_family in report["misses"].items():
        print(f"\n{names[-1]}, tune halves, {measure} disagreements by the signal that decided:")
        for name, lines in sorted(by_family.items(), key=lambda kv: -len(kv[1])):
            print(f"  {name} ({len(lines)})")
            for line in lines:
                print(f"    {line}")
    for n in names:
        print(f"cpu {n}: {report['cpu'][n]}")


def _worker(vectors: Path) -> int:
    import numpy as np

    rows = load_rows()
    print(json.dumps(classify_rows(rows, np.load(vectors))))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        raise SystemExit(_worker(Path(sys.argv[2])))
    raise SystemExit(main())
