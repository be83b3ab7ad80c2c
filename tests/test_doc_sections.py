"""The long docs open with what holds now, and their links land: ``docs/scale.md``,
``postgres.md``, ``decisions.md``, ``ingest.md`` and ``classification.md`` each start with a
``## Now`` section (settings, current numbers, what is not met, an index of the sections
below) before the ``## Log`` of the sessions; every ``](#anchor)`` in ``docs/`` and the
README names a heading (GitHub's slug) or an ``<a id>`` of its file, every relative
``](path)`` exists; ``decisions.md``'s index links each of its lines to a row of the long
table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WITH_NOW = ("scale.md", "postgres.md", "decisions.md", "ingest.md", "classification.md")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, backticks and punctuation dropped (letters,
    digits, ``-`` and ``_`` kept), each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", "").strip().lower())
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a Markdown text: its headings' slugs (a repeated one gets ``-1``,
    ``-2`` …) and its ``<a id>`` / ``<a name>`` tags."""
    found, seen = set(), dict[str, int]()
    for line in FENCE.sub("", text).splitlines():
        found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
        heading = re.match(r"^#{1,6} +(.*?) *#*$", line)
        if heading:
            name = slug(heading.group(1))
            count = seen.get(name, 0)
            found.add(name if count == 0 else f"{name}-{count}")
            seen[name] = count + 1
    return found


def headings(text: str, level: int) -> list[str]:
    return re.findall(rf"^{'#' * level} (.+)$", FENCE.sub("", text), re.M)


@pytest.mark.parametrize("name", WITH_NOW)
def test_a_long_doc_opens_with_now_and_keeps_its_sessions_under_log(name: str) -> None:
    text = (DOCS / name).read_text()
    top = headings(text, 2)
    assert top[0] == "Now", f"{name}: the first section is {top[0]!r}"
    assert "Log" in top, f"{name}: no Log section"
    now = text.split("\n## Now\n", 1)[1].split("\n## ", 1)[0]
    assert "### Index of the" in now, f"{name}: Now has no index of the sections below"
    assert re.search(r"^\| .*default", now, re.M), f"{name}: Now has no settings table"
    known = anchors(text)
    for target in re.findall(r"\]\(#([^)]+)\)", now.split("### Index of the", 1)[1]):
        assert target in known, f"{name}: the index links to a missing #{target}"


def test_every_link_in_the_docs_and_the_readme_lands() -> None:
    broken, known = [], dict[Path, set[str]]()
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", text)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md":
                if dest not in known:
                    known[dest] = anchors(dest.read_text())
                if anchor not in known[dest]:
                    broken.append(f"{page.name}: {target} (no such anchor)")
    assert broken == []


def test_the_decisions_index_links_each_line_to_a_row_of_the_table() -> None:
    text = (DOCS / "decisions.md").read_text()
    index = text.split("### Index of the decisions", 1)[1].split("\n## ", 1)[0]
    table = text.split("\n## The decisions, one row each\n", 1)[1].split("\n## ", 1)[0]
    row_ids = re.findall(r'^\| <a id="([^"]+)"></a>', table, re.M)
    lines = re.findall(r"^\| \[(\d+)\]\(#([^)]+)\) \|", index, re.M)
    assert len(lines) >= 250 and len(set(row_ids)) == len(row_ids)
    assert [int(n) for n, _ in lines] == list(range(1, len(lines) + 1))
    assert [target for _, target in lines] == row_ids[: len(lines)]
