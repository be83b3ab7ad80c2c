"""Check that rewriting the README lost no measurement: every number-bearing sentence (and
table row) of the README at a past revision is still in the README or in a page of
``docs/`` (whitespace aside). Prints the counts and each missing sentence; exits 1 if any.

    python scripts/readme_moved.py 48aece4      # the README before session 18's restructure
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def sentences(markdown: str) -> list[str]:
    """A table's rows one by one; a paragraph cut after ``.``, ``:`` or ``;`` where the next
    word starts a sentence (a capital, a code span, a parenthesis, emphasis)."""
    found: list[str] = []
    for paragraph in re.split(r"\n\s*\n", markdown):
        if paragraph.startswith("|"):
            found += paragraph.split("\n")
        else:
            found += re.split(r"(?<=[.:;])\s+(?=[A-Z`(*])", normalise(paragraph))
    return [normalise(s) for s in found if re.search(r"\d", s)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the git revision whose README is the reference")
    args = parser.parse_args()
    before = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.revision}:README.md"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    readme = normalise((ROOT / "README.md").read_text())
    docs = normalise(" ".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))))
    kept = [s for s in sentences(before) if s in readme]
    moved = [s for s in sentences(before) if s not in readme and s in docs]
    missing = [s for s in sentences(before) if s not in readme and s not in docs]
    print(
        f"number-bearing sentences of README.md at {args.revision}: {len(kept)} still in the "
        f"README, {len(moved)} in docs/, {len(missing)} missing"
    )
    for sentence in missing:
        print(f"missing: {sentence}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
