"""Complexity as labelled × as read, by file and by family of message (issue 12).

The gate's reading of every labelled message (``Engine.explain()``'s classification on an
empty engine: the rules, then the shipped intent and acknowledgement models on the message's
MiniLM vector, as in ``bench/gating.py``), compared with its writer's label, per file and
split:

- the **seed-following writers**: the tune halves of the six projects written blind
  (pulse, sensor, quill, strata, harbor, brightfall) and ``classify-train-3`` (written from
  the seed's tables);
- the **earlier writers**: main's tune half (``messages.jsonl``), ``classify-train`` and
  ``classify-train-2``;
- ``second-reading.jsonl``, a second human reading of most of those messages.

Held halves are never read here (``bench/gating.py`` reports them). Each message is also put
in one family by its text (the first that fits, in this order): a pasted error (an error
line or code quoted), a debugging one-liner (one line, under 120 characters, read or
labelled debugging), a tool choice or trade-off ("should we", "X vs Y", "instead of",
"switch to" …), a "why" analysis, a multi-part request (an enumeration, two questions),
other. For each family: how many, how many read as labelled, and the (label → read) pairs
where they differ.

With ``--tree name=path`` (twice or more) each tree's reading is taken in its own process
(``PYTHONPATH=<path>/src``), alternating, and the counts are printed side by side with the
messages whose reading changed.

Usage::

    .venv/bin/python bench/complexity_families.py [--out bench/results/….json]
        [--tree base=/tmp/s19-base --tree new=.]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

DATA = Path(__file__).resolve().parent / "gating"
USER = "dev"
#: file → the writers' group it belongs to (see the module's docstring)
SEED_FOLLOWING = (
    "messages-pulse", "messages-sensor", "messages-quill", "messages-strata",
    "messages-harbor", "messages-brightfall", "classify-train-3",
)  # fmt: skip
EARLIER = ("messages", "classify-train", "classify-train-2")
FILES = (*SEED_FOLLOWING, *EARLIER)
LEVELS = ("trivial", "simple", "moderate", "complex", "deep")

_ERROR = re.compile(
    r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\berror(?:\[E\d+\])?:|\b[A-Z]{2,}_[A-Z_]{2,}\b"
    r"|\bE[A-Z]{4,}\b|\bexit(?:ed)? (?:code|with) \d+|Traceback|panicked at|segfault"
    r"|CrashLoopBackOff|OOMKilled|\b[45]\d\d\b"
)
_CHOICE = re.compile(
    r"\bshould (?:we|i)\b|\bvs\.?\b|\bversus\b|\binstead of\b|\bswitch(?:ing)? (?:to|from)\b"
    r"|\bmove (?:to|from|off)\b|\bmigrat\w* (?:to|off)\b|\btrade-?offs?\b|\bworth (?:it|switching"
    r"|moving|adopting)|\bpros and cons\b|\bwhich (?:\w+ ){0,2}(?:should|to use|is better)\b"
    r"|\bor (?:should|stick)\b|\bcompare\b",
    re.I,
)
_WHY = re.compile(r"\bwhy\b", re.I)
_MULTI = re.compile(r"(?:^|\n)\s*(?:\d+[.)]|[-*•])\s|\?.+\?|, and |; ", re.S)


def family(text: str, labelled: str, read: str) -> str:
    """The family of a message by its text (see the module's docstring)."""
    one_line = "\n" not in text.strip()
    if _ERROR.search(text) or "```" in text:
        return "pasted error / output"
    if one_line and len(text) < 120 and "debugging" in (labelled, read):
        return "debugging one-liner"
    if _CHOICE.search(text):
        return "tool choice / trade-off"
    if _WHY.search(text):
        return "why analysis"
    if _MULTI.search(text):
        return "multi-part"
    if "debugging" in (labelled, read):
        return "debugging, longer"
    return "other"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]  # fmt: skip


def messages() -> list[dict[str, Any]]:
    """Every labelled non-held message of :data:`FILES` (held halves are left out)."""
    out = []
    for name in FILES:
        for row in _jsonl(DATA / f"{name}.jsonl"):
            if row.get("split") == "held":
                continue
            out.append({**row, "file": name})
    return out


def dump(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """id → [intent, complexity, signals…] as the gate reads each message in this process."""
    from common import NOW, open_engine

    from engrain.embed import make_embedder

    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="h8-families-") as tmp:
        engine = open_engine(Path(tmp), embedder=make_embedder("minilm"))
        try:
            for m in rows:
                c = engine.explain(m["text"], USER, turn=int(m.get("turn", 0)), now=NOW)
                k = c.classification
                out[m["id"]] = [k.intent.value, k.complexity.value, *k.signals]
        finally:
            engine.close()
    return out


def timing(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Median and p95 per message, in milliseconds of this thread's CPU time
    (``time.thread_time``: a busy machine's waits for a core left out), of the rules alone
    and of the rules with the intent model's second opinion (the vector given: the gate
    computes it anyway), over every row, three passes; as ``bench/train_classifier.py``."""
    import time

    import numpy as np

    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.recall import intent_model
    from engrain.recall.classify import classify

    embedder = MiniLMEmbedder()
    vectors = np.asarray(embedder.embed([m["text"] for m in rows]), dtype=np.float64)
    intent_model.load()
    out: dict[str, list[float]] = {"rules": [], "rules+model": []}
    for _ in range(3):
        for m, vector in zip(rows, vectors, strict=True):
            start = time.thread_time()
            rule = classify(m["text"], turn=int(m.get("turn", 0)))
            middle = time.thread_time()
            intent_model.refine(rule, m["text"], vector, embedder.model_id)
            end = time.thread_time()
            out["rules"].append((middle - start) * 1000)
            out["rules+model"].append((end - start) * 1000)
    return {f"{k} {q}": round(float(np.percentile(v, p)), 4)
            for k, v in out.items() for q, p in (("median", 50), ("p95", 95))}  # fmt: skip


def confusion(pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
    """Rows: label, columns: reading, in :data:`LEVELS` order."""
    counts = Counter(pairs)
    return [[counts[(a, b)] for b in LEVELS] for a in LEVELS]


def report(rows: Sequence[Mapping[str, Any]], read: Mapping[str, list[str]],
           second: Mapping[str, str]) -> dict[str, Any]:  # fmt: skip
    """Per file: n, right, confusion; per group: families; the second reading's agreement."""
    files: dict[str, Any] = {}
    for name in FILES:
        part = [m for m in rows if m["file"] == name]
        pairs = [(m["complexity"], read[m["id"]][1]) for m in part]
        files[name] = {
            "n": len(part), "right": sum(a == b for a, b in pairs),
            "confusion": confusion(pairs),
        }  # fmt: skip
        with_second = [m for m in part if m["id"] in second]
        files[name]["second_reading"] = {
            "n": len(with_second),
            "rules_right": sum(read[m["id"]][1] == second[m["id"]] for m in with_second),
            "writer_agrees": sum(m["complexity"] == second[m["id"]] for m in with_second),
        }
    groups: dict[str, Any] = {}
    for group, names in (("seed-following", SEED_FOLLOWING), ("earlier", EARLIER)):
        fams: dict[str, Any] = {}
        for m in (m for m in rows if m["file"] in names):
            got = read[m["id"]]
            fam = family(m["text"], m["intent"], got[0])
            entry = fams.setdefault(fam, {"n": 0, "right": 0, "misreads": Counter()})
            entry["n"] += 1
            entry["right"] += got[1] == m["complexity"]
            if got[1] != m["complexity"]:
                entry["misreads"][f"{m['complexity']}→{got[1]}"] += 1
        groups[group] = {
            f: {**e, "misreads": dict(e["misreads"].most_common())} for f, e in fams.items()
        }
    return {"levels": LEVELS, "files": files, "families": groups}


def _table(reports: Mapping[str, Mapping[str, Any]]) -> str:
    names = list(reports)
    lines = ["file".ljust(22) + "".join(f"{n:>12}" for n in names)]
    for f in FILES:
        first = reports[names[0]]["files"][f]
        cells = "".join(f"{r['files'][f]['right']:>8}/{first['n']:<3}" for r in reports.values())
        lines.append(f.ljust(22) + cells)
    return "\n".join(lines)


def _print_confusions(rep: Mapping[str, Any]) -> None:
    for f, part in rep["files"].items():
        print(f"\n{f}: {part['right']}/{part['n']} (rows: labelled, columns: read)")
        print("            " + "".join(f"{lv[:8]:>9}" for lv in LEVELS))
        for lv, row in zip(LEVELS, part["confusion"], strict=True):
            if any(row):
                print(f"  {lv:<10}" + "".join(f"{n:>9}" for n in row))
    for group, fams in rep["families"].items():
        print(f"\nfamilies, {group} writers:")
        for fam, e in sorted(fams.items(), key=lambda kv: -kv[1]["n"]):
            print(f"  {fam:<26} {e['right']:>3}/{e['n']:<3} {e['misreads']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the JSON report")
    parser.add_argument("--tree", action="append", default=[],
                        help="name=path of a source tree to read with (repeatable)")  # fmt: skip
    parser.add_argument(
        "--misreads",
        action="store_true",
        help="list every complexity misread of the first tree, with signals",
    )
    parser.add_argument(
        "--timing",
        type=int,
        default=0,
        help="also time the classifier in each tree, this many rounds alternating",
    )
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--time-dump", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = messages()
    if args.time_dump:
        args.time_dump.write_text(json.dumps(timing(rows)), encoding="utf-8")
        return 0
    if args.dump:
        args.dump.write_text(json.dumps(dump(rows)), encoding="utf-8")
        return 0
    second = {r["id"]: r["complexity"] for r in _jsonl(DATA / "second-reading.jsonl")}
    trees = [t.split("=", 1) for t in args.tree] or [["this", ""]]
    reads: dict[str, dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory(prefix="h8-families-") as tmp:
        for name, path in trees:
            if not path:
                reads[name] = dump(rows)
                continue
            out = Path(tmp) / f"{name}.json"
            env = {**os.environ, "PYTHONPATH": str(Path(path).resolve() / "src")}
            subprocess.run([sys.executable, __file__, "--dump", str(out)], env=env, check=True)
            reads[name] = json.loads(out.read_text(encoding="utf-8"))
    reports = {name: report(rows, read, second) for name, read in reads.items()}
    times = _time_trees(trees, args.timing)
    for name, rep in reports.items():
        print(f"\n===== {name}")
        _print_confusions(rep)
    if args.misreads:
        first_read = reads[next(iter(reads))]
        for m in rows:
            got = first_read[m["id"]]
            if got[1] != m["complexity"]:
                print(
                    f"{m['id']:<8} {m['intent']}/{m['complexity']} → {got[0]}/{got[1]} "
                    f"[{family(m['text'], m['intent'], got[0])}] {m['text'][:160]!r} "
                    f"{got[2:]}"
                )
    print("\nright complexity per file (non-held messages):")
    print(_table(reports))
    changed: list[dict[str, Any]] = []
    if len(reads) > 1:
        first, *others = list(reads)
        for m in rows:
            seen = {n: reads[n][m["id"]][:2] for n in reads}
            if any(seen[o] != seen[first] for o in others):
                changed.append({"id": m["id"], "file": m["file"], "text": m["text"][:140],
                                "labelled": [m["intent"], m["complexity"]], **seen})  # fmt: skip
        print(f"\nmessages read differently ({len(changed)}):")
        for c in changed:
            print(f"  {c['id']:<8} {c['labelled']} " + " ".join(
                f"{n}={c[n]}" for n in reads) + f"  {c['text']!r}")  # fmt: skip
    for name, t in times.items():
        print(
            f"classifier ms per message (thread CPU, median of {args.timing} rounds), {name}: {t}"
        )
    if args.out:
        from common import machine_info, write_json

        write_json(args.out, {"machine": machine_info(), "reports": reports,
                              "changed": changed, "classifier_ms": times})  # fmt: skip
    return 0


def _time_trees(trees: Sequence[Sequence[str]], rounds: int) -> dict[str, dict[str, float]]:
    """Each tree's :func:`timing`, its own process per round, trees alternating, and the
    median of the rounds per measure."""
    import statistics

    if rounds <= 0:
        return {}
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    with tempfile.TemporaryDirectory(prefix="h8-families-") as tmp:
        for i in range(rounds):
            for name, path in trees:
                out = Path(tmp) / f"{name}-{i}.json"
                src = Path(path).resolve() / "src" if path else Path(__file__).parents[1] / "src"
                env = {**os.environ, "PYTHONPATH": str(src)}
                subprocess.run(
                    [sys.executable, __file__, "--time-dump", str(out)], env=env, check=True
                )
                got[name].append(json.loads(out.read_text(encoding="utf-8")))
    return {
        name: {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}
        for name, runs in got.items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
