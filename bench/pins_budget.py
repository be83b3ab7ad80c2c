"""What pinned memories take of the gated blocks, and what they push out (issue 12, session 19).

For each labelled message of a split (the tuning half by default) of each gating set, it asks
``explain()`` which pinned memories were selected, at what relevance and for how many tokens,
whether each is labelled must-include, and which memories did not fit a block that pins hold
("N tokens do not fit"), with their relevance and labels. Blocks are grouped by budget (500:
a simple question's). Prints a table per set and writes JSON (``bench/results/``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common import write_json
from gating import NOW, SETS, USER, Projects, load_data

from engrain import Engine
from engrain.embed import make_embedder
from engrain.recall.select import PIN_MIN_RELEVANCE


def block(engine: Engine, message: Mapping[str, Any]) -> dict[str, Any]:
    """One message's block: its pins (selected, with relevance, tokens and labels) and the
    memories that did not fit."""
    gated = engine.explain(message["text"], USER, project=message["project"],
                           turn=message.get("turn", 0), now=NOW)  # fmt: skip
    rel = {mid: terms.get("calibrated_relevance", 0.0) for mid, terms in gated.components.items()}
    wanted = set(message["must_include"])
    pins = [
        {"id": s.memory.id, "relevance": round(rel.get(s.memory.id, 0.0), 3),
         "tokens": s.tokens, "labelled": s.memory.id in wanted}
        for s in gated.selected if s.memory.pinned
    ]  # fmt: skip
    unfit = [
        {"id": d.item.memory.id, "relevance": round(rel.get(d.item.memory.id, 0.0), 3),
         "tokens": d.item.tokens, "labelled": d.item.memory.id in wanted,
         "pinned": d.item.memory.pinned}
        for d in gated.decisions if not d.selected and "do not fit" in d.reason
    ]  # fmt: skip
    return {"id": message["id"], "budget": gated.budget.tokens, "used": gated.tokens_used,
            "intent": gated.classification.intent.value,
            "pins": pins, "unfit": unfit,
            "missed": sorted(wanted - {s.memory.id for s in gated.selected})}  # fmt: skip


def summary(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pins' share of the blocks, their labels, and the labelled memories that did not fit."""
    pins = [p for b in blocks for p in b["pins"]]
    lead = [p for p in pins if p["relevance"] >= PIN_MIN_RELEVANCE]
    return {
        "blocks": len(blocks),
        "pins_per_block": round(len(pins) / len(blocks), 2) if blocks else None,
        "pin_tokens_share": round(sum(p["tokens"] for p in pins)
                                  / max(1, sum(b["budget"] for b in blocks)), 3),
        "pins": len(pins), "pins_labelled": sum(p["labelled"] for p in pins),
        "leading_pins": len(lead), "leading_pins_labelled": sum(p["labelled"] for p in lead),
        "unfit_labelled": sum(u["labelled"] for b in blocks for u in b["unfit"]),
        "unfit_labelled_ids": [f"{b['id']}:{u['id']}" for b in blocks for u in b["unfit"]
                               if u["labelled"]],
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every set's pins on one split."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="tune", choices=("tune", "held"))
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated sets")
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    parser.add_argument("--out", type=Path, help="where to write the JSON report")
    args = parser.parse_args(argv)
    embedder = make_embedder(args.embedder)
    report: dict[str, Any] = {"benchmark": "pins-budget", "split": args.split, "sets": {}}
    with tempfile.TemporaryDirectory(prefix="engrain-pins-") as tmp:
        for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
            data = load_data(name=name)
            directory = Path(tmp) / name
            directory.mkdir()
            projects = Projects(data, embedder, directory)
            blocks = []
            for message in data.messages:
                if message["split"] == args.split:
                    with projects.fresh(message["project"]) as engine:
                        blocks.append(block(engine, message))
            small = [b for b in blocks if b["budget"] <= 500]
            report["sets"][name] = {"all": summary(blocks), "small": summary(small),
                                    "blocks": blocks}  # fmt: skip
            for label, s in (("all", summary(blocks)), ("<=500", summary(small))):
                print(
                    f"{name:8} {label:6} blocks {s['blocks']:3}  pins/block "
                    f"{s['pins_per_block']}  pin share {s['pin_tokens_share']}  pins "
                    f"{s['pins']} (labelled {s['pins_labelled']}; leading "
                    f"{s['leading_pins']}, labelled {s['leading_pins_labelled']})  labelled "
                    f"unfit {s['unfit_labelled']} {s['unfit_labelled_ids']}"
                )
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
