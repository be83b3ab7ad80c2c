"""Where two JSON reports of the same benchmark differ, every value compared.

For a change that must not change behaviour: ``bench/gating.py`` run on the tree before
and on the tree after gives two reports that must be equal but for when, where and how
long they ran. Every value is compared, the per-message rows included (each message's
injected, missed and leaked memories, its tokens, budget and classification), not just
the means; the keys of :data:`VOLATILE` (the machine, the source path, the seconds, the
note) are left out wherever they stand.

Usage: ``python bench/report_diff.py BEFORE.json AFTER.json [--out diff.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json

#: Keys whose values say how a run went, not what it measured.
VOLATILE = frozenset({"machine", "engrain_source", "seconds", "note"})


def differences(before: Any, after: Any, path: str = "") -> tuple[int, list[str]]:
    """The values compared (leaves) and the paths where ``before`` and ``after`` differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        compared, differ = 0, []
        for key in sorted(set(before) | set(after)):
            if key in VOLATILE:
                continue
            if key not in before or key not in after:
                compared, differ = compared + 1, [*differ, f"{path}/{key}"]
                continue
            n, d = differences(before[key], after[key], f"{path}/{key}")
            compared, differ = compared + n, differ + d
        return compared, differ
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        compared, differ = 0, []
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            n, d = differences(b, a, f"{path}[{i}]")
            compared, differ = compared + n, differ + d
        return compared, differ
    return 1, [] if before == after else [path or "/"]


def messages(report: Any) -> int:
    """The per-message rows of a gating report (every profile, the main set and the
    others), 0 for a report without them."""
    rows = 0
    for part in [report, *(report.get("sets", {}) or {}).values()]:
        for profile in (part.get("profiles", {}) or {}).values():
            rows += len(profile.get("messages", []))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Compare, print the count and the first differing paths, write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="write the comparison here as JSON")
    args = parser.parse_args(argv)
    before = json.loads(args.before.read_text("utf-8"))
    after = json.loads(args.after.read_text("utf-8"))
    compared, differ = differences(before, after)
    report = {
        "before": str(args.before), "after": str(args.after),
        "values_compared": compared, "values_differing": len(differ),
        "message_rows": [messages(before), messages(after)], "first_differing": differ[:20],
        "ignored_keys": sorted(VOLATILE),
    }  # fmt: skip
    print(json.dumps(report, indent=2))
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
