"""Attack: the ``engrain`` CLI with hostile ``--url`` values and junk ``ENGRAIN_*`` values.

Each case runs ``engrain remember`` then ``engrain list`` in a private directory that
holds ``store.db`` (a store with one memory), a directory, a junk file and a bad TOML
file. The rules: a call either works on the file the URL names or exits non-zero with
one ``error:`` line (never a traceback); no call creates a file the URL does not name
as its path (``store.db?mode=ro`` must not become a new, empty store of that name, and
the caller's ``store.db`` must not be left unread while the call "works"); an
environment value that is not a valid setting is refused with the variable's name.

Prints a JSON summary; exits 0 only when every case kept the rules.

    PYTHONPATH=src .venv/bin/python bench/attacks/store_urls.py [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from attack_report import finish

#: (label, --url or None, extra environment, what must happen: "works" or "refused")
CASES: list[tuple[str, str | None, dict[str, str], str]] = [
    ("plain file", "sqlite:///{d}/store.db", {}, "works"),
    ("query mode=ro", "sqlite:///{d}/store.db?mode=ro", {}, "refused"),
    ("query immutable", "sqlite:///{d}/store.db?immutable=1", {}, "refused"),
    ("query memory", "sqlite:///{d}/store.db?mode=memory&cache=shared", {}, "refused"),
    ("fragment", "sqlite:///{d}/store.db#main", {}, "refused"),
    ("a directory", "sqlite:///{d}/adir", {}, "refused"),
    ("junk file", "sqlite:///{d}/junk.db", {}, "refused"),
    ("/dev/null", "sqlite:////dev/null", {}, "refused"),
    ("NUL escape", "sqlite:///{d}/%00x.db", {}, "refused"),
    ("no path", "sqlite://", {}, "refused"),
    ("file: URI", "file:{d}/store.db?mode=ro", {}, "refused"),
    ("python path", "os:system", {}, "refused"),
    ("leading space", " sqlite:///{d}/store.db", {}, "refused"),
    ("dot dot", "sqlite:///{d}/adir/../store.db", {}, "works"),
    ("escaped ?", "sqlite:///{d}/odd%3Fname.db", {}, "works"),
    ("env embedder", None, {"ENGRAIN_EMBEDDER": "junk"}, "refused"),
    ("env max_text_chars", None, {"ENGRAIN_MAX_TEXT_CHARS": "-1"}, "refused"),
    ("env config missing", None, {"ENGRAIN_CONFIG": "{d}/nope.toml"}, "refused"),
    ("env config dir", None, {"ENGRAIN_CONFIG": "{d}/adir"}, "refused"),
    ("env config bad", None, {"ENGRAIN_CONFIG": "{d}/bad.toml"}, "refused"),
    ("env data_dir file", None, {"ENGRAIN_DATA_DIR": "{d}/junk.db"}, "refused"),
    ("env data_dir with #?%", None, {"ENGRAIN_DATA_DIR": "{d}/a#b?c%d"}, "works"),
    ("env url query", None, {"ENGRAIN_URL": "sqlite:///{d}/store.db?mode=ro"}, "refused"),
    ("env windows", None, {"ENGRAIN_MODEL_WINDOWS": "[1]"}, "refused"),
    ("env spinning", None, {"ENGRAIN_ONNX_SPINNING": "maybe"}, "refused"),
]


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "engrain.cli", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def one_case(
    root: Path, n: int, case: tuple[str, str | None, dict[str, str], str]
) -> dict[str, Any]:
    label, url, extra, expected = case
    d = root / f"case{n}"
    d.mkdir()
    (d / "adir").mkdir()
    (d / "junk.db").write_bytes(os.urandom(5000))
    (d / "bad.toml").write_text("x = [\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env.update(ENGRAIN_EMBEDDER="hash", ENGRAIN_DATA_DIR=str(d / "data"), HOME=str(d))
    env.update({k: v.format(d=d) for k, v in extra.items()})
    seed = run(["--url", f"sqlite:///{d}/store.db", "remember", "the seed memory"], env, d)
    before = {p.relative_to(d).as_posix() for p in d.rglob("*")}
    given = [] if url is None else ["--url", url.format(d=d)]
    wrote = run([*given, "remember", "a memory written by the case"], env, d)
    listed = run([*given, "list"], env, d)
    after = {p.relative_to(d).as_posix() for p in d.rglob("*")}
    created = sorted(p for p in after - before if not p.endswith(("-wal", "-shm")))
    outcome = "works" if wrote.returncode == 0 and listed.returncode == 0 else "refused"
    tracebacks = sum("Traceback" in r.stderr for r in (wrote, listed))
    clean = all(r.returncode == 0 or r.stderr.strip().startswith("error:") for r in (wrote, listed))
    expected_files = {"escaped ?": ["odd?name.db"], "env data_dir with #?%": None}
    allowed = expected_files.get(label, [])
    files_ok = allowed is None or created == allowed or (outcome == "works" and created == [])
    seed_seen = "the seed memory" in listed.stdout
    ok = outcome == expected and tracebacks == 0 and clean and files_ok
    if label in ("plain file", "dot dot"):
        ok = ok and seed_seen  # the store the URL names, not a new one
    return {"case": label, "expected": expected, "outcome": outcome, "ok": ok,
            "seed_ok": seed.returncode == 0, "created": created, "tracebacks": tracebacks,
            "message": (wrote.stderr.strip().splitlines() or [""])[-1][:200]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="h7-urls-") as tmp:
        results = [one_case(Path(tmp), n, case) for n, case in enumerate(CASES)]
    broken = [r["case"] for r in results if not r["ok"]]
    summary = {"attack": "store_urls", "cases": len(results), "broken": broken,
               "results": results, "ok": not broken}  # fmt: skip
    finish(summary, args.json)


if __name__ == "__main__":
    main()
