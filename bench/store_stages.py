"""``bench/tail_stages.py`` with the store's own parts of a call split out, and the garbage
collector's passes counted per generation and per call (issue 18, session 18).

    python bench/store_stages.py --db /tmp/engrain-bench/stores/latency-100000-s7-vectors-….db \
        --workdir /tmp/me --out /tmp/me/store-stages.json

Takes ``tail_stages.py``'s arguments and measures as it does, with these stages wrapped too
(exclusive thread CPU, as there): ``SQLiteStore._read`` (the SQL of every read: rows by
rowid, texts, state), ``IdColumn.take`` (ids made from the id blob), ``RowTexts.keep`` and
``prefetch``, ``Arrays._loaded_vectors`` (the rowid reader's Python) and
``Decoded.keep_found`` / ``keep_many``. Each ``context()`` call's collector passes by
generation are added to the JSON (``gc_generations_per_call``, the warm-up's first) and
summed for the slowest tenth and the rest (``gc_generations``).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import tail_stages

from engrain.engine import Engine
from engrain.store.arrays import Arrays
from engrain.store.ids import IdColumn
from engrain.store.rows import Decoded
from engrain.store.sqlite import SQLiteStore
from engrain.store.texts import RowTexts

tail_stages.STAGES += [
    (SQLiteStore, "_read", "store._read (SQL)"),
    (RowTexts, "keep", "texts keep"),
    (RowTexts, "prefetch", "texts prefetch"),
    (IdColumn, "take", "ids take"),
    (Arrays, "_loaded_vectors", "loaded vectors (Python)"),
    (Decoded, "keep_found", "kept rows found"),
    (Decoded, "keep_many", "kept memories"),
]


def main(argv: list[str]) -> int:
    passes = [0, 0, 0]
    per_call: list[list[int]] = []

    def counted(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            passes[info["generation"]] += 1

    context = Engine.context

    def counting(self: Engine, *args: Any, **kwargs: Any) -> Any:
        passes[:] = [0, 0, 0]
        out = context(self, *args, **kwargs)
        per_call.append(list(passes))
        return out

    gc.callbacks.append(counted)
    Engine.context = counting  # type: ignore[method-assign]
    try:
        code = tail_stages.main(argv)
    finally:
        Engine.context = context  # type: ignore[method-assign]
        gc.callbacks.remove(counted)
    if "--out" not in argv:
        return code
    out = Path(argv[argv.index("--out") + 1])
    report = json.loads(out.read_text())
    calls = report.get("calls")
    if calls:
        timed = per_call[-len(calls) :]
        order = sorted(range(len(calls)), key=lambda i: -calls[i]["thread_cpu_ms"])
        tenth = max(1, len(calls) // 10)
        groups = {"slowest_tenth": order[:tenth], "rest": order[tenth:]}
        report["gc_generations"] = {
            name: [sum(timed[i][g] for i in rows) / max(1, len(rows)) for g in range(3)]
            for name, rows in groups.items()
        }  # fmt: skip
        report["gc_generations"]["all_calls"] = [sum(c[g] for c in timed) for g in range(3)]
        print("collector passes a call, gen 0 / 1 / 2:", report["gc_generations"])
    report["gc_generations_per_call"] = per_call
    out.write_text(json.dumps(report))
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
