"""Attack: two processes resolve one reviewed pair at once, in opposite directions.

``Engine.resolve(x, y, user, keep|correct|both)`` settles a conflicting pair in one
transaction (the inspector's conflicts page, ``POST /v1/review/resolve``, the MCP tool).
Two reviewers — two ``serve --workers`` processes, two tabs, an agent and a person — may
settle the same pair at once, and each may pick the other memory. Each round writes a
fresh pair (``"alpha: …"`` / ``"beta: …"``; a resolution needs no flag); two spawned processes, an
engine each on one store, released together by a barrier, resolve it: one
``resolve(x, y, a)``, the other ``resolve(y, x, b)``, for every pair of resolutions
``a``, ``b`` in turn (keep/keep, correct/correct, keep/correct, correct/keep, both/keep).

Rule: the outcome is one that the two calls made one after the other could have had:
the pair keeps at least one live memory (stored, not superseded); where the calls
contradict each other (keep/keep, correct/correct: each forgets or supersedes the memory
the other keeps) exactly one succeeds and the other raises ``EngrainError``
(``NotFoundError`` / ``ValidationError``, as the second of two sequential calls does); no
call fails outside the error tree.

Prints a JSON summary; exits 0 only when every round held.

    PYTHONPATH=src .venv/bin/python bench/attacks/resolve_race.py [--rounds 10] \
        [--postgres] [--json bench/results/attack-resolve-race-s24-h2.json]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish
from key_race import store_url

from engrain import Engine
from engrain.config import Settings
from engrain.errors import EngrainError

#: (first process's resolution of (x, y), second's of (y, x)); whether one must be refused
#: (each forgets or supersedes the memory the other keeps: the second of two sequential
#: calls finds its memory gone or superseded). A keep after the other's correction may
#: succeed: it brings back the memory it keeps.
PAIRS = (("keep", "keep", True), ("correct", "correct", True), ("keep", "correct", False),
         ("correct", "keep", False), ("both", "keep", False))  # fmt: skip


def racer(url: str, data_dir: str, side: int, rounds: int, barrier: Any, queue: Any) -> None:
    """One side: each round waits for the parent's pair, then resolves it its way."""
    warnings.simplefilter("ignore")
    engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(data_dir)))
    for r in range(rounds):
        for p, pair in enumerate(PAIRS):
            user = f"u{r}-{p}"
            barrier.wait(600)  # the parent wrote the pair
            ids = sorted((m.content, m.id) for m in engine.list(user))
            x, y = ids[0][1], ids[-1][1]  # "alpha: …" sorts before "beta: …"
            first, second = (x, y) if side == 0 else (y, x)
            try:
                engine.resolve(first, second, user, pair[side])
                outcome = "ok"
            except EngrainError as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # outside the error tree: a failure
                outcome = f"FAILED {type(exc).__name__}: {exc} {traceback.format_exc()[-300:]}"
            queue.put((r, p, side, outcome))
            barrier.wait(600)  # both resolved: the parent looks
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--postgres", action="store_true",
                        help="also on a private PostgreSQL server started for the run")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    cases: list[dict[str, Any]] = []
    for backend in ["sqlite", "postgres"] if args.postgres else ["sqlite"]:
        with (
            tempfile.TemporaryDirectory(prefix=f"resolve-race-{backend}-") as tmp,
            store_url(backend, tmp) as url,
        ):
            engine = Engine(url, settings=Settings(embedder="hash", data_dir=Path(tmp)))
            ctx = mp.get_context("spawn")
            barrier, queue = ctx.Barrier(3), ctx.Queue()
            procs = [ctx.Process(target=racer, args=(url, tmp, side, args.rounds, barrier, queue))
                     for side in (0, 1)]  # fmt: skip
            for proc in procs:
                proc.start()
            for r in range(args.rounds):
                for p, (a, b, contradict) in enumerate(PAIRS):
                    user = f"u{r}-{p}"
                    engine.remember("alpha: the standup starts at nine", user)
                    engine.remember("beta: the standup starts at ten past", user)
                    barrier.wait(600)
                    barrier.wait(600)
                    outcomes = {side: o for _, _, side, o in (queue.get(timeout=300)
                                                               for _ in (0, 1))}  # fmt: skip
                    live = [m.content for m in engine.list(user) if m.superseded_by is None]
                    failed = [o for o in outcomes.values() if o.startswith("FAILED")]
                    succeeded = sum(o == "ok" for o in outcomes.values())
                    ok = bool(live) and not failed and (succeeded == 1 if contradict else True)
                    cases.append({"backend": backend, "round": r, "resolutions": f"{a}/{b}",
                                  "live": live, "outcomes": outcomes, "ok": ok})  # fmt: skip
            for proc in procs:
                proc.join(120)
            engine.close()
    tally: dict[str, list[int]] = {}
    for c in cases:
        t = tally.setdefault(f"{c['backend']}:{c['resolutions']}", [0, 0])
        t[0] += 1
        t[1] += not c["ok"]
    broken = [c for c in cases if not c["ok"]]
    summary = {"attack": "resolve_race", "rounds": args.rounds,
               "broken_of_run_by_case": {k: f"{b} of {n}" for k, (n, b) in tally.items()},
               "pairs_left_with_nothing_live": sum(not c["live"] for c in cases),
               "broken": len(broken), "examples": broken[:6], "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
