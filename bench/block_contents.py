"""Where a block's tokens go: what it holds that no label asks for (issue 12, session 26, h5).

For every labelled (non-trivial) message of one split of each gating set (``tune`` by
default: a rule is fixed on the tune halves, the held ones are read once after), the
block ``explain()`` gives (the selection ``context()`` makes) is split, in tokens:

- lines of memories labelled must-include, labelled must-exclude, and unlabelled;
- the unlabelled by why they passed: ``pinned`` (a pin leading the block), ``procedural``
  (a preference within its share), ``background`` (an invariant unrelated to the message,
  in the unrelated invariants' share), ``partner`` (a conflict partner joining its
  memory), ``boost`` (passed its threshold only with its type boost: its score less the
  boost is under the threshold) and ``relevance`` (passed without it);
- the block's own overhead: its tokens less its lines' (the wrapper, a newline a line,
  headings);
- lines that restate another line of the same block: a pair of injected typed learnings
  whose embeddings are at least :data:`RESTATES` similar (the engine's own
  ``conflict_similarity``: MiniLM puts restatements of one fact at 0.80-0.87, different
  facts about one thing under 0.7), the line of the pair walked later counted; and
  separately the pairs the sets' writers declared as restatements (``bench/gating/
  README.md``: "`X` restates `Y`"), both injected;
- each unlabelled line's relevance against its block's best relevance (``ratio``), and
  whether it is a clear match (relevance ≥ ``area.AREA_RELEVANCE``) in a block that has one.

Usage: ``python bench/block_contents.py [--split tune] [--sets …] [--out …] [--no-blocks]
[--trim default|none] [--options name=value,…]`` (``--trim none``: the blocks before the
rules of ``recall.trim``; ``--options`` passes other ``GateOptions`` changes).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json
from gating import SETS, USER
from gating_lopo import set_engines

from engrain.embed import make_embedder
from engrain.model import Kind, MemoryType
from engrain.recall.classify import Intent
from engrain.recall.select import procedural_min_relevance, threshold_for
from engrain.recall.trim import NO_TRIM

#: Two injected lines this similar restate each other (``Settings.conflict_similarity``).
RESTATES = 0.8
#: "`X` restates `Y`" (and "`X` (an invariant) restates `Y`") in the sets' README.
DECLARED = re.compile(r"`([a-z0-9-]+)`(?: \([a-z ]+\))? restates (?:part of )?`([a-z0-9-]+)`")
README = Path(__file__).resolve().parent / "gating" / "README.md"

WHY = ("pinned", "procedural", "background", "partner", "boost", "relevance")


def declared_pairs(text: str) -> set[frozenset[str]]:
    """The restatement pairs the sets' README names."""
    return {frozenset(m.groups()) for m in DECLARED.finditer(text)}


def why_passed(reason: str, kind: Kind, memory_type: MemoryType, terms: Mapping[str, float],
               score: float, intent: Any, shift: float) -> str:  # fmt: skip
    """Why an injected line passed (:data:`WHY`)."""
    if reason == "pinned":
        return "pinned"
    if reason.startswith("conflicts with"):
        return "partner"
    if memory_type is MemoryType.PROCEDURAL:
        return "procedural"
    relevance = terms.get("calibrated_relevance", 0.0)
    if kind is Kind.INVARIANT and relevance < 0.2:
        return "background"
    if score - terms.get("type_boost", 0.0) < threshold_for(kind, intent, shift):
        return "boost"
    return "relevance"


def block_rows(gated: Any, message: Mapping[str, Any], vectors: Mapping[str, np.ndarray],
               declared: set[frozenset[str]]) -> dict[str, Any]:  # fmt: skip
    """One message's block, line by line."""
    c = gated.classification
    reasons = {d.item.memory.id: d.reason for d in gated.decisions if d.selected}
    relevance = {s.memory.id: gated.components.get(s.memory.id, {}).get(
        "calibrated_relevance", 0.0) for s in gated.selected}  # fmt: skip
    best = max(relevance.values(), default=0.0)
    lines = []
    seen: list[str] = []
    # the walk's order: most relevant first (the fill order), so the later of a pair is
    # the less relevant one
    for s in sorted(gated.selected, key=lambda s: -relevance[s.memory.id]):
        m = s.memory
        terms = gated.components.get(m.id, {})
        label = ("include" if m.id in message["must_include"]
                 else "exclude" if m.id in message["must_exclude"] else "none")  # fmt: skip
        v = vectors.get(m.id)
        restated_by, cos = None, 0.0
        if v is not None and not m.provenance.turn_ids:
            for other in seen:
                w = vectors.get(other)
                if w is not None and float(v @ w) > cos:
                    restated_by, cos = other, float(v @ w)
        lines.append({
            "id": m.id, "kind": m.kind.value, "tokens": s.tokens, "label": label,
            "why": why_passed(reasons.get(m.id, ""), m.kind, m.memory_type, terms, s.score,
                              c.intent, c.threshold_shift),
            "relevance": round(relevance[m.id], 4), "score": round(s.score, 4),
            "threshold": threshold_for(m.kind, c.intent, c.threshold_shift),
            "raised": terms.get("area_convention", 0.0) > 0,
            "pointed": terms.get("pointed", 0.0) > 0,
            "ratio": round(relevance[m.id] / best, 4) if best > 0 else None,
            "nearest_before": restated_by, "nearest_cosine": round(cos, 4),
            "declared_restatement": any(frozenset((m.id, o)) in declared for o in seen),
        })  # fmt: skip
        seen.append(m.id)
    line_tokens = sum(r["tokens"] for r in lines)
    return {
        "id": message["id"], "intent": c.intent.value, "complexity": c.complexity.value,
        "budget": gated.budget.tokens, "tokens": gated.tokens_used,
        "overhead": gated.tokens_used - line_tokens, "best_relevance": round(best, 4),
        "lines": lines,
    }  # fmt: skip


def summary(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A set's blocks summed: tokens a message by label, by why an unlabelled line passed,
    overhead, restating lines, and the unlabelled lines by their ratio to the block's best."""
    n = max(1, len(blocks))
    by_label: Counter[str] = Counter()
    lines_by_label: Counter[str] = Counter()
    why: Counter[str] = Counter()
    why_lines: Counter[str] = Counter()
    restating: Counter[str] = Counter()
    ratio: dict[str, Counter[str]] = defaultdict(Counter)
    kinds: Counter[str] = Counter()
    for b in blocks:
        for line in b["lines"]:
            by_label[line["label"]] += line["tokens"]
            lines_by_label[line["label"]] += 1
            if line["nearest_cosine"] >= RESTATES:
                restating[f"{line['label']} tokens"] += line["tokens"]
                restating[f"{line['label']} lines"] += 1
            if line["declared_restatement"]:
                restating[f"declared {line['label']} lines"] += 1
                restating[f"declared {line['label']} tokens"] += line["tokens"]
            if line["label"] != "none":
                bucket = _ratio_bucket(line["ratio"])
                ratio[line["label"]][bucket] += 1
                continue
            why[line["why"]] += line["tokens"]
            why_lines[line["why"]] += 1
            kinds[line["kind"]] += line["tokens"]
            ratio["none"][_ratio_bucket(line["ratio"])] += 1
    return {
        "messages": len(blocks),
        "tokens": round(sum(b["tokens"] for b in blocks) / n, 1),
        "overhead": round(sum(b["overhead"] for b in blocks) / n, 1),
        "by_label": {k: round(v / n, 1) for k, v in by_label.items()},
        "lines_by_label": {k: round(v / n, 2) for k, v in lines_by_label.items()},
        "unlabelled_by_why": {k: round(why[k] / n, 1) for k in WHY},
        "unlabelled_lines_by_why": {k: round(why_lines[k] / n, 2) for k in WHY},
        "unlabelled_by_kind": {k: round(v / n, 1) for k, v in kinds.most_common()},
        "restating": {k: (round(v / n, 2) if "tokens" in k else v) for k, v in restating.items()},
        "ratio_to_best": {k: dict(sorted(v.items())) for k, v in ratio.items()},
    }


def pooled(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every set's lines together: by why they passed and their relevance (to 0.1), by why,
    kind and the message's intent, and the pinned ones by whether they clear their
    threshold (a preference: its relevance floor, ``select.procedural_min_relevance``); each
    cell lines labelled must-include, unlabelled lines and their tokens."""
    cells: dict[str, dict[str, Counter[str]]] = {
        "why_relevance": defaultdict(Counter), "why_kind_intent": defaultdict(Counter),
        "pinned": defaultdict(Counter), "background_intent": defaultdict(Counter),
    }  # fmt: skip
    for b in blocks:
        for line in b["lines"]:
            keys = {
                "why_relevance": f"{line['why']} {_ratio_bucket(line['relevance'])}",
                "why_kind_intent": f"{line['why']} {line['kind']} {b['intent']}",
            }
            if line["why"] == "pinned":
                passes = (line["relevance"] >= procedural_min_relevance(Intent(b["intent"]))
                          if line["kind"] == Kind.PREFERENCE.value
                          else line["score"] >= line["threshold"])  # fmt: skip
                keys["pinned"] = "clears its threshold" if passes else "under its threshold"
            if line["why"] == "background":
                keys["background_intent"] = b["intent"]
            for table, key in keys.items():
                cell = cells[table][key]
                cell["include"] += line["label"] == "include"
                cell["exclude"] += line["label"] == "exclude"
                cell["unlabelled"] += line["label"] == "none"
                cell["unlabelled_tokens"] += line["tokens"] * (line["label"] == "none")
    return {t: {k: dict(v) for k, v in sorted(c.items())} for t, c in cells.items()}


def _ratio_bucket(ratio: float | None) -> str:
    if ratio is None:
        return "none"
    return f"{min(0.9, int(ratio * 10) / 10):.1f}"


def vectors_of(embedder: Any, projects: Mapping[str, Sequence[Mapping[str, Any]]]
               ) -> dict[str, np.ndarray]:  # fmt: skip
    """Each memory's embedding, normalised (the model's own: the store holds the same)."""
    out: dict[str, np.ndarray] = {}
    for rows in projects.values():
        matrix = np.asarray(embedder.embed([r["content"] for r in rows]), dtype=np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        out.update({r["id"]: matrix[i] for i, r in enumerate(rows)})
    return out


def parse_options(text: str | None) -> dict[str, Any]:
    """``name=value,…`` as ``GateOptions`` changes (true / false, numbers, else text)."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item:
            continue
        name, value = item.split("=", 1)
        lowered = value.lower()
        if lowered in ("true", "on", "false", "off"):
            out[name] = lowered in ("true", "on")
        else:
            try:
                out[name] = float(value)
            except ValueError:
                out[name] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--options", help="GateOptions changes, name=value,…")
    parser.add_argument(
        "--trim",
        default="default",
        choices=("default", "none"),
        help="the trim rules (recall.trim): the default's, or none (before)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-blocks", action="store_true",
                        help="write the summaries only, not every block's lines")  # fmt: skip
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    changes = parse_options(args.options)
    if args.trim == "none":
        changes["trim"] = NO_TRIM
    declared = declared_pairs(README.read_text(encoding="utf-8"))
    embedder = make_embedder(args.embedder)
    start = time.process_time()
    report: dict[str, Any] = {"benchmark": "block-contents", "split": args.split,
                              "options": {k: repr(v) for k, v in changes.items()},
                              "restates": RESTATES, "sets": {}}  # fmt: skip
    every: list[dict[str, Any]] = []
    for name, data, engines in set_engines(sets, args.split, embedder):
        vectors = vectors_of(embedder, data.projects)
        blocks = []
        for m in data.messages:
            engine = engines[m["project"]]
            options = engine.options.update(**changes)
            gated = engine.explain(m["text"], USER, project=m["project"], turn=m.get("turn", 0),
                                   options=options, now=NOW)  # fmt: skip
            blocks.append(block_rows(gated, m, vectors, declared))
        s = summary(blocks)
        every += blocks
        report["sets"][name] = {"summary": s, **({} if args.no_blocks else {"blocks": blocks})}
        print(f"{name:10} {s['messages']:3d} msgs  tokens {s['tokens']:7.1f}  "
              f"overhead {s['overhead']:5.1f}  label {s['by_label']}  "
              f"why {s['unlabelled_by_why']}  restating {s['restating']}", flush=True)  # fmt: skip
    report["pooled"] = pooled(every)
    report["cpu_seconds"] = round(time.process_time() - start, 1)
    report["machine"] = machine_info()
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
