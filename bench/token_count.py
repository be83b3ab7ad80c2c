"""The first count of a new line's tokens, this tree's ``cl100k`` against another tree's.

    python bench/token_count.py --baseline-src /tmp/s15-base/src \
        [--texts 8000] [--rounds 6] [--out bench/results/token-count.json]

``context()`` counts each line it has not counted before (``recall/lines.py``): at 100,000
memories a 5,000-token call counts ~80 new lines. The texts are the latency corpus's notes
(``common.make_notes``, the memories of ``bench/latency.py``) and LoCoMo's development
turns joined five by five like conversation chunks (when ``../shared`` has them). Each
round makes a new encoder of each tree, counts the first half of the texts (the words and
pieces a process has met by then), then times the first count of each text of the second
half on the calling thread's CPU clock, split by whether the text is all ASCII; the trees
alternate and the order rotates every round. Every count of both trees is compared: a
difference stops the run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import common

LOCOMO = Path(__file__).resolve().parents[1] / "../shared/data/locomo/locomo_dev.json"


def load(src: Path, name: str) -> ModuleType:
    """``engrain/cl100k.py`` of the tree whose source is ``src``, as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, src / "engrain" / "cl100k.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def locomo_chunks(path: Path) -> list[str]:
    """LoCoMo's turns as ``Speaker: text`` lines, five to a chunk (none without the file)."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    turns: list[str] = []
    for sample in data:
        conversation = sample["conversation"]
        for key in sorted(k for k in conversation if k.startswith("session_") and
                          isinstance(conversation[k], list)):  # fmt: skip
            turns += [f"{t['speaker']}: {t['text']}" for t in conversation[key]]
    return ["\n".join(turns[i : i + 5]) for i in range(0, len(turns), 5)]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Time both trees' first counts, round by round; the report."""
    here = Path(__file__).resolve().parents[1] / "src"
    trees = {"base": load(args.baseline_src, "base_cl100k"), "this": load(here, "this_cl100k")}
    tables = trees["this"].load_tables()
    corpora = {
        "notes": [n.text for n in common.make_notes(args.texts, seed=args.seed)],
        "locomo_chunks": locomo_chunks(args.locomo),
    }
    out: dict[str, Any] = {}
    for corpus, texts in corpora.items():
        if not texts:
            continue
        seen, new = texts[: len(texts) // 2], texts[len(texts) // 2 :]
        groups = {"ascii": [t for t in new if t.isascii()],
                  "not_ascii": [t for t in new if not t.isascii()]}  # fmt: skip
        spent: dict[tuple[str, str], list[float]] = {}
        labels = list(trees)
        for r in range(args.rounds):
            shift = r % len(labels)
            counts: dict[str, list[int]] = {}
            for label in labels[shift:] + labels[:shift]:
                encoder = trees[label].Encoder(tables)
                for text in seen:
                    encoder.count(text)
                counts[label] = []
                for group, items in groups.items():
                    start = time.thread_time()
                    got = [encoder.count(text) for text in items]
                    took = time.thread_time() - start
                    counts[label] += got
                    spent.setdefault((group, label), []).append(took / max(len(items), 1) * 1e6)
            if counts["base"] != counts["this"]:
                raise SystemExit(f"{corpus}: the trees count differently")
        out[corpus] = {
            group: {
                "texts": len(items),
                "mean_chars": round(sum(map(len, items)) / max(len(items), 1), 1),
                **{
                    f"{label}_us": round(statistics.median(spent[(group, label)]), 2)
                    for label in labels
                },
            }
            for group, items in groups.items()
        }
    return {
        "corpora": out,
        "rounds": args.rounds,
        "counts_identical": True,
        "measure": "thread CPU µs per text, first count, median over rounds",
        "load_1m": os.getloadavg()[0],
        "baseline_src": str(args.baseline_src),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", type=Path, required=True, help="the other tree's src")
    parser.add_argument("--texts", type=int, default=8000, help="latency-corpus notes")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = measure(args)
    for corpus, groups in report["corpora"].items():
        for group, row in groups.items():
            print(f"{corpus:>14} {group:>9}: {row['texts']:5d} texts of {row['mean_chars']:6.1f} "
                  f"chars  base {row['base_us']:7.2f}  this {row['this_us']:7.2f} µs")  # fmt: skip
    print(f"counts identical; load {report['load_1m']:.1f}")
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
