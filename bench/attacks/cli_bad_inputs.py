"""Every ``engrain`` command with bad arguments and bad files (missing, a directory, not
JSON, not UTF-8, a line of the wrong shape in the middle of an import, nesting and numbers
past the JSON parser's limits), each as its own process on one SQLite file with the hash
embedder. A refusal must be one line on stderr, exit 1, 2 or 3 (the README's table), no
traceback, and leave every row of the file as it was; a call may also succeed.

    PYTHONPATH=src .venv/bin/python bench/attacks/cli_bad_inputs.py [SRC] [--json OUT]

``SRC`` is the tree whose ``engrain`` runs (default ``src``). Exits 1 when any case broke
a rule (session 24, h3)."""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

args = sys.argv[1:]
OUT = args[args.index("--json") + 1] if "--json" in args else None
SRC = str(Path(next((a for a in args if a != "--json" and a != OUT), "src")).resolve())
tmp = Path(tempfile.mkdtemp(prefix="h3-cli-"))
db = tmp / "x.db"
env = {
    **os.environ,
    "ENGRAIN_EMBEDDER": "hash",
    "ENGRAIN_DATA_DIR": str(tmp / "data"),
    "PYTHONPATH": SRC,
    "ENGRAIN_URL": f"sqlite:///{db}",
    "ENGRAIN_USER": "ada",
}
env.pop("ENGRAIN_CONFIG", None)


def run(*args, input=None):
    return subprocess.run(
        [sys.executable, "-m", "engrain.cli", *args],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
    )


def digest():
    con = sqlite3.connect(db)
    rows = []
    for (name,) in con.execute(
        "select name from sqlite_master where type='table' and name not like 'sqlite_%'"
    ):
        rows.append((name, sorted(map(repr, con.execute(f'select * from "{name}"').fetchall()))))
    con.close()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


r = run("remember", "Ada deploys with Kubernetes on Fridays")
assert r.returncode == 0, r.stderr
mid = r.stdout.split()[-1]
run("--json", "context", "how do I deploy?")
good = tmp / "good.jsonl"
good.write_text(json.dumps({"type": "text", "text": "Bob likes tea"}) + "\n")
notjson = tmp / "notjson.jsonl"
notjson.write_text("this is not json\n")
middle = tmp / "middle.jsonl"
middle.write_text(
    json.dumps({"type": "text", "text": "first fine record"})
    + "\n"
    + json.dumps({"type": "text", "txt": "wrong shape"})
    + "\n"
    + json.dumps({"type": "text", "text": "third"})
    + "\n"
)
listline = tmp / "list.jsonl"
listline.write_text(json.dumps({"type": "text", "text": "ok"}) + "\n[1,2,3]\n")
unread = tmp / "unread.jsonl"
unread.write_text(good.read_text())
unread.chmod(0)
adir = tmp / "adir"
adir.mkdir()
empty = tmp / "empty.jsonl"
empty.write_text("")
binf = tmp / "bin.jsonl"
binf.write_bytes(b"\xff\xfe\x00\x01")
nulline = tmp / "nul.jsonl"
nulline.write_text('{"type": "text", "text": "a\\u0000"}\n')
numline = tmp / "num.jsonl"
numline.write_text('{"type": "remember", "content": "x fact", "importance": 1e999}\n')
typ = tmp / "typ.jsonl"
typ.write_text('{"type": "bogus"}\n')
deep = tmp / "deep.jsonl"
deep.write_text("[" * 100000 + "]" * 100000 + "\n")
huge = tmp / "hugeint.jsonl"
huge.write_text('{"type": "remember", "content": "x fact", "access_count": ' + "9" * 5000 + "}\n")
cfgbad = tmp / "bad.toml"
cfgbad.write_text("url = [")

CASES = [
    ["remember"],
    ["remember", ""],
    ["remember", "   "],
    ["remember", "x", "--kind", "bogus"],
    ["remember", "x", "--domain", "d" * 300],
    ["remember", "a\x01\x02"],
    ["ingest", ""],
    ["ingest", "x", "--session", ""],
    ["ingest", "-"],
    ["recall", ""],
    ["recall", "x", "--top-k", "-1"],
    ["recall", "x", "--top-k", "0"],
    ["recall", "x", "--top-k", "abc"],
    ["recall", "x", "--top-k", str(2**40)],
    ["recall", "x", "--budget", "-5"],
    ["recall", "x", "--budget", "nan"],
    ["context", ""],
    ["context", "x", "--budget", "-1"],
    ["context", "x", "--model", "no-such-model"],
    ["context", "x", "--window", "0"],
    ["context", "x", "--window", "-3"],
    ["context", "x", "--model", "gpt-4o", "--window", "8000"],
    ["context", "x", "--previous", ""],
    ["tiers", "show", "--tier", "3"],
    ["tiers", "show", "--tier", "x"],
    ["tiers", "bogus"],
    ["feedback", "nosuch", "--helpful"],
    ["feedback", "nosuch"],
    ["feedback", "nosuch", "--score", "2"],
    ["feedback", "nosuch", "--score", "nan"],
    ["feedback", "nosuch", "--score", "inf"],
    ["feedback", "nosuch", "--helpful", "--unhelpful"],
    ["feedback", "nosuch", "--helpful", "--score", "0.5"],
    ["compress", "--force", "--bogus"],
    ["explain", ""],
    ["list", "--limit", "-1"],
    ["list", "--limit", "x"],
    ["list", "--kind", "bogus"],
    ["list", "--type", "bogus"],
    ["get"],
    ["get", "nosuch"],
    ["get", ""],
    ["forget"],
    ["forget", "nosuch"],
    ["forget", ""],
    ["pin", "nosuch"],
    ["pin", ""],
    ["mute", "nosuch", "--off"],
    ["import"],
    ["import", str(tmp / "missing.jsonl")],
    ["import", str(notjson)],
    ["import", str(middle)],
    ["import", str(listline)],
    ["import", str(unread)],
    ["import", str(adir)],
    ["import", str(binf)],
    ["import", str(nulline)],
    ["import", str(numline)],
    ["import", str(typ)],
    ["import", str(deep)],
    ["import", str(huge)],
    ["import", str(empty)],
    ["export", str(tmp / "nodir" / "x.jsonl")],
    ["export", str(adir)],
    ["export", "--user", ""],
    ["export", "/proc/version"],
    ["migrate", "--from", "bogus://x"],
    ["migrate", "--from", str(tmp / "missing.db")],
    ["migrate", "--from", "sqlite:///" + str(notjson)],
    ["keys", "create"],
    ["keys", "create", "--user", ""],
    ["keys", "create", "--admin", "--user", "x"],
    ["keys", "revoke", "nosuch"],
    ["keys", "revoke"],
    ["keys", "bogus"],
    ["serve", "--port", "99999"],
    ["serve", "--port", "x"],
    ["serve", "--workers", "0"],
    ["serve", "--upstream", "ftp://x"],
    ["serve", "--upstream", "not a url"],
    ["serve", "--host", "256.1.1.1"],
    ["bogus"],
    ["--url", "bogus://x", "list"],
    ["--url", "sqlite:///" + str(adir), "list"],
    ["--url", "sqlite:///" + str(notjson), "list"],
    ["--url", "postgresql://nouser@127.0.0.1:1/x", "list"],
    ["--user", "", "list"],
    ["--user", "a\tb", "list"],
    ["--data-dir", str(notjson), "list"],
    ["--json", "get", "nosuch"],
    ["--json", "recall", "x", "--top-k", "-1"],
    ["mcp"],
]
bad = 0
results = []
for args in CASES:
    before = digest()
    r = run(*args, input="")
    after = digest()
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    problems = []
    if "Traceback" in r.stderr:
        problems.append("traceback")
    if r.returncode != 0:
        if r.returncode not in (1, 2, 3):
            problems.append(f"exit {r.returncode}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines")
        if before != after:
            problems.append("WROTE")
    results.append(
        {"args": args, "exit": r.returncode, "stderr": r.stderr[-600:], "problems": problems}
    )
    if problems:
        bad += 1
    shown = [a if len(a) < 40 else a[:37] + "..." for a in args]
    print(
        ("BAD " if problems else "ok  ") + " ".join(map(repr, shown)),
        r.returncode,
        problems,
        "|",
        (lines[-1] if lines else "")[:160],
    )
unread.chmod(0o600)
print("bad", bad, "of", len(CASES))
if OUT:
    Path(OUT).write_text(
        json.dumps({"src": SRC, "cases": len(CASES), "broken": bad, "results": results}, indent=1)
    )
sys.exit(1 if bad else 0)
