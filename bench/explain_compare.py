"""Do two source trees decide alike? ``explain()`` and ``context()`` of every gating message.

For a change that must not change behaviour (a restructure): each tree (``--tree
name=path``, its ``src`` imported in a process of its own) loads the gating evaluation's
projects (``bench/gating/``, every set) and answers every labelled and trivial message
with ``explain()`` under each option set of :data:`VARIANTS`, then with ``context()``
(the path without explanations: the batched totals, the early stop). Each answer is
written out in full: the classification with its signals, the budget's steps, the
weights, every candidate's decision, reason, score, tokens and components (floats as
``repr``: every bit), the block and the names of the timed stages. The report counts the
answers that differ between the first tree and each other, per variant, and shows the
first few.

Usage: ``python bench/explain_compare.py --tree base=/tmp/s24-base --tree new=.
[--embedder hash|minilm] [--limit N] [--out bench/results/explain-compare.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import NOW, machine_info, write_json

#: The option sets each message is explained under (``GateOptions.update`` keywords, and
#: ``token_budget`` / ``previous`` for the call): the defaults, each profile, an explicit
#: budget, the rules that are off by default, the other format, and a follow-up.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "composite": {"profile": "composite"},
    "static": {"profile": "static"},
    "budget-2000": {"token_budget": 2000},
    "rules-on": {"language": True, "names": True, "present_use": True, "stated_span": True},
    "sections-rich": {"format": "sections", "depth": "rich", "thresholds": "always"},
    "previous": {"previous": True},
}


def _dump(gated: Any) -> dict[str, Any]:
    """Everything a ``Gated`` decided, floats exact (``repr``), timings by name only."""
    c = gated.classification
    return {
        "classification": [c.complexity.value, c.intent.value, list(c.domains), c.turn,
                           c.has_code, c.references_history, list(c.signals),
                           repr(c.threshold_shift)],
        "budget": [gated.budget.tokens, list(gated.budget.steps)],
        "weights": {k: repr(v) for k, v in gated.weights.items()},
        "selected": [[s.memory.id, repr(s.score), repr(s.similarity), s.tokens]
                     for s in gated.selected],
        "tokens": gated.tokens_used,
        "text": gated.text,
        "decisions": [[d.item.memory.id, d.selected, d.reason, repr(d.item.score), d.item.tokens]
                      for d in gated.decisions],
        "ranked": [[s.memory.id, repr(s.score), repr(s.similarity), s.tokens]
                   for s in gated.ranked],
        "components": {i: {k: repr(v) for k, v in parts.items()}
                       for i, parts in gated.components.items()},
        "stages": list(gated.timings_ms),
    }  # fmt: skip


def answers(embedder_name: str, limit: int | None) -> dict[str, Any]:
    """This process's tree: every message's answers under every variant."""
    import gating

    from engrain.embed import make_embedder
    from engrain.recall.assemble import Format
    from engrain.recall.budget import Depth
    from engrain.recall.gate import GateOptions
    from engrain.recall.score import Profile

    enums = {"profile": Profile, "format": Format, "depth": Depth}

    embedder = make_embedder(embedder_name)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engrain-explain-") as tmp:
        for name in gating.SETS:
            data = gating.load_data(name=name)
            projects = gating.Projects(data, embedder, Path(tmp) / name)
            messages = [*data.messages, *data.trivial][:limit]
            before: dict[str, str] = {}  # each project's message before, for "previous"
            for message in messages:
                project = message["project"]
                previous = before.get(project)
                before[project] = message["text"]
                with projects.fresh(project) as engine:
                    for variant, spec in VARIANTS.items():
                        call = {k: enums[k](v) if k in enums else v for k, v in spec.items()}
                        budget = call.pop("token_budget", None)
                        wants_previous = call.pop("previous", False)
                        options = GateOptions.from_settings(engine.settings).update(**call)
                        args: dict[str, Any] = {
                            "user_id": gating.USER, "project": project, "options": options,
                            "token_budget": budget, "now": NOW,
                            "previous": previous if wants_previous else None,
                        }  # fmt: skip
                        gated = engine.explain(message["text"], **args)
                        out[f"{name}/{message['id']}/{variant}/explain"] = _dump(gated)
                    context = engine.context(message["text"], user_id=gating.USER,
                                             project=project, now=NOW)  # fmt: skip
                    out[f"{name}/{message['id']}/context"] = {
                        "text": context.text,
                        "tokens": context.tokens,
                        "tier": context.tier,
                        "memories": [m.id for m in context.memories],
                        "gated": None if context.gated is None else _dump(context.gated),
                    }
    return out


def _run_tree(path: Path, embedder: str, limit: int | None, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(path / "src")}
    cmd = [sys.executable, __file__, "--answers", str(out), "--embedder", embedder]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    subprocess.run(cmd, env=env, check=True)


def compare(
    trees: Sequence[tuple[str, Path]], found: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Per tree after the first: answers compared, differing, by variant, first few."""
    first, reference = trees[0][0], found[trees[0][0]]
    report: dict[str, Any] = {}
    for name, _ in trees[1:]:
        other = found[name]
        keys = sorted(set(reference) | set(other))
        differ = [k for k in keys if reference.get(k) != other.get(k)]
        by_variant: dict[str, list[int]] = {}
        for k in keys:
            variant = k.split("/", 2)[2]
            seen = by_variant.setdefault(variant, [0, 0])
            seen[0] += 1
            seen[1] += k in differ
        report[f"{first} vs {name}"] = {
            "answers": len(keys), "differ": len(differ),
            "by_variant": {v: {"answers": n, "differ": d} for v, (n, d) in by_variant.items()},
            "first_differing": differ[:10],
        }  # fmt: skip
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Answer in each tree, compare, print and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--embedder", default="hash", choices=("hash", "minilm"))
    parser.add_argument("--limit", type=int, help="only the first N messages of each set")
    parser.add_argument("--out", type=Path, help="write the report here as JSON")
    parser.add_argument("--answers", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.answers is not None:  # a tree's own process
        args.answers.write_text(json.dumps(answers(args.embedder, args.limit)), "utf-8")
        return 0
    trees = [(n, Path(p).resolve()) for n, p in (t.split("=", 1) for t in args.tree)]
    if len(trees) < 2:
        parser.error("give at least two --tree NAME=PATH")
    start = time.perf_counter()
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engrain-explain-cmp-") as tmp:
        for name, path in trees:
            target = Path(tmp) / f"{name}.json"
            _run_tree(path, args.embedder, args.limit, target)
            found[name] = json.loads(target.read_text("utf-8"))
    report = {
        "trees": {n: str(p) for n, p in trees}, "embedder": args.embedder,
        "limit": args.limit, "variants": VARIANTS, "comparison": compare(trees, found),
        "seconds": round(time.perf_counter() - start, 1), "machine": machine_info(),
    }  # fmt: skip
    print(json.dumps(report["comparison"], indent=2))
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
