"""Attack: an export edited by hand (or by a careless script) and imported back, through the
Python API, the CLI (``engrain -u bob import FILE``) and HTTP (``POST /v1/import`` with bob's
key).

A SQLite store (hash embedder) holds bob's six facts and alice's secret; bob's export is
edited one way per case — cut off mid-line, a line duplicated, a value of the wrong type, a
``NaN``, a count of 31 digits, metadata 100 levels deep, a vector scaled by 10³⁰ or zeroed,
a number a float32 cannot hold, the record moved to another user, a byte-order mark with
Windows line ends and blank lines, a blank line before a bad record — and each edited file
goes to a fresh copy of the store through every surface that can carry it. Rules:

* every surface gives the same verdict (``ok`` or the error's code);
* a refused import writes nothing (the store's rows, before and after);
* a refusal names the line of the file it is about (a blank line counts as a line);
* an accepted import leaves each of bob's facts first for its own words (an edited vector
  may not outrank them), each memory once, and alice's secret untouched and unseen by bob;
* no answer outside the error tree (a traceback, a 5xx).

Prints a JSON summary; exits 0 only when no case broke a rule.

    PYTHONPATH=src .venv/bin/python bench/attacks/edited_import.py [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import cli, deep, finish, round_environment
from http_junk import LiveServer

from engrain import Engine
from engrain.config import Settings
from engrain.errors import EngrainError
from engrain.keys import KeyRing
from engrain.server import create_app

FACTS = [
    "the billing service listens on port 8033",
    "invoices are built nightly by the cron job",
    "deploys happen on Tuesdays after the standup",
    "grafana boards live in the ops folder",
    "stripe webhooks are verified with the signing secret",
    "ada prefers postgres for the ledger",
]
SECRET = "alice keeps the vault code 4242"


def lines(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r, ensure_ascii=False) for r in records]


def edited(records: list[dict[str, Any]]) -> dict[str, tuple[str, str | None, int | None]]:
    """case -> (the file's text, the verdict expected, the line a refusal must name)."""
    dim = len(records[0]["embedding"])
    new = copy.deepcopy(records[1])
    new.pop("state", None)
    new.update(id="edited", content="zebra crossings by the office")

    def one(**change: Any) -> list[str]:
        record = {**new, **change}
        return [*lines(records), json.dumps(record, ensure_ascii=False)]

    n = len(records) + 1  # the line of the edited record
    whole = lines(records)
    scaled = [x * 1e30 for x in records[1]["embedding"]]
    return {
        "as exported": ("\n".join(whole) + "\n", "ok", None),
        "cut off mid-line": ("\n".join(whole)[:-40] + "\n", "invalid_input", len(whole)),
        "a line duplicated": ("\n".join([*whole, whole[2]]) + "\n", "invalid_input", n),
        "a line duplicated, edited": (
            "\n".join([*whole, whole[2].replace("Tuesdays", "Fridays")]) + "\n",
            "invalid_input",
            n,
        ),
        "importance as a word": ("\n".join(one(importance="high")) + "\n", "invalid_input", n),
        "NaN confidence": (
            "\n".join([*whole, one()[-1].replace('"confidence": 1.0', '"confidence": NaN')]) + "\n",
            "invalid_input",
            n,
        ),
        "a 31-digit count": ("\n".join(one(access_count=10**30)) + "\n", "invalid_input", n),
        "metadata 100 deep": (
            "\n".join(one(provenance={"turn_ids": [], "metadata": deep(100)})) + "\n",
            "invalid_input",
            n,
        ),
        "vector scaled by 1e30": ("\n".join(one(embedding=scaled)) + "\n", "ok", None),
        "vector zeroed": ("\n".join(one(embedding=[0.0] * dim)) + "\n", "ok", None),
        "a number float32 cannot hold": (
            "\n".join(one(embedding=[1e39] + [0.0] * (dim - 1))) + "\n",
            "invalid_input",
            n,
        ),
        "moved to another user": ("\n".join(one(user_id="mallory")) + "\n", "refused", n),
        "BOM, CRLF, blank lines": (
            "\ufeff" + "\r\n\r\n".join(one()) + "\r\n\r\n",
            "ok",
            None,
        ),
        "a blank line before a bad record": (
            "\n".join([*whole, "", json.dumps({**new, "kind": "rumour"})]) + "\n",
            "unknown_value",
            n + 1,
        ),
    }


def rows(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        got = conn.execute("SELECT user_id, id, content FROM memories ORDER BY user_id, id")
        return hashlib.sha256(repr(got.fetchall()).encode()).hexdigest()


def judged(engine: Engine) -> list[str]:
    """What an accepted import broke: a fact not first for its own words, a memory twice,
    alice's secret changed or shown to bob."""
    problems = []
    for fact in FACTS:
        got = engine.recall(fact, "bob").memories
        if not got or got[0].content != fact:
            problems.append(f"recall({fact!r}) -> {got[0].content if got else None!r}")
    ids = [m.id for m in engine.list("bob", limit=1000)]
    if len(ids) != len(set(ids)):
        problems.append("a memory of bob's is there twice")
    if [m.content for m in engine.list("alice")] != [SECRET]:
        problems.append("alice's memories changed")
    if "4242" in engine.context("what is the vault code?", "bob").text:
        problems.append("bob was shown alice's secret")
    return problems


def verdict(run: Callable[[], Any]) -> tuple[str, str]:
    try:
        run()
        return "ok", ""
    except EngrainError as exc:
        return exc.code, exc.message
    except Exception as exc:  # outside the error tree: a break in itself
        return f"raised {type(exc).__name__}", str(exc)[:200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    broken: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="h6-edited-import-") as tmp:
        root = Path(tmp)
        seed_db = root / "seed.db"
        settings = Settings(embedder="hash", data_dir=root)
        with Engine(f"sqlite:///{seed_db}", settings=settings) as seed:
            for fact in FACTS:
                seed.remember(fact, "bob")
            seed.remember(SECRET, "alice")
            records = list(seed.export_records("bob"))
        for case, (text, expected, line) in edited(records).items():
            outcome: dict[str, Any] = {"expected": expected}
            problems: list[str] = []
            for surface in ("python", "cli", "http"):
                d = root / f"{len(results)}-{surface}"
                d.mkdir()
                db = d / "store.db"
                shutil.copy(seed_db, db)
                (d / "edited.jsonl").write_text(text, encoding="utf-8", newline="")
                before = rows(db)
                if surface == "python":
                    try:
                        parsed = [json.loads(x) for x in text.lstrip("\ufeff").splitlines()
                                  if x.strip()]  # fmt: skip
                    except ValueError:  # not JSON: nothing a Python caller could pass
                        parsed = None
                    got, message = "n/a", ""
                    if parsed is not None:
                        with Engine(f"sqlite:///{db}", settings=settings) as engine:
                            got, message = verdict(lambda p=parsed, e=engine: e.import_records(p))
                elif surface == "cli":
                    env = round_environment(d)
                    done = cli(env, "-u", "bob", "--json", "import", str(d / "edited.jsonl"))
                    got, message = "ok", ""
                    if done.returncode != 0:
                        error = json.loads(done.stdout or done.stderr or "{}")
                        got, message = error.get("error", "?"), error.get("message", done.stderr)
                else:
                    engine = Engine(f"sqlite:///{db}", settings=settings)
                    ring = KeyRing(engine.store)
                    key = ring.create(["bob"])[0]
                    live = LiveServer(create_app(engine, ring))
                    try:
                        r = httpx.post(live.url + "/v1/import", content=text.encode("utf-8"),
                                       headers={"authorization": f"Bearer {key}",
                                                "content-type": "application/x-ndjson"},
                                       timeout=120)  # fmt: skip
                        body = r.json()
                        got = "ok" if r.status_code == 200 else str(body.get("error"))
                        message = "" if r.status_code == 200 else str(body.get("message"))
                        if r.status_code >= 500:
                            problems.append(f"http answered {r.status_code}")
                    finally:
                        live.stop()
                        engine.close()
                after = rows(db)
                outcome[surface] = {"verdict": got, "message": message[:200]}
                if got == "n/a":
                    continue
                if got.startswith("raised"):
                    problems.append(f"{surface}: {got}: {message}")
                if got != "ok" and after != before:
                    problems.append(f"{surface}: refused, but the store changed")
                named = message.startswith(f"line {line}:")
                if got != "ok" and line is not None and surface != "python" and not named:
                    problems.append(f"{surface}: the refusal does not name line {line}")
                if got == "ok":
                    with Engine(f"sqlite:///{db}", settings=settings) as engine:
                        problems += [f"{surface}: {p}" for p in judged(engine)]
            verdicts = {outcome[s]["verdict"] for s in ("python", "cli", "http")} - {"n/a"}
            if expected == "refused":  # another user: the CLI and HTTP refuse, Python may not
                wanted = {outcome["cli"]["verdict"], outcome["http"]["verdict"]}
                if "ok" in wanted:
                    problems.append("a record of another user was taken on bob's behalf")
            elif verdicts != {expected}:
                problems.append(f"verdicts {sorted(verdicts)}, expected {expected}")
            outcome["problems"] = problems
            results[case] = outcome
            if problems:
                broken.append(case)
    summary = {"attack": "edited_import", "cases": len(results), "broken": broken,
               "results": results, "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
