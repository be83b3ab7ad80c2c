"""Each method of SQLiteStore, PostgresStore and MemoryStore in one tree against another: the
same source text (docstrings and comments aside) but for the helpers session 24 (h5) moved
and renamed, or not; and each helper moved against where it was. Run:
``python scripts/same_methods.py /tmp/s24-base/src src``."""

import difflib
import json
import re
import subprocess
import sys
import textwrap

CODE = r"""
import inspect, json, sys
from engrain.store.sqlite import SQLiteStore
from engrain.store.memory import MemoryStore
from engrain.store.postgres import PostgresStore
out = {}
for cls in (SQLiteStore, MemoryStore, PostgresStore):
    for name in dir(cls):
        if name.startswith("__") and name != "__init__":
            continue
        value = inspect.getattr_static(cls, name)
        fn = getattr(value, "__func__", value)
        if isinstance(value, property): fn = value.fget
        try:
            src = inspect.getsource(fn)
        except (TypeError, OSError):
            continue
        out[f"{cls.__name__}.{name}"] = src
json.dump(out, sys.stdout)
"""


def methods(src):
    return json.loads(
        subprocess.run(
            [sys.executable, "-c", CODE],
            env={"PYTHONPATH": src, "PATH": "/usr/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


RENAMES = [
    (r"\b_check_claims\(", "sqlite_writes.check_claims("),
    (r"\bself\._patch\(", "sqlite_writes.apply_patches("),
    (r"\b_write_state\(", "sqlite_writes.write_state("),
    (r"(?<![.\w])_to_row\b", "sqlite_rows.to_row"),
    (r"(?<![.\w])_from_row\b", "sqlite_rows.from_row"),
    (r"(?<![.\w])_dt\b", "dt"),
    (r"\b_ROW_COLUMNS\b", "ROW_COLUMNS"),
    (r"\b_key_row\(", "key_row("),
    (r"\b_key_from_row\b", "key_from_row"),
    (r"\b_SELECT_KEYS\b", "SELECT_KEYS"),
    (r"\b_reason\(", "reason("),
    (r"\b_IN_CHUNK\b", "IN_CHUNK"),
    (r"\bMIGRATIONS\b(?=, str\(self\.path\))", "sqlite_schema.MIGRATIONS"),
    (r"\bself\.get\(user_id, lost\)", "sqlite_rows.by_ids(self._read, user_id, lost)"),
    (r"\b_Listing\b", "Listing"),
    (r"(?<![.\w])_SELECT\b", "SELECT"),
    (r"(?<![.\w])_parse\(", "parse("),
]


def norm(s, renames):
    s = re.sub(r'"""[\s\S]*?"""', "", textwrap.dedent(s))  # docstrings aside
    s = re.sub(r"#[^\n]*", "", s)  # and comments
    if renames:
        for a, b in RENAMES:
            s = re.sub(a, b, s)
    return re.sub(r"\s+", " ", s).strip()


a, b = methods(sys.argv[1]), methods(sys.argv[2])
same = [k for k in a if k in b and norm(a[k], True) == norm(b[k], False)]
differ = [k for k in a if k in b and k not in same]
print(
    json.dumps(
        {
            "methods": len(a),
            "same": len(same),
            "differ": differ,
            "only_before": sorted(set(a) - set(b)),
            "only_after": sorted(set(b) - set(a)),
        },
        indent=1,
    )
)
for k in differ:
    pass
    print(
        "\n".join(
            difflib.unified_diff(
                textwrap.dedent(a[k]).splitlines(),
                textwrap.dedent(b[k]).splitlines(),
                k + " before",
                k + " after",
                lineterm="",
                n=1,
            )
        )
    )

PAIRS = [
    ("engrain.store.sqlite", "_check_claims", "engrain.store.sqlite_writes", "check_claims"),
    ("engrain.store.sqlite", "_resolved", "engrain.store.sqlite_writes", "_resolved"),
    ("engrain.store.sqlite", "_write_state", "engrain.store.sqlite_writes", "write_state"),
    ("engrain.store.sqlite", "SQLiteStore._patch", "engrain.store.sqlite_writes", "apply_patches"),
    ("engrain.store.sqlite", "_to_row", "engrain.store.sqlite_rows", "to_row"),
    ("engrain.store.sqlite", "_from_row", "engrain.store.sqlite_rows", "from_row"),
    ("engrain.store.sqlite", "_key_row", "engrain.store.sqlite_rows", "key_row"),
    ("engrain.store.sqlite", "_key_from_row", "engrain.store.sqlite_rows", "key_from_row"),
    ("engrain.store.sqlite", "_dt", "engrain.store.sqlite_rows", "dt"),
    ("engrain.store.sqlite", "_parse", "engrain.store.sqlite_rows", "parse"),
    ("engrain.store.sqlite", "_reason", "engrain.store.sqlite_connection", "reason"),
    ("engrain.store.sqlite", "ann_threshold", "engrain.store.sqlite", "ann_threshold"),
    (
        "engrain.store.sqlite",
        "_m003_corrections_and_state",
        "engrain.store.sqlite_schema",
        "_m003_corrections_and_state",
    ),
    ("engrain.store.sqlite", "_m004_api_keys", "engrain.store.sqlite_schema", "_m004_api_keys"),
    (
        "engrain.store.sqlite",
        "_m005_derived_indexes",
        "engrain.store.sqlite_schema",
        "_m005_derived_indexes",
    ),
    ("engrain.store.postgres", "ef_for_graph", "engrain.store.postgres.plans", "ef_for_graph"),
    ("engrain.store.postgres", "ef_for_search", "engrain.store.postgres.plans", "ef_for_search"),
    (
        "engrain.store.postgres",
        "learnings_graph",
        "engrain.store.postgres.plans",
        "learnings_graph",
    ),
    ("engrain.store.postgres", "_unit", "engrain.store.postgres.searches", "_unit"),
    (
        "engrain.store.postgres",
        "_Listing.counted",
        "engrain.store.postgres.listings",
        "Listing.counted",
    ),
]
FN = r"""
import importlib, inspect, json, sys
pairs = json.loads(sys.argv[1]); side = int(sys.argv[2]); out = []
for p in pairs:
    mod = importlib.import_module(p[2 * side]); obj = mod
    for part in p[2 * side + 1].split("."): obj = getattr(obj, part)
    out.append(inspect.getsource(obj))
json.dump(out, sys.stdout)
"""


def fns(src, side):
    return json.loads(
        subprocess.run(
            [sys.executable, "-c", FN, json.dumps(PAIRS), str(side)],
            env={"PYTHONPATH": src, "PATH": "/usr/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


fa, fb = fns(sys.argv[1], 0), fns(sys.argv[2], 1)


def body(s):  # the text after the signature's name
    s = norm(s, False)
    return s.split("(", 1)[1]


diff = [
    f"{p[1]} -> {p[3]}"
    for p, x, y in zip(PAIRS, fa, fb, strict=False)
    if norm(body(x), True) != norm(body(y), False)
]
print(json.dumps({"functions": len(PAIRS), "differ": diff}, indent=1))
for p, x, y in zip(PAIRS, fa, fb, strict=False):
    if f"{p[1]} -> {p[3]}" in diff:
        print(
            "\n".join(
                difflib.unified_diff(
                    textwrap.dedent(x).splitlines(),
                    textwrap.dedent(y).splitlines(),
                    p[1],
                    p[3],
                    lineterm="",
                    n=1,
                )
            )
        )
