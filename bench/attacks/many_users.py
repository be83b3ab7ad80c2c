"""Attack: many users on one engine, in random order: bounded memory, no user in another's.

One SQLite store (hash embedder), ``--users`` users (2,000), each with a few memories that
carry a token of their own (``u{n}tok``): three remembered facts, ``--decisions``
decisions (1) and a conversation of four turns. Then one engine serves them in a random
order, ``--passes`` times over: ``context()`` for a large model (tier 3) and for a small
one (tier 1: the compiled tiers, compiled in the background), ``recall()``, ``explain()``
every fifth, ``preview()`` every seventh. Checked:

- **isolation**: no answer for user *n* holds another user's token (every call, every
  memory returned, every block's text);
- **bounded memory**: the process's resident size after each quarter of a pass, and the
  number of users each per-user structure of the process holds (the store's working sets,
  documented at most 64; the compiled tiers served from memory; the background worker's
  finished jobs; the conversation turn index); after the first pass the resident size may
  grow by at most ``--max-growth-mb`` (40 MB: the allocator's noise) while the same users
  are served again, and no structure may hold more users than its bound (``--bound``,
  the documented 64 working sets; a structure without a bound breaks it once it passes
  ``--bound`` users).

Exits 0 only when both held. Prints (and with ``--json`` writes) a JSON summary.

    PYTHONPATH=src .venv/bin/python bench/attacks/many_users.py [--users 2000] [--passes 2] \\
        [--json bench/results/attack-many-users-s23-h2.json]
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish, hash_engine

from engrain import Engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOKEN = re.compile(r"u(\d+)tok")
WORDS = [
    "the api",
    "the web app",
    "the worker",
    "the docs",
    "the cli",
    "the proxy",
    "the inspector",
    "the migrations",
    "the models",
    "the benchmarks",
]


def rss_mb() -> float:
    """The process's resident size now (``/proc/self/statm``), in MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 1e6


def make_engine(db: Path) -> Engine:
    return hash_engine(db, auto_compress=False)


def user(n: int) -> str:
    return f"user-{n:05d}"


def seed(db: Path, users: int, decisions: int) -> None:
    """Each user's memories, all imported in one call (records of the ``remember`` and
    ``conversation`` types)."""
    records: list[dict[str, Any]] = []
    for n in range(users):
        tok = f"u{n}tok"
        for i, fact in enumerate(
            (
                "keeps the spare key under the blue pot",
                "drinks oat milk in coffee",
                "parks on level three",
            )
        ):
            records.append(
                {
                    "type": "remember",
                    "user_id": user(n),
                    "kind": "fact",
                    "content": f"{tok} {fact} ({i})",
                    "at": (T0 + timedelta(minutes=i)).isoformat(),
                }
            )
        for d in range(decisions):
            records.append(
                {
                    "type": "remember",
                    "user_id": user(n),
                    "kind": "decision",
                    "content": f"{tok} decided to deploy {WORDS[d % len(WORDS)]} "
                    f"on Tuesdays, rule {d}",
                    "at": T0.isoformat(),
                }
            )
        records.append(
            {
                "type": "conversation",
                "user_id": user(n),
                "session_id": "s1",
                "turns": [
                    {"speaker": "user", "text": f"{tok}: where is the spare key?"},
                    {"speaker": "assistant", "text": f"{tok}: under the blue pot."},
                    {"speaker": "user", "text": f"{tok}: and the car?"},
                    {"speaker": "assistant", "text": f"{tok}: level three."},
                ],
            }
        )
    with make_engine(db) as e:
        e.import_records(records, now=T0)


def held(e: Engine) -> dict[str, int]:
    """How many users each per-user structure of this process holds now."""
    from engrain.recall import summaries, turns

    store: Any = e.store
    counts = {
        "store working sets": len(getattr(store, "_caches", {})),
        "compiled tiers in memory": len({k[0] for k in e.tier_cache._fresh}),
        "background jobs kept": len(e.worker._pending),
    }
    for name, module in (("turn index users", turns), ("summary index users", summaries)):
        counts[name] = len(module.indexes(e.store)._users)
    return counts


def leaks(n: int, text: str) -> list[int]:
    return sorted({int(m) for m in TOKEN.findall(text)} - {n})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument(
        "--decisions",
        type=int,
        default=1,
        help="decisions per user (each held by the user's compiled tiers)",
    )
    parser.add_argument("--bound", type=int, default=64)
    parser.add_argument("--max-growth-mb", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    crossed: list[str] = []
    samples: list[dict[str, Any]] = []
    calls = 0
    with tempfile.TemporaryDirectory(prefix="h2-many-users-") as tmp:
        db = Path(tmp) / "store.db"
        started = time.monotonic()
        seed(db, args.users, args.decisions)
        seeded_s = time.monotonic() - started
        e = make_engine(db)
        samples.append({"pass": 0, "served": 0, "rss_mb": round(rss_mb(), 1), **held(e)})
        for p in range(1, args.passes + 1):
            order = list(range(args.users))
            rng.shuffle(order)
            for i, n in enumerate(order, 1):
                who, now = user(n), T0 + timedelta(days=1)
                shown = [
                    e.context("where is the spare key?", who, now=now).text,
                    e.context("where is the spare key?", who, context_window=8_000, now=now).text,
                    " ".join(m.content for m in e.recall("spare key", who).memories),
                ]
                if i % 5 == 0:
                    shown.append(
                        " ".join(
                            c.memory.content
                            for c in e.explain("where do I park?", who, now=now).ranked
                        )
                    )
                if i % 7 == 0:
                    shown.append(
                        e.preview("where do I park?", who, context_window=8_000, now=now).text
                    )
                calls += len(shown)
                for text in shown:
                    if leaks(n, text):
                        crossed.append(f"{who} saw users {leaks(n, text)[:5]}")
                if i % max(1, args.users // 4) == 0:
                    e.wait()
                    samples.append(
                        {"pass": p, "served": i, "rss_mb": round(rss_mb(), 1), **held(e)}
                    )
        e.close()
    first = next(
        s
        for s in samples
        if (s["pass"] == 1 and s["served"] == args.users) or (s["pass"] == 1 and s is samples[-1])
    )
    end_of_first = [s for s in samples if s["pass"] == 1][-1]
    growth = samples[-1]["rss_mb"] - end_of_first["rss_mb"] if args.passes > 1 else 0.0
    over = {
        k: v
        for k, v in samples[-1].items()
        if k not in ("pass", "served", "rss_mb") and v > args.bound
    }
    summary = {
        "attack": "many_users",
        "users": args.users,
        "decisions_each": args.decisions,
        "passes": args.passes,
        "calls": calls,
        "seeded_s": round(seeded_s, 1),
        "samples": samples,
        "rss_growth_mb_over_the_later_passes": round(growth, 1),
        "structures_over_the_bound": over,
        "first_pass_end": first,
        "crossed": crossed[:20],
        "crossed_count": len(crossed),
        "ok": not crossed and not over and growth <= args.max_growth_mb,
    }
    finish(summary, args.json)


if __name__ == "__main__":
    main()
