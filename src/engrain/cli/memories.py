"""The commands over one user's memories: remember, ingest, recall, context, explain,
feedback, compress, tiers, and the curation commands list, get, forget, pin and mute.

Each opens the engine, makes one library call and prints the result."""

from __future__ import annotations

import dataclasses
import sys

import click

from engrain import validate
from engrain.cli.base import (
    OnceCommand,
    OnceGroup,
    State,
    decode_utf8,
    global_options,
    pass_state,
    scored_dict,
)
from engrain.cli.output import (
    memory_block,
    memory_line,
    one_line,
    outcome_line,
    plural,
    scored_line,
)
from engrain.errors import NotFoundError
from engrain.tiers import Tier


def stdin_is_terminal() -> bool:
    """Whether stdin is an interactive terminal (reading it would wait for typing)."""
    return sys.stdin.isatty()


def read_stdin() -> str:
    """All of stdin, which must be UTF-8."""
    return decode_utf8(sys.stdin.buffer.read(), "stdin")


@click.command(cls=OnceCommand)
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
@global_options()
@pass_state
def remember(
    state: State,
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


@click.command(cls=OnceCommand)
@click.argument("text", required=False)
@click.option("--session", "-s", help="Session id.")
@click.option("--type", "-t", "memory_type", help="Memory type hint for every chunk.")
@click.option("--project", "-p", help="Project the memories belong to.")
@global_options()
@pass_state
def ingest(
    state: State,
    text: str | None,
    session: str | None,
    memory_type: str | None,
    project: str | None,
) -> None:
    """Ingest free TEXT, or stdin with - (or without TEXT when stdin is a pipe).

    The text is cleaned, chunked, scored and deduplicated; one line per chunk says
    whether it was stored, merged into an existing memory, or discarded (and why)."""
    if text is None and stdin_is_terminal():
        raise click.UsageError("missing TEXT: give the text, or - to read it from stdin")
    if text is None or text == "-":
        text = read_stdin()
    report = state.engine().ingest(text, state.user, session, memory_type, project=project)
    state.emit(report.outcomes, outcome_line)


@click.command(cls=OnceCommand)
@click.argument("query")
@click.option("--top-k", "-n", type=int, help="Most memories to return.")
@click.option("--budget", "-b", type=int, help="Token budget.")
@click.option(
    "--type", "-t", "memory_types", multiple=True, help="Only this memory type (repeatable)."
)
@click.option("--project", "-p", help="Only this project (and memories of no project).")
@click.option("--include-compressed", is_flag=True, help="Also consider compressed ones.")
@global_options()
@pass_state
def recall(
    state: State,
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
    state.emit(result.scored, scored_line)
    if not state.as_json:
        click.echo(
            f"{plural(len(result.scored), 'memory')}, {plural(result.total_tokens, 'token')} "
            f"({result.budget_used:.0%} of budget)",
            err=True,
        )


#: ``--previous`` of ``context`` and ``explain``.
PREVIOUS_HELP = (
    "The conversation's turn before MESSAGE: a continuation of it is searched with it too."
)


@click.command(cls=OnceCommand)
@click.argument("message")
@click.option("--top-k", "-n", type=int, help="Most memories to inject.")
@click.option("--budget", "-b", type=int, help="Token budget.")
@click.option("--project", "-p", help="Only this project (and memories of no project).")
@click.option("--model", "-m", help="Target model: its context window picks the tier.")
@click.option("--window", type=int, help="Target model's context window, in tokens.")
@click.option("--previous", help=PREVIOUS_HELP)
@global_options()
@pass_state
def context(
    state: State,
    message: str,
    top_k: int | None,
    budget: int | None,
    project: str | None,
    model: str | None,
    window: int | None,
    previous: str | None,
) -> None:
    """The <memory> block for MESSAGE, ready for a prompt.

    With --model or --window, small windows get the compiled tier 1 or 2 (compiled in
    the background on first use; tier 3 answers meanwhile). A summary (tier, memories,
    tokens, milliseconds) goes to stderr; --json prints one object with context_id (for
    `feedback`; also as id, its old name), tier, fallback, text, tokens, elapsed_ms and the
    memories."""
    found = state.engine().context(
        message, state.user, top_k=top_k, token_budget=budget, project=project,
        model=model, context_window=window, previous=previous,
    )  # fmt: skip
    if state.as_json:
        state.emit(
            [
                {
                    "context_id": found.context_id,  # the HTTP API's and MCP's name
                    "id": found.context_id,  # its name before session 20, kept for scripts
                    "tier": found.tier,
                    "fallback": found.fallback,
                    "text": found.text,
                    "tokens": found.tokens,
                    "elapsed_ms": found.elapsed_ms,
                    "memories": [scored_dict(s) for s in found.recall.scored]
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
        f"tier {found.tier}{note}, {plural(len(found.memories), 'memory')}, "
        f"{plural(found.tokens, 'token')}, "
        f"{found.elapsed_ms:.1f} ms",
        err=True,
    )


@click.command(cls=OnceCommand)
@click.argument("context_id", required=False)
@click.option("--helpful/--unhelpful", default=None, help="Did the injected memory help?")
@click.option("--score", type=float, help="How much it helped, 0 to 1.")
@click.option("--memory", "-m", "memory_ids", multiple=True, help="A memory id (repeatable).")
@global_options()
@pass_state
def feedback(
    state: State,
    context_id: str | None,
    helpful: bool | None,
    score: float | None,
    memory_ids: tuple[str, ...],
) -> None:
    """Tell engrain whether a context (CONTEXT_ID, the context_id `context --json` prints) or some
    memories helped: --helpful, --unhelpful or --score X. Usefulness moves 20% of the
    way to the target; positive feedback on a context teaches co-occurrence. Exits with 1
    (not found) when a --memory ID is not one of the user's memories; the others' feedback
    is recorded."""
    result = state.engine().feedback(
        state.user, context_id, list(memory_ids) or None, helpful=helpful, score=score
    )
    rows = [
        {"memory_id": i, "before": round(b, 6), "after": round(a, 6)}
        for i, (b, a) in result.usefulness.items()
    ]
    state.emit(rows, lambda r: f"{r['memory_id']} usefulness {r['before']:.3f} -> "
                               f"{r['after']:.3f}")  # fmt: skip
    if not state.as_json and result.pairs_learned:
        click.echo(f"learned {result.pairs_learned} co-occurring pairs", err=True)
    named = set(validate.identifiers(memory_ids)) if memory_ids else set()  # NFC, as compared
    unknown = len(named - set(result.usefulness))
    if unknown:  # the README's exit 1, as `forget` (the engine skips them: gone since)
        raise NotFoundError(
            f"{unknown} of {plural(len(named), 'id')} "
            f"{'is not a memory' if unknown == 1 else 'are not memories'} "
            f"of user {state.user!r}"
        )


@click.command(cls=OnceCommand)
@click.option("--force", is_flag=True, help="Compress the oldest sessions even below the "
              "threshold.")  # fmt: skip
@global_options()
@pass_state
def compress(state: State, force: bool) -> None:
    """Summarise the oldest sessions when there are more than compression_threshold
    (originals are kept, marked compressed, left out of recall)."""
    report = state.engine().compress(state.user, force=force)
    state.emit(
        [dataclasses.asdict(report)],
        lambda r: (
            f"compressed {plural(len(r['sessions']), 'session')} "
            f"({plural(r['compressed'], 'memory')}) into {plural(len(r['summaries']), 'summary')}"
        ),
    )


@click.group(cls=OnceGroup)
@global_options()
def tiers() -> None:
    """The pre-compiled tiers for small and medium context windows."""


@tiers.command(name="show")
@click.option("--tier", "-t", "which", type=click.Choice(["1", "2"]), help="Only this tier.")
@click.option("--project", "-p", help="This project's tiers (default: all memories).")
@global_options()
@pass_state
def tiers_show(state: State, which: str | None, project: str | None) -> None:
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
        click.echo(f"# tier {int(row.tier)}: {title} ({plural(row.tokens, 'token')}, "
                   f"{plural(len(row.memory_ids), 'memory')}, by {row.compiled_by})")  # fmt: skip
        click.echo(row.text or "(nothing to compile)")
        click.echo("")


@tiers.command(name="rebuild")
@click.option("--project", "-p", help="This project's tiers (default: all memories).")
@global_options()
@pass_state
def tiers_rebuild(state: State, project: str | None) -> None:
    """Compile tiers 1 and 2 now (promotion, dedup, decay filter, compilers)."""
    compiled = state.engine().tiers(state.user, project, rebuild=True)
    state.emit(
        [{"tier": int(t), "tokens": c.tokens, "memories": len(c.memory_ids),
          **{k: v for k, v in compiled.stats.items()}} for t, c in compiled.tiers.items()],
        lambda r: (f"tier {r['tier']}: {plural(r['tokens'], 'token')}, "
                   f"{plural(r['memories'], 'memory')}"),
    )  # fmt: skip


@click.command(cls=OnceCommand)
@click.argument("message")
@click.option("--budget", "-b", type=int, help="Token budget (default: automatic).")
@click.option("--turn", type=int, default=0, help="Position of MESSAGE in its conversation.")
@click.option("--project", "-p", help="Only this project (and memories of no project).")
@click.option("--all", "show_all", is_flag=True, help="Also list candidates not selected.")
@click.option("--previous", help=PREVIOUS_HELP)
@global_options()
@pass_state
def explain(
    state: State,
    message: str,
    budget: int | None,
    turn: int,
    project: str | None,
    show_all: bool,
    previous: str | None,
) -> None:
    """Why MESSAGE gets the memory it gets: classification, budget and how it was
    derived, and each candidate's score components, selected or why not."""
    gated = state.engine().explain(
        message, state.user, token_budget=budget, turn=turn, project=project, previous=previous
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
        f"budget {plural(report['budget']['tokens'], 'token')}: "
        + "; ".join(report["budget"]["steps"])
    )
    click.echo("weights " + ", ".join(f"{k} {v:.2f}" for k, v in report["weights"].items()))
    click.echo(
        f"selected {plural(sum(r['selected'] for r in report['candidates']), 'memory')}, "
        f"{plural(report['tokens_used'], 'token')}"
    )
    for row in report["candidates"]:
        if not (row["selected"] or show_all):
            continue
        mark = "+" if row["selected"] else "-"
        parts = " ".join(f"{k}={v:.3f}" for k, v in row["components"].items() if v)
        click.echo(f"{mark} {row['score']:.3f} {one_line(row['content'], 60):<60} "
                   f"{row['reason']}; {parts}")  # fmt: skip


@click.command(cls=OnceCommand, name="list")
@click.option("--type", "-t", "memory_type", help="Only this memory type.")
@click.option("--kind", "-k", help="Only this kind.")
@click.option("--project", "-p", help="Only this project.")
@click.option("--limit", "-n", type=int, default=100, show_default=True,
              help="Most memories to list.")  # fmt: skip
@global_options()
@pass_state
def list_(
    state: State, memory_type: str | None, kind: str | None, project: str | None, limit: int
) -> None:
    """The user's memories, most recently updated first."""
    memories = state.engine().list(
        state.user, project=project, memory_type=memory_type, kind=kind, limit=limit
    )
    state.emit(memories, memory_line)


@click.command(cls=OnceCommand)
@click.argument("memory_id", metavar="ID")
@global_options()
@pass_state
def get(state: State, memory_id: str) -> None:
    """Every field of the memory ID (exit 1 if the user has none with that id)."""
    state.emit([state.engine().get(memory_id, state.user)], memory_block)


@click.command(cls=OnceCommand)
@click.argument("memory_ids", metavar="ID...", nargs=-1, required=True)
@global_options()
@pass_state
def forget(state: State, memory_ids: tuple[str, ...]) -> None:
    """Delete memories by ID.

    All at once (atomically); says how many of them existed. Exits with 1 (not found)
    when some ID was not one of the user's memories; the others are forgotten."""
    count = state.engine().forget(memory_ids, state.user)
    state.emit(
        [{"forgotten": count, "requested": len(memory_ids)}],
        lambda r: f"forgot {r['forgotten']} of {r['requested']}",
    )
    distinct = len(set(memory_ids))
    if count < distinct:
        raise NotFoundError(
            f"{distinct - count} of {plural(distinct, 'id')} "
            f"{'is not a memory' if distinct - count == 1 else 'are not memories'} "
            f"of user {state.user!r}"
        )


@click.command(cls=OnceCommand)
@click.argument("memory_id", metavar="ID")
@click.option("--off", is_flag=True, help="Unpin instead.")
@global_options()
@pass_state
def pin(state: State, memory_id: str, off: bool) -> None:
    """Pin the memory ID: injected whenever the budget allows."""
    memory = state.engine().pin(memory_id, state.user, pinned=not off)
    state.emit([memory], lambda m: f"{'pinned' if m.pinned else 'unpinned'} {m.id}")


@click.command(cls=OnceCommand)
@click.argument("memory_id", metavar="ID")
@click.option("--off", is_flag=True, help="Unmute instead.")
@global_options()
@pass_state
def mute(state: State, memory_id: str, off: bool) -> None:
    """Mute the memory ID: never injected."""
    memory = state.engine().mute(memory_id, state.user, muted=not off)
    state.emit([memory], lambda m: f"{'muted' if m.muted else 'unmuted'} {m.id}")


COMMANDS = [
    remember, ingest, recall, context, explain, feedback, compress, tiers,
    list_, get, forget, pin, mute,
]  # fmt: skip
