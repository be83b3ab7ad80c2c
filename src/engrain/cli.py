"""The ``engrain`` command line: a thin shell over :class:`engrain.Engine`.

Each command opens the engine, makes one library call and prints the result as text, or as
JSON lines with ``--json`` (one object per line on stdout). An :class:`EngrainError` becomes
``error: <message>`` on stderr (its ``to_dict()`` as JSON with ``--json``) and an exit code:
1 for bad input or an unknown id (HTTP 4xx), 3 for store, config or model failures (5xx);
click's own usage errors exit with 2.

The CLI is an extra (``pip install 'engrain[cli]'``): without click, :func:`main` prints the
install command and exits with 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from engrain.config import load_settings
from engrain.engine import Engine
from engrain.errors import EngrainError, ValidationError
from engrain.model import Memory, Outcome, ScoredMemory
from engrain.store import open_store
from engrain.store.transfer import copy_store
from engrain.tiers import Tier

try:
    import click
except ModuleNotFoundError:  # the 'cli' extra is missing: only main() exists, to say so
    click = None  # type: ignore[assignment]

INSTALL_HINT = "the engrain CLI needs the 'cli' extra: pip install 'engrain[cli]'"


def main() -> None:
    """Entry point of the ``engrain`` script."""
    if click is None:
        sys.exit(INSTALL_HINT)
    cli(prog_name="engrain")


def exit_code(error: EngrainError) -> int:
    """1 for the caller's mistakes (4xx), 3 for failures of the store, config or model (5xx)."""
    return 1 if error.http_status < 500 else 3


# -- formatting (plain functions, no click) ---------------------------------------------------


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _memory_line(memory: Memory) -> str:
    flags = "".join(
        f" [{name}]" for name, on in (("pinned", memory.pinned), ("muted", memory.muted)) if on
    )
    label = f"{memory.memory_type.value}/{memory.kind.value}"
    return f"{memory.id}  {label:<22}{flags}  {_one_line(memory.content)}"


def _memory_block(memory: Memory) -> str:
    lines = []
    for name, value in memory.to_dict().items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value
        lines.append(f"{name}: {'' if value is None else shown}")
    return "\n".join(lines)


def _outcome_line(outcome: Outcome) -> str:
    if outcome.action == "discarded":
        return f"discarded  {outcome.reason}: {_one_line(outcome.content, 60)}"
    mtype = outcome.memory_type.value if outcome.memory_type else "-"
    preview = _one_line(outcome.content, 60)
    return f"{outcome.action:<9}  {outcome.memory_id}  {mtype:<10}  {preview}"


def _scored_dict(scored: ScoredMemory) -> dict[str, Any]:
    return {
        **scored.memory.to_dict(),
        "score": scored.score,
        "similarity": scored.similarity,
        "tokens": scored.tokens,
    }


def _scored_line(scored: ScoredMemory) -> str:
    memory = scored.memory
    return (
        f"{scored.score:6.3f}  sim {scored.similarity:6.3f}  {scored.tokens:>4} tok  "
        f"{memory.id}  [{memory.memory_type.value.upper()}] {_one_line(memory.content, 70)}"
    )


def _read_jsonl(stream: IO[str], user_id: str) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every non-blank line; a record without ``user_id`` gets
    ``user_id``. All lines are parsed before anything is written."""
    records = []
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {number}: invalid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise ValidationError(f"line {number}: expected a JSON object")
        record.setdefault("user_id", user_id)
        records.append((number, record))
    return records


class _LineTracker:
    """Feeds records to ``Engine.import_records`` while remembering the current line, so an
    error about "record N" can name the line of the file instead."""

    def __init__(self, numbered: list[tuple[int, dict[str, Any]]]) -> None:
        self.numbered = numbered
        self.count = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for _, record in self.numbered:
            self.count += 1
            yield record

    def relabel(self, error: ValidationError) -> ValidationError:
        prefix = f"record {self.count}: "
        if not self.count or not error.message.startswith(prefix):
            return error
        line = self.numbered[self.count - 1][0]
        return type(error)(f"line {line}: {error.message.removeprefix(prefix)}")


if click is not None:

    class _Group(click.Group):
        """Turns every :class:`EngrainError` into a clean message and exit code."""

        def invoke(self, ctx: click.Context) -> Any:
            try:
                return super().invoke(ctx)
            except EngrainError as error:
                if ctx.params.get("as_json"):
                    click.echo(json.dumps(error.to_dict()), err=True)
                else:
                    click.echo(f"error: {error.message}", err=True)
                ctx.exit(exit_code(error))

    class _State:
        """The global options, and the engine opened from them on first use."""

        def __init__(self, url: str | None, data_dir: str | None, as_json: bool, user: str) -> None:
            self.url, self.data_dir, self.as_json, self.user = url, data_dir, as_json, user

        def engine(self) -> Engine:
            settings = load_settings({"url": self.url, "data_dir": self.data_dir})
            return click.get_current_context().with_resource(Engine(settings=settings))

        def emit(self, rows: Iterable[Any], text: Callable[[Any], str]) -> None:
            """Each row as a line of text, or with ``--json`` as a JSON object."""
            for row in rows:
                if self.as_json:
                    click.echo(json.dumps(_jsonable(row), ensure_ascii=False))
                else:
                    click.echo(text(row))

    def _jsonable(row: Any) -> Any:
        if isinstance(row, ScoredMemory):
            return _scored_dict(row)
        return row.to_dict() if hasattr(row, "to_dict") else row

    pass_state = click.make_pass_decorator(_State)

    @click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
    @click.option(
        "--url",
        help="Store URL (sqlite:///path, postgresql://…, memory://); default "
        "from settings (ENGRAIN_URL, else engrain.db in the data directory).",
    )
    @click.option("--data-dir", type=click.Path(file_okay=False), help="Data directory.")
    @click.option("--json", "as_json", is_flag=True, help="Output JSON, one object per line.")
    @click.option(
        "--user",
        "-u",
        envvar="ENGRAIN_USER",
        default="default",
        show_default=True,
        help="User id (or ENGRAIN_USER).",
    )
    @click.version_option(package_name="engrain")
    @click.pass_context
    def cli(
        ctx: click.Context, url: str | None, data_dir: str | None, as_json: bool, user: str
    ) -> None:
        """engrain: long-term memory for LLM applications."""
        ctx.obj = _State(url, data_dir, as_json, user)

    @cli.command()
    @click.argument("text")
    @click.option(
        "--kind",
        "-k",
        default="fact",
        show_default=True,
        help="preference, fact, decision, invariant, pattern, correction, …",
    )
    @click.option("--type", "-t", "memory_type", help="Memory type (default: from the kind).")
    @click.option("--project", "-p", help="Project the memory belongs to.")
    @click.option("--domain", "-d", "domains", multiple=True, help="Domain tag (repeatable).")
    @click.option("--key", help="Key of a procedural memory (default: derived from the text).")
    @click.option("--pin", is_flag=True, help="Pin it: injected whenever the budget allows.")
    @click.option("--corrects", help="With --kind correction: the id of the memory it corrects.")
    @pass_state
    def remember(
        state: _State,
        text: str,
        kind: str,
        memory_type: str | None,
        project: str | None,
        domains: tuple[str, ...],
        key: str | None,
        pin: bool,
        corrects: str | None,
    ) -> None:
        """Store TEXT as one memory.

        No chunking and no importance filter: TEXT is kept as given, unless it nearly
        duplicates a recent memory of the same type, which is then updated instead. A
        correction supersedes the memory it corrects (--corrects ID, else the closest one);
        a memory that disagrees with a close one is stored and both are flagged."""
        outcome = state.engine().remember(
            text,
            state.user,
            kind,
            memory_type=memory_type,
            project=project,
            domains=domains,
            key=key,
            pinned=pin,
            corrects=corrects,
        )
        state.emit(
            [outcome],
            lambda o: f"{o.action} {o.memory_id}" + (f" ({o.reason})" if o.reason else ""),
        )

    @cli.command()
    @click.argument("text", default="-")
    @click.option("--session", "-s", help="Session id.")
    @click.option("--type", "-t", "memory_type", help="Memory type hint for every chunk.")
    @click.option("--project", "-p", help="Project the memories belong to.")
    @pass_state
    def ingest(
        state: _State, text: str, session: str | None, memory_type: str | None, project: str | None
    ) -> None:
        """Ingest free TEXT, or stdin with -.

        The text is cleaned, chunked, scored and deduplicated; one line per chunk says
        whether it was stored, merged into an existing memory, or discarded (and why)."""
        if text == "-":
            text = sys.stdin.read()
        report = state.engine().ingest(text, state.user, session, memory_type, project=project)
        state.emit(report.outcomes, _outcome_line)

    @cli.command()
    @click.argument("query")
    @click.option("--top-k", "-n", type=int, help="Most memories to return.")
    @click.option("--budget", "-b", type=int, help="Token budget.")
    @click.option(
        "--type", "-t", "memory_types", multiple=True, help="Only this memory type (repeatable)."
    )
    @click.option("--project", "-p", help="Only this project (and memories of no project).")
    @click.option("--include-compressed", is_flag=True, help="Also consider compressed ones.")
    @pass_state
    def recall(
        state: _State,
        query: str,
        top_k: int | None,
        budget: int | None,
        memory_types: tuple[str, ...],
        project: str | None,
        include_compressed: bool,
    ) -> None:
        """The memories to inject for QUERY.

        One line per memory: score, similarity, tokens, id, type and content; a summary
        goes to stderr."""
        result = state.engine().recall(
            query,
            state.user,
            top_k,
            budget,
            memory_types or None,
            project=project,
            include_compressed=include_compressed,
        )
        state.emit(result.scored, _scored_line)
        if not state.as_json:
            click.echo(
                f"{len(result.scored)} memories, {result.total_tokens} tokens "
                f"({result.budget_used:.0%} of budget)",
                err=True,
            )

    @cli.command()
    @click.argument("message")
    @click.option("--top-k", "-n", type=int, help="Most memories to inject.")
    @click.option("--budget", "-b", type=int, help="Token budget.")
    @click.option("--project", "-p", help="Only this project (and memories of no project).")
    @click.option("--model", "-m", help="Target model: its context window picks the tier.")
    @click.option("--window", type=int, help="Target model's context window, in tokens.")
    @pass_state
    def context(
        state: _State,
        message: str,
        top_k: int | None,
        budget: int | None,
        project: str | None,
        model: str | None,
        window: int | None,
    ) -> None:
        """The <memory> block for MESSAGE, ready for a prompt.

        With --model or --window, small windows get the compiled tier 1 or 2 (compiled in
        the background on first use; tier 3 answers meanwhile). A summary (tier, memories,
        tokens, milliseconds) goes to stderr; --json prints one object with id, tier,
        fallback, text, tokens, elapsed_ms and the memories."""
        found = state.engine().context(
            message, state.user, top_k=top_k, token_budget=budget, project=project,
            model=model, context_window=window,
        )  # fmt: skip
        if state.as_json:
            state.emit(
                [
                    {
                        "id": found.id,
                        "tier": found.tier,
                        "fallback": found.fallback,
                        "text": found.text,
                        "tokens": found.tokens,
                        "elapsed_ms": found.elapsed_ms,
                        "memories": [_scored_dict(s) for s in found.recall.scored]
                        or [{"id": m.id, "content": m.content} for m in found.memories],
                    }
                ],
                str,
            )
            return
        if found.text:
            click.echo(found.text)
        note = " (tier 3 while tiers compile)" if found.fallback else ""
        click.echo(
            f"tier {found.tier}{note}, {len(found.memories)} memories, {found.tokens} tokens, "
            f"{found.elapsed_ms:.1f} ms",
            err=True,
        )

    @cli.command()
    @click.argument("context_id", required=False)
    @click.option("--helpful/--unhelpful", default=None, help="Did the injected memory help?")
    @click.option("--score", type=float, help="How much it helped, 0 to 1.")
    @click.option("--memory", "-m", "memory_ids", multiple=True, help="A memory id (repeatable).")
    @pass_state
    def feedback(
        state: _State,
        context_id: str | None,
        helpful: bool | None,
        score: float | None,
        memory_ids: tuple[str, ...],
    ) -> None:
        """Tell engrain whether a context (CONTEXT_ID, printed by `context --json`) or some
        memories helped: --helpful, --unhelpful or --score X. Usefulness moves 20% of the
        way to the target; positive feedback on a context teaches co-occurrence."""
        result = state.engine().feedback(
            state.user, context_id, list(memory_ids), helpful=helpful, score=score
        )
        rows = [
            {"memory_id": i, "before": round(b, 6), "after": round(a, 6)}
            for i, (b, a) in result.usefulness.items()
        ]
        state.emit(rows, lambda r: f"{r['memory_id']} usefulness {r['before']:.3f} -> "
                                   f"{r['after']:.3f}")  # fmt: skip
        if not state.as_json and result.pairs_learned:
            click.echo(f"learned {result.pairs_learned} co-occurring pairs", err=True)

    @cli.command()
    @click.option("--force", is_flag=True, help="Compress the oldest sessions even below the "
                  "threshold.")  # fmt: skip
    @pass_state
    def compress(state: _State, force: bool) -> None:
        """Summarise the oldest sessions when there are more than compression_threshold
        (originals are kept, marked compressed, left out of recall)."""
        report = state.engine().compress(state.user, force=force)
        state.emit(
            [dataclasses.asdict(report)],
            lambda r: (
                f"compressed {len(r['sessions'])} sessions ({r['compressed']} memories) "
                f"into {len(r['summaries'])} summaries"
            ),
        )

    @cli.command()
    @click.option("--from", "source_url", metavar="URL",
                  help="Also copy every memory of the store at URL into this one.")  # fmt: skip
    @click.option("--verify", is_flag=True, help="Read each copied batch back and compare it.")
    @pass_state
    def migrate(state: _State, source_url: str | None, verify: bool) -> None:
        """Bring the store at --url to the current schema (named migrations), and with
        --from copy another store into it: how a SQLite file moves to PostgreSQL
        (`engrain --url postgresql://… migrate --from sqlite:////path/engrain.db`). The copy
        is lossless (ids, embeddings, every field) and can be re-run."""
        engine = state.engine()
        store: Any = engine.store
        applied = store.migrate() if hasattr(store, "migrate") else []
        row: dict[str, Any] = {"applied": list(applied)}
        if source_url is not None:
            source = open_store(source_url)
            try:
                row["copied"] = copy_store(
                    source, engine.store, verify=verify,
                    cache_models=[engine.embedder.model_id],
                )  # fmt: skip
            finally:
                source.close()
        state.emit(
            [row],
            lambda r: (f"schema current ({len(r['applied'])} migrations applied now)"
                       + (f"; copied {r['copied']['memories']} memories of "
                          f"{r['copied']['users']} users" if "copied" in r else "")),
        )  # fmt: skip

    @cli.group()
    def tiers() -> None:
        """The pre-compiled tiers for small and medium context windows."""

    @tiers.command(name="show")
    @click.option("--tier", "-t", "which", type=click.Choice(["1", "2"]), help="Only this tier.")
    @click.option("--project", "-p", help="This project's tiers (default: all memories).")
    @pass_state
    def tiers_show(state: _State, which: str | None, project: str | None) -> None:
        """Print tier 1 (DNA summary) and tier 2 (field guide), compiling them first if
        they are missing or stale."""
        compiled = state.engine().tiers(state.user, project)
        wanted = [Tier(int(which))] if which else [Tier.DNA, Tier.FIELD_GUIDE]
        rows = [compiled.tiers[t] for t in wanted]
        if state.as_json:
            when = compiled.compiled_at.isoformat()
            state.emit(
                [{**r.to_dict(), "revision": compiled.revision, "compiled_at": when} for r in rows],
                str,
            )
            return
        for row in rows:
            title = "DNA summary" if row.tier is Tier.DNA else "field guide"
            click.echo(f"# tier {int(row.tier)}: {title} ({row.tokens} tokens, "
                       f"{len(row.memory_ids)} memories, by {row.compiled_by})")  # fmt: skip
            click.echo(row.text or "(nothing to compile)")
            click.echo("")

    @tiers.command(name="rebuild")
    @click.option("--project", "-p", help="This project's tiers (default: all memories).")
    @pass_state
    def tiers_rebuild(state: _State, project: str | None) -> None:
        """Compile tiers 1 and 2 now (promotion, dedup, decay filter, compilers)."""
        compiled = state.engine().tiers(state.user, project, rebuild=True)
        state.emit(
            [{"tier": int(t), "tokens": c.tokens, "memories": len(c.memory_ids),
              **{k: v for k, v in compiled.stats.items()}} for t, c in compiled.tiers.items()],
            lambda r: f"tier {r['tier']}: {r['tokens']} tokens, {r['memories']} memories",
        )  # fmt: skip

    @cli.command()
    @click.argument("message")
    @click.option("--budget", "-b", type=int, help="Token budget (default: automatic).")
    @click.option("--turn", type=int, default=0, help="Position of MESSAGE in its conversation.")
    @click.option("--project", "-p", help="Only this project (and memories of no project).")
    @click.option("--all", "show_all", is_flag=True, help="Also list candidates not selected.")
    @pass_state
    def explain(
        state: _State,
        message: str,
        budget: int | None,
        turn: int,
        project: str | None,
        show_all: bool,
    ) -> None:
        """Why MESSAGE gets the memory it gets: classification, budget and how it was
        derived, and each candidate's score components, selected or why not."""
        gated = state.engine().explain(
            message, state.user, token_budget=budget, turn=turn, project=project
        )
        report = gated.to_dict()
        if state.as_json:
            state.emit([report], str)
            return
        c = report["classification"]
        click.echo(
            f"complexity {c['complexity']}, intent {c['intent']}, domains "
            f"{', '.join(c['domains']) or '-'}, signals {', '.join(c['signals']) or '-'}"
        )
        click.echo(
            f"budget {report['budget']['tokens']} tokens: " + "; ".join(report["budget"]["steps"])
        )
        click.echo("weights " + ", ".join(f"{k} {v:.2f}" for k, v in report["weights"].items()))
        click.echo(
            f"selected {sum(r['selected'] for r in report['candidates'])} memories, "
            f"{report['tokens_used']} tokens"
        )
        for row in report["candidates"]:
            if not (row["selected"] or show_all):
                continue
            mark = "+" if row["selected"] else "-"
            parts = " ".join(f"{k}={v:.3f}" for k, v in row["components"].items() if v)
            click.echo(f"{mark} {row['score']:.3f} {_one_line(row['content'], 60):<60} "
                       f"{row['reason']}; {parts}")  # fmt: skip

    @cli.command(name="list")
    @click.option("--type", "-t", "memory_type", help="Only this memory type.")
    @click.option("--kind", "-k", help="Only this kind.")
    @click.option("--project", "-p", help="Only this project.")
    @click.option("--limit", "-n", type=int, default=100, show_default=True)
    @pass_state
    def list_(
        state: _State, memory_type: str | None, kind: str | None, project: str | None, limit: int
    ) -> None:
        """The user's memories, most recently updated first."""
        memories = state.engine().list(
            state.user, project=project, memory_type=memory_type, kind=kind, limit=limit
        )
        state.emit(memories, _memory_line)

    @cli.command()
    @click.argument("memory_id", metavar="ID")
    @pass_state
    def get(state: _State, memory_id: str) -> None:
        """Every field of the memory ID."""
        state.emit([state.engine().get(memory_id, state.user)], _memory_block)

    @cli.command()
    @click.argument("memory_ids", metavar="ID...", nargs=-1, required=True)
    @pass_state
    def forget(state: _State, memory_ids: tuple[str, ...]) -> None:
        """Delete memories by ID.

        All at once (atomically); says how many of them existed."""
        count = state.engine().forget(memory_ids, state.user)
        state.emit(
            [{"forgotten": count, "requested": len(memory_ids)}],
            lambda r: f"forgot {r['forgotten']} of {r['requested']}",
        )

    @cli.command()
    @click.argument("memory_id", metavar="ID")
    @click.option("--off", is_flag=True, help="Unpin instead.")
    @pass_state
    def pin(state: _State, memory_id: str, off: bool) -> None:
        """Pin the memory ID: injected whenever the budget allows."""
        memory = state.engine().pin(memory_id, state.user, pinned=not off)
        state.emit([memory], lambda m: f"{'pinned' if m.pinned else 'unpinned'} {m.id}")

    @cli.command()
    @click.argument("memory_id", metavar="ID")
    @click.option("--off", is_flag=True, help="Unmute instead.")
    @pass_state
    def mute(state: _State, memory_id: str, off: bool) -> None:
        """Mute the memory ID: never injected."""
        memory = state.engine().mute(memory_id, state.user, muted=not off)
        state.emit([memory], lambda m: f"{'muted' if m.muted else 'unmuted'} {m.id}")

    @cli.command(name="import")
    @click.argument("source", metavar="FILE|-", type=click.File("r", encoding="utf-8"))
    @pass_state
    def import_(state: _State, source: IO[str]) -> None:
        """Load JSONL records from FILE, or stdin with -.

        \b
        Three record types:
          {"type": "memory", ...}   an exported memory, restored as is
          {"type": "conversation", "session_id": ..., "turns": [{"speaker", "text",
           "turn_id", "at"}, ...]}  the conversation path
          {"type": "text", "text": ...}   the ingest path
        A record without a user_id belongs to --user."""
        records = _LineTracker(_read_jsonl(source, state.user))
        engine = state.engine()
        with _progress(len(records.numbered), hidden=state.as_json) as advance:
            try:
                result = engine.import_records(records, on_record=advance)
            except ValidationError as error:
                raise records.relabel(error) from error
        state.emit(
            [{"records": len(records.numbered), **dataclasses.asdict(result)}],
            lambda r: (
                f"imported {r['records']} records: {r['memories']} memories restored, "
                f"{r['stored']} stored, {r['merged']} merged, {r['discarded']} discarded"
            ),
        )

    @cli.command()
    @click.argument(
        "target", metavar="[FILE|-]", default="-", type=click.Path(dir_okay=False, allow_dash=True)
    )
    @click.option("--all-users", is_flag=True, help="Every user's memories, not only --user's.")
    @pass_state
    def export(state: _State, target: str, all_users: bool) -> None:
        """Write memories as JSONL to FILE, or stdout.

        The records are lossless (embeddings included): `engrain import` restores them."""
        records = state.engine().export_records(None if all_users else state.user)
        count = 0
        try:
            with click.open_file(target, "w", encoding="utf-8") as out:
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    count += 1
        except OSError as exc:
            raise click.FileError(target, exc.strerror) from exc
        if not state.as_json:
            click.echo(f"exported {count} memories", err=True)

    @contextlib.contextmanager
    def _progress(total: int, *, hidden: bool) -> Iterator[Callable[[int], None]]:
        """A progress bar on stderr, advanced once per record (nothing with ``hidden``)."""
        if hidden:
            yield lambda _number: None
            return
        with click.progressbar(length=total, label="importing", file=sys.stderr) as bar:
            yield lambda _number: bar.update(1)
