"""Every typed learning ``explain()`` scored for the gating evaluation's labelled messages,
with its label (must-include, must-exclude or none), its verdict and its terms, and the
separation of candidate matching signals between the three classes that matter (issue 12):

- **misses**: must-include memories the gate did not inject;
- **leaks**: must-exclude memories it injected;
- **rejections**: memories labelled must-exclude, or unlabelled, that it rightly left out.

A signal that would find the misses must be high on them and low on the rejections (and on
the leaks, or it adds leaks). For each signal the report gives its median on each class and
the AUC of misses against rejections and against leaks (0.5: no separation), and how many
misses it would lift above the largest value that 95 % / 99 % of the rejections stay under.

Signals measured (all computed here from the message and the project's rows, nothing tuned):

- ``entity``: the share of the memory's rare identifiers (paths, dotted or snake_case
  names, CamelCase, upper-case acronyms, words with digits) also in the message;
- ``domain_tag``: a memory's user-supplied domain tag (its row's ``domains``) named in the
  message, word by word;
- ``kind_intent``: the memory's kind is one the message's intent lifts
  (``score.INTENT_TYPE_MULTIPLIER`` above 1);
- ``cooccur``: the cosine between the message's words expanded through the project's own
  vocabulary (words that co-occur in its learnings, PMI-weighted) and the memory's words;
- ``neighbour``: the best cosine (model vectors) between the memory and the learnings the
  gate found most relevant for the message (relevance ≥ 0.6), a second hop.

Usage: ``python bench/gating_signals.py [--split tune] [--sets …] [--out …]``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, write_json
from gating import SETS, USER, Projects, load_data

from engrain.embed import make_embedder

TERMS = ("calibrated_relevance", "cosine", "lexical", "lexical_no_evidence", "semantic",
         "type_boost", "boost_scale", "decay", "domain", "usage")  # fmt: skip


def dump(split: str, names: Sequence[str], embedder_name: str) -> list[dict[str, Any]]:
    """One row per (labelled message of ``split``, typed learning explain() scored)."""
    embedder = make_embedder(embedder_name)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engrain-signals-") as tmp:
        for name in names:
            data = load_data(name=name)
            directory = Path(tmp) / name
            directory.mkdir()
            projects = Projects(data, embedder, directory)
            rows = {r["id"]: r for rs in data.projects.values() for r in rs}
            engines = {p: projects.fresh(p) for p in data.projects}
            for message in data.messages:
                if message["split"] != split:
                    continue
                project = message["project"]
                engine = engines[project]
                gated = engine.explain(message["text"], USER, project=project,
                                       turn=message.get("turn", 0), now=NOW)  # fmt: skip
                include, exclude = set(message["must_include"]), set(message["must_exclude"])
                seen = set()
                for d in gated.decisions:
                    mid = d.item.memory.id
                    if mid not in rows or mid in seen:
                        continue
                    seen.add(mid)
                    terms = gated.components.get(mid, {})
                    out.append({
                        "set": name, "project": project, "message": message["id"],
                        "text": message["text"], "intent": gated.classification.intent.value,
                        "labelled_intent": message["intent"], "memory": mid,
                        "kind": rows[mid]["kind"], "selected": d.selected,
                        "reason": d.reason, "score": round(d.item.score, 4),
                        "label": "include" if mid in include else
                        "exclude" if mid in exclude else "",
                        "terms": {t: round(terms[t], 4) for t in TERMS if t in terms},
                    })  # fmt: skip
                for mid in include - seen:
                    out.append({"set": name, "project": project, "message": message["id"],
                                "text": message["text"],
                                "intent": gated.classification.intent.value,
                                "labelled_intent": message["intent"], "memory": mid,
                                "kind": rows[mid]["kind"], "selected": False,
                                "reason": None, "score": None, "label": "include",
                                "terms": {}})  # fmt: skip
            for engine in engines.values():
                engine.close()
            print(f"{name}: {sum(1 for r in out if r['set'] == name)} rows", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    rows = dump(args.split, names, args.embedder)
    write_json(args.out, {"benchmark": "gating-signals", "split": args.split, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
