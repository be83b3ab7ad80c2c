"""The gating evaluation's must-include misses, each with what ``explain()`` decided, grouped
by the cause that dropped it (issue 12).

For every labelled message of one split (``tune`` by default: tune on it, never on
``held``) and every must-include memory ``context()`` did not inject, one row: the message's
classification (intent, complexity, budget, signals, domains), the decision's reason, the
threshold or share it names, the memory's score, relevance, cosine and BM25 side, its type
boost, decay, uses and pin, and the cause (:func:`cause`):

- ``below threshold``: its score under its intent's threshold (how far: ``gap``);
- ``relevance under its threshold``: a correction or a context note whose relevance stays
  under the threshold its score clears (``select.correction_below`` / ``present_below``);
- ``unrelated to the message``: a typed learning other than an invariant under the
  unrelated level (``select.unrelated_learning``);
- ``block filled by more relevant``: a typed learning under ``select.needed_relevance``;
- ``procedural floor``: a preference under its relevance floor;
- ``share full``: the preferences' or the unrelated invariants' share of the budget;
- ``budget``: its line did not fit;
- ``not a candidate``: never scored (muted, superseded, a duplicate dropped or outside the
  pool);
- ``other``: any reason not above (a conflict, ``top_k``).

Each message is answered by a fresh copy of its project, as ``bench/gating.py`` does, with
the default options. The misses' message-level class (what a rule would have to reach) is
in the row too: ``continuation`` (a follow-up whose subject is an earlier turn, which
``context()`` does not receive), ``misread`` (intent or complexity not as labelled).

Usage: ``python bench/gating_misses.py [--split tune]
[--sets main,pulse,sensor,quill,strata,harbor,brightfall,meridian,kestrel,anvil,wrench]
[--out bench/results/gating-misses.json]``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, write_json
from gating import SETS, USER, Dataset, Projects, load_data

from engrain import Engine
from engrain.embed import make_embedder
from engrain.recall.results import Gated

#: The explain() components shown for each miss.
TERMS = ("calibrated_relevance", "cosine", "lexical", "lexical_no_evidence", "semantic",
         "type_boost", "boost_scale", "decay", "domain", "usage", "area_convention",
         "pointed")  # fmt: skip
#: A decision's reason → the cause it names, first match wins.
CAUSES = (
    (re.compile(r"^score [\d.]+ below (?P<limit>[\d.]+)"), "below threshold"),
    (re.compile(r"^(a correction|about the present), relevance [\d.]+ below (?P<limit>[\d.]+)"),
     "relevance under its threshold"),
    (re.compile(r"^unrelated to the message, relevance [\d.]+ below (?P<limit>[\d.]+)"),
     "unrelated to the message"),
    (re.compile(r"^relevance [\d.]+ below (?P<limit>[\d.]+): .*more relevant"),
     "block filled by more relevant"),
    (re.compile(r"^procedural, relevance [\d.]+ below (?P<limit>[\d.]+)"), "procedural floor"),
    (re.compile(r"share full"), "share full"),
    (re.compile(r"do not fit"), "budget"),
)  # fmt: skip


def cause(reason: str | None) -> tuple[str, float | None]:
    """The cause a decision's ``reason`` names and the limit it quotes (a threshold or a
    floor), ``None`` when it quotes none; ``not a candidate`` without a decision."""
    if reason is None:
        return "not a candidate", None
    for pattern, name in CAUSES:
        found = pattern.search(reason)
        if found:
            limit = found.groupdict().get("limit")
            return name, float(limit) if limit is not None else None
    return "other", None


def misses(engine: Engine, message: Mapping[str, Any],
           uses: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:  # fmt: skip
    """The must-include memories of ``message`` that ``context()`` did not inject, each with
    its decision, its terms and the message's classification (``uses``: the project's rows
    by id, for their use count and pin)."""
    project, turn = message["project"], message.get("turn", 0)
    gated = engine.explain(message["text"], USER, project=project, turn=turn, now=NOW)
    context = engine.context(message["text"], USER, project=project, turn=turn, now=NOW)
    injected = {m.id for m in context.memories}
    return [row(gated, message, mid, uses[mid]) for mid in message["must_include"]
            if mid not in injected]  # fmt: skip


def row(gated: Gated, message: Mapping[str, Any], mid: str,
        memory: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One miss: the message, its classification, the decision and the memory's terms."""
    c = gated.classification
    decision = next((d for d in gated.decisions if d.item.memory.id == mid), None)
    reason = decision.reason if decision is not None else None
    name, limit = cause(reason)
    score = round(decision.item.score, 3) if decision is not None else None
    terms = gated.components.get(mid, {})
    continuation = message["intent"] == "continuation"
    misread = (c.intent.value, c.complexity.value) != (message["intent"], message["complexity"])
    return {
        "message": message["id"], "text": message["text"], "memory": mid,
        "kind": memory["kind"], "content": memory["content"][:160],
        "uses": memory.get("access_count", 0), "pinned": bool(memory.get("pinned")),
        "intent": c.intent.value, "complexity": c.complexity.value,
        "labelled": [message["intent"], message["complexity"]],
        "budget": gated.budget.tokens, "signals": list(c.signals), "domains": list(c.domains),
        "reason": reason, "cause": name, "limit": limit, "score": score,
        "gap": round(limit - score, 3) if limit is not None and score is not None
        and name == "below threshold" else None,
        "terms": {t: round(terms[t], 3) for t in TERMS if t in terms},
        "message_class": "continuation" if continuation else "misread" if misread else "",
    }  # fmt: skip


def collect(data: Dataset, split: str, projects: Projects) -> list[dict[str, Any]]:
    """Every miss of ``split``'s labelled messages of ``data``."""
    rows = {r["id"]: r for rows in data.projects.values() for r in rows}
    out: list[dict[str, Any]] = []
    for message in data.messages:
        if message["split"] != split:
            continue
        with projects.fresh(message["project"]) as engine:
            out.extend(misses(engine, message, rows))
    return out


def table(found: Sequence[Mapping[str, Any]]) -> str:
    """The misses grouped by cause, one line each."""
    lines = []
    by_cause = Counter(m["cause"] for m in found)
    for name, count in by_cause.most_common():
        lines.append(f"{name}: {count}")
        for m in (m for m in found if m["cause"] == name):
            t = m["terms"]
            gap = f" gap {m['gap']:.3f}" if m["gap"] is not None else ""
            tag = f" [{m['message_class']}]" if m["message_class"] else ""
            lines.append(
                f"  {m['message']} {m['memory']} ({m['kind']}, {m['uses']} uses"
                f"{', pinned' if m['pinned'] else ''}){tag}: {m['reason']}{gap}; "
                f"relevance {t.get('calibrated_relevance', 0):.3f} cosine "
                f"{t.get('cosine', 0):.3f} bm25 {t.get('lexical', 0):.3f} decay "
                f"{t.get('decay', 0):.3f}; {m['intent']}/{m['complexity']} "
                f"(labelled {'/'.join(m['labelled'])}), budget {m['budget']}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """List the misses of one split, grouped by cause, and write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated sets")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path, help="where to write the JSON list")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = set(names) - set(SETS)
    if unknown:
        parser.error(f"unknown sets {sorted(unknown)}; known: {', '.join(SETS)}")
    embedder = make_embedder(args.embedder)
    report: dict[str, Any] = {"benchmark": "gating-misses", "split": args.split, "sets": {}}
    with tempfile.TemporaryDirectory(prefix="engrain-misses-") as tmp:
        for name in names:
            data = load_data(name=name)
            directory = Path(tmp) / name
            directory.mkdir()
            projects = Projects(data, embedder, directory)
            found = collect(data, args.split, projects)
            wanted = sum(len(m["must_include"]) for m in data.messages
                         if m["split"] == args.split)  # fmt: skip
            report["sets"][name] = {"must_include": wanted, "missed": len(found),
                                    "by_cause": dict(Counter(m["cause"] for m in found)),
                                    "misses": found}  # fmt: skip
            print(f"== {name}: {len(found)} of {wanted} must-include missed ({args.split})")
            print(table(found))
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
