"""engrain in one screen: teach the engine about one user, then see what it injects.

``make demo`` (or ``python examples/demo.py``) opens an engine on a fresh SQLite file in
``examples/.demo/``, loads ``examples/memories.jsonl`` — about forty things Ada, a backend
engineer building an invoicing SaaS, has taught her assistant, plus two short
conversations — and prints, for three new messages, the ``<memory>`` block engrain would put
in the prompt, its size in tokens and the time it took.

Every date is explicit (``now=``, ``event_at=``), so the output is the same on every run
except the timings. Standard library plus engrain only.

The JSONL file holds one record per line:

* ``{"type": "remember", "content": …, "kind": …, "domains": […], "at": …, "event_at": …,
  "key": …, "project": …, "pinned": …}`` → ``Engine.remember`` (``at`` is when it was
  learned, passed as ``now=``);
* ``{"type": "conversation", "session_id": …, "at": …, "turns": [{"speaker", "text",
  "turn_id", "at"}, …]}`` → ``Engine.ingest_conversation``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engrain import Context, Engine, EngrainError, Settings

HERE = Path(__file__).resolve().parent
USER = "ada"
PROJECT = "ledgerline"
#: The demo's "today": every recall is computed as of this moment.
NOW = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)

#: Three messages Ada might send next: a debugging question, a question about a past
#: decision, and a request whose answer should follow her preferences.
MESSAGES: Sequence[tuple[str, str]] = (
    (
        "Debugging",
        "Invoice finalization is failing with lock timeouts for Halden again. Where should I look?",
    ),
    (
        "Past decision",
        "What did we decide about counting usage for the usage-based billing plan?",
    ),
    (
        "Generation",
        "Write a service function that applies a late fee to an overdue invoice, with tests.",
    ),
)


@dataclass
class LoadSummary:
    """What loading the example file did."""

    records: int = 0
    conversations: int = 0
    stored: int = 0
    merged: int = 0
    discarded: int = 0
    seconds: float = 0.0


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping blank lines."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"{path}:{number}: not JSON: {exc}") from exc


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def load(engine: Engine, records: Iterator[Mapping[str, Any]], user_id: str) -> LoadSummary:
    """Feed every record to ``remember`` or ``ingest_conversation``."""
    summary = LoadSummary()
    start = time.perf_counter()
    for record in records:
        summary.records += 1
        now = _when(record.get("at")) or NOW
        project = record.get("project", PROJECT)
        if record.get("type") == "conversation":
            summary.conversations += 1
            report = engine.ingest_conversation(
                record["turns"],
                user_id,
                record.get("session_id"),
                project=project,
                domains=record.get("domains"),
                now=now,
            )
            summary.stored += len(report.stored)
            summary.merged += len(report.merged)
            summary.discarded += len(report.discarded)
        else:
            outcome = engine.remember(
                record["content"],
                user_id,
                record.get("kind", "fact"),
                project=project,
                domains=record.get("domains"),
                key=record.get("key"),
                pinned=bool(record.get("pinned", False)),
                session_id=record.get("session_id"),
                event_at=_when(record.get("event_at")),
                now=now,
            )
            if outcome.action == "merged":
                summary.merged += 1
            else:
                summary.stored += 1
    summary.seconds = time.perf_counter() - start
    return summary


class Style:
    """ANSI styling when writing to a terminal that wants it (``NO_COLOR`` is honoured)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def accent(self, text: str) -> str:
        return self._wrap("36", text)

    def tag(self, text: str) -> str:
        return self._wrap("33", text)


def render_block(text: str, width: int, style: Style) -> list[str]:
    """The context block, wrapped to ``width`` with hanging indents under each ``[TYPE]``."""
    if not text:
        return [style.dim("  (nothing worth injecting)")]
    out: list[str] = []
    hang = 0  # continuation lines (a conversation chunk's later turns) align with the text
    for line in text.splitlines():
        if (line.startswith("<") and line.endswith(">")) or line.startswith("#"):
            out.append("  " + style.dim(line))
            hang = 0
            continue
        tag, sep, rest = line.partition("] ")
        head = ""
        if line.startswith("[") and sep:
            head, hang = tag + sep, len(tag + sep)
        else:
            rest = line
        wrapped = textwrap.wrap(rest, width=max(width - 2 - hang, 30), break_on_hyphens=False) or [
            ""
        ]
        first = style.tag(head) + wrapped[0] if head else " " * hang + wrapped[0]
        out.append("  " + first)
        out.extend("  " + " " * hang + part for part in wrapped[1:])
    return out


def show(title: str, message: str, context: Context, number: int, width: int, style: Style) -> None:
    """One message: its heading, the block, and the numbers under it."""
    heading = f"━━ {number}. {title} "
    print(style.bold(style.accent(heading + "━" * max(width - len(heading), 3))))
    for i, part in enumerate(textwrap.wrap(message, width=width - 2)):
        print(style.bold(("› " if i == 0 else "  ") + part))
    print()
    for line in render_block(context.text, width, style):
        print(line)
    print()
    stats = (
        f"{len(context.memories)} memories · {context.tokens} tokens · {context.elapsed_ms:.1f} ms"
    )
    gated = getattr(context, "gated", None)  # the relevance gate's verdict, when present
    if context.tier != 3:
        stats += f" · tier {context.tier}, pre-compiled"
    elif gated is not None:
        intent = gated.classification.intent
        stats += f" · intent {getattr(intent, 'value', intent)} · budget {gated.budget.tokens}"
    print("  " + style.dim(stats))
    print()


def fresh_directory(path: Path) -> Path:
    """``path`` emptied of a previous run's database (and its WAL files)."""
    path.mkdir(parents=True, exist_ok=True)
    for leftover in path.glob("engrain.db*"):
        leftover.unlink()
    return path / "engrain.db"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=HERE / "memories.jsonl",
        help="the JSONL file to load (default: examples/memories.jsonl)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=HERE / ".demo",
        help="where the SQLite file goes; recreated each run",
    )
    parser.add_argument(
        "--message",
        "-m",
        action="append",
        default=[],
        help="ask this instead of the three built-in messages (repeatable)",
    )
    parser.add_argument("--no-color", action="store_true", help="plain text output")
    args = parser.parse_args(argv)

    style = Style(sys.stdout.isatty() and not args.no_color and "NO_COLOR" not in os.environ)
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    messages = [("Your message", m) for m in args.message] or list(MESSAGES)

    db = fresh_directory(args.dir)
    try:
        start = time.perf_counter()
        # Settings built directly, not from the environment: the demo ignores ENGRAIN_*.
        engine = Engine(settings=Settings(url=f"sqlite:///{db}", data_dir=args.dir))
        engine.embedder.embed_query("warm up")  # first ONNX run allocates; keep it untimed
        opened = time.perf_counter() - start
        with engine:
            summary = load(engine, read_records(args.data), USER)
            try:
                shown_db = db.relative_to(Path.cwd())
            except ValueError:
                shown_db = db
            print()
            print(
                style.bold("engrain demo")
                + style.dim(f" · user {USER} · project {PROJECT} · as of {NOW:%Y-%m-%d %H:%M} UTC")
            )
            print(
                style.dim(
                    f"  model loaded in {opened:.1f} s; {summary.records} records "
                    f"({summary.conversations} conversations) → {summary.stored} stored, "
                    f"{summary.merged} merged, {summary.discarded} discarded in "
                    f"{summary.seconds:.1f} s; store {shown_db}"
                )
            )
            print()
            for number, (title, message) in enumerate(messages, 1):
                context = engine.context(message, USER, now=NOW)
                show(title, message, context, number, width, style)
            # a small local model gets the pre-compiled DNA summary instead (tier 1)
            engine.tiers(USER, PROJECT, now=NOW)
            title, message = messages[0]
            small = engine.context(message, USER, project=PROJECT, model="llama3.1:8b", now=NOW)
            show(f"{title}, for llama3.1:8b (8K window: tier 1)", message, small,
                 len(messages) + 1, width, style)  # fmt: skip
    except EngrainError as exc:
        print(f"engrain: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
