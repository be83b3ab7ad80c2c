"""Attack: calls whose ``now`` is earlier than the memories' own times.

Session 17 sent times at the calendar's ends; this attack sends times that disagree with
each other. On one SQLite store (hash embedder): memories remembered ten years in the
future, one with an ``event_at`` in the future, one updated (``update(now=…)``) and one
pinned (``pin(now=…)``) at a time before they were created, a conversation whose turns'
``at`` run backwards; then, at a ``now`` ten years before, one second before, at and after
those times (and at year 1): ``context()`` (tiers 1, 2, 3), ``recall()``, ``explain()``,
``preview()``, ``tiers(rebuild=True)``, ``compress(force=True)``; ``feedback`` on a context
recorded at a later ``now`` than the feedback's own clock, and on one recorded ten years
on; ``contexts()``; an export imported into a fresh store and exported again.

Broken when: a call raises anything outside ``EngrainError`` (or an ``EngrainError`` for
a time the engine itself wrote); ``explain()`` holds a NaN or an infinity anywhere; a score
component leaves its range (recency and usage within their weights, decay within [0, 1]);
a memory from the future outranks one from the present on recency at a clock before both; the
export does not import, or re-exports differently. Exits 0 only when nothing broke.
Prints (and with ``--json`` writes) a JSON summary.

    PYTHONPATH=src .venv/bin/python bench/attacks/time_travel.py \\
        [--json bench/results/attack-time-travel-s23-h2.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

from engrain import Engine
from engrain.config import Settings
from engrain.errors import EngrainError

USER = "ada"
T = datetime(2026, 6, 1, 12, tzinfo=UTC)
YEARS = timedelta(days=3652)
CLOCKS = {
    "ten years before": T - YEARS,
    "a second before": T - timedelta(seconds=1),
    "at": T,
    "ten years on": T + YEARS,
    "twenty years on": T + 2 * YEARS,
    "year 1": datetime(1, 1, 2, tzinfo=UTC),
}
QUESTION = "when does the deploy key rotate and who holds the vault?"


def make_engine(root: Path, name: str) -> Engine:
    warnings.simplefilter("ignore")
    settings = Settings(
        data_dir=root,
        url=f"sqlite:///{root / name}",
        embedder="hash",  # type: ignore[arg-type]
        auto_compress=False,
        max_chunk_tokens=30,
        min_chunk_tokens=0,
    )
    return Engine(settings=settings)


def nonfinite(value: Any, path: str = "") -> list[str]:
    if isinstance(value, float):
        return [] if math.isfinite(value) else [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nonfinite(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in nonfinite(v, f"{path}[{i}]")]
    return []


def seed(e: Engine) -> dict[str, str]:
    ids: dict[str, str] = {}
    for i in range(8):
        e.remember(f"Filler {i}: the build farm node{i} sits in rack {i}.", USER, now=T)
    ids["present"] = e.remember(
        "The deploy key rotates on the first Monday of the month.", USER, kind="decision", now=T
    ).memory_id
    ids["future"] = e.remember(
        "The deploy key rotates on the first Monday of the month.",
        USER + "-twin",
        kind="decision",
        now=T + YEARS,
    ).memory_id
    e.remember(
        "The deploy key backup is copied to tape every Friday night.",
        USER + "-twin",
        kind="decision",
        now=T,
    )
    ids["from the future"] = e.remember(
        "Priya holds the vault passphrase for the deploy.", USER, kind="fact", now=T + YEARS
    ).memory_id
    ids["event ahead"] = e.remember(
        "The datacenter move happens on the deploy freeze.", USER, event_at=T + YEARS, now=T
    ).memory_id
    edited = e.remember("The vault lives in the basement.", USER, now=T).memory_id
    e.update(edited, USER, content="The vault lives in the attic.", now=T - YEARS)
    ids["edited before creation"] = edited
    pinned = e.remember(
        "Rotate the deploy key with the runbook.", USER, kind="golden_path", now=T
    ).memory_id
    e.pin(pinned, USER, now=T - YEARS)
    ids["pinned before creation"] = pinned
    turns = [
        {
            "speaker": "user",
            "text": f"Turn {i}: the vault inventory lists {i} crates of ledger{i} paper.",
            "at": T - timedelta(hours=i),
        }
        for i in range(6)
    ]
    e.ingest_conversation(turns, USER, session_id="backwards", now=T)
    return ids


def attempt(broken: list[str], label: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except EngrainError as exc:
        broken.append(f"{label}: {type(exc).__name__}: {exc}")
    except Exception as exc:  # outside the error tree
        broken.append(f"{label}: NOT EngrainError {type(exc).__name__}: {exc}")
    return None


def ranges(explained: dict[str, Any], weights: dict[str, float]) -> list[str]:
    """Score components outside what their weight allows."""
    out = []
    for c in explained.get("candidates", []):
        parts = c.get("components", {})
        for name in ("recency", "usage", "semantic", "domain"):
            if name in parts and not -1e-9 <= parts[name] <= weights.get(name, 1.0) + 1e-9:
                out.append(f"{c['id'][:8]} {name}={parts[name]}")
        if "decay" in parts and not 0.0 <= parts["decay"] <= 1.0:
            out.append(f"{c['id'][:8]} decay={parts['decay']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    broken: list[str] = []
    calls = compared = 0
    with tempfile.TemporaryDirectory(prefix="h2-time-travel-") as tmp:
        root = Path(tmp)
        e = make_engine(root, "store.db")
        ids = seed(e)
        late = e.context(QUESTION, USER, now=T + 2 * YEARS)
        for label, now in CLOCKS.items():
            for tier, window in (("tier 1", 8_000), ("tier 2", 32_000), ("tier 3", None)):
                calls += 1
                attempt(
                    broken,
                    f"context {tier} {label}",
                    lambda n=now, w=window: e.context(QUESTION, USER, context_window=w, now=n),
                )
                calls += 1
                attempt(
                    broken,
                    f"preview {tier} {label}",
                    lambda n=now, w=window: e.preview(QUESTION, USER, context_window=w, now=n),
                )
            calls += 3
            attempt(broken, f"recall {label}", lambda: e.recall(QUESTION, USER))
            explained = attempt(
                broken, f"explain {label}", lambda n=now: e.explain(QUESTION, USER, now=n).to_dict()
            )
            if explained is not None:
                broken += [f"explain {label}: not finite at {p}" for p in nonfinite(explained)]
                broken += [f"explain {label}: {r}" for r in ranges(explained, explained["weights"])]
            attempt(broken, f"tiers {label}", lambda n=now: e.tiers(USER, rebuild=True, now=n))
            # a memory written at T and one written ten years on, asked at a clock at or
            # before T: both are "not older than now", the one from the future may not
            # win on recency (an age below zero must not count as fresher than fresh)
            twin = (
                None
                if now > T
                else attempt(
                    broken,
                    f"explain twin {label}",
                    lambda n=now: e.explain(
                        "deploy key rotation Monday", USER + "-twin", now=n
                    ).to_dict(),
                )
            )
            if twin is not None:
                calls += 1
                rec = {c["id"]: c["components"].get("recency", 0.0) for c in twin["candidates"]}
                future = rec.get(ids["future"])
                present = [v for k, v in rec.items() if k != ids["future"]]
                compared += future is not None and bool(present)
                if future is not None and present and future > max(present) + 1e-9:
                    broken.append(
                        f"twin {label}: the memory from the future wins on recency "
                        f"({future} > {max(present)})"
                    )
        calls += 4
        attempt(
            broken,
            "feedback at an earlier clock on a context recorded later",
            lambda: e.feedback(USER, late.context_id, helpful=True),
        )
        attempt(
            broken,
            "feedback by memory ids from the future",
            lambda: e.feedback(USER, memory_ids=[ids["from the future"]], helpful=False),
        )
        for label in ("ten years before", "twenty years on"):
            calls += 1
            attempt(
                broken,
                f"compress {label}",
                lambda n=CLOCKS[label]: e.compress(USER, force=True, now=n),
            )
        shown = attempt(broken, "contexts()", lambda: e.contexts(USER, limit=50))
        exported = list(e.export_records())
        e.close()
        calls += 2
        copy = make_engine(root, "copy.db")
        attempt(broken, "import of the export", lambda: copy.import_records(exported))
        again = list(copy.export_records())
        copy.close()
        same = json.dumps(exported, sort_keys=True, default=str) == json.dumps(
            again, sort_keys=True, default=str
        )
        if not same:
            broken.append("export → import → export differs")
    summary = {
        "attack": "time_travel",
        "clocks": list(CLOCKS),
        "calls": calls,
        "twins_compared": compared,
        "contexts_listed_after_compress_20_years_on": len(shown or []),
        "exported_records": len(exported),
        "round_trip_identical": same,
        "broken": broken,
        "ok": not broken and compared == sum(c <= T for c in CLOCKS.values()),
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
