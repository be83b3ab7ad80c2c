"""Moving memories in and out: import (JSONL records), export, and migrate (schema, and a
lossless copy from another store).

Import files are checked whole before the one ``Engine.import_records`` call: every line
must be UTF-8 and a JSON object, and with an explicit user (``--user`` or ``ENGRAIN_USER``)
every record must belong to that user unless ``--keep-users`` says to keep the records'
own users. A refused file writes nothing."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

import click

from engrain import validate
from engrain.cli.base import (
    OnceCommand,
    State,
    decode_utf8,
    global_options,
    pass_state,
    require_utf8,
)
from engrain.cli.files import written
from engrain.cli.output import plural
from engrain.errors import NotFoundError, ValidationError
from engrain.store import open_store, sqlite_path
from engrain.store.transfer import copy_store


def stderr_is_terminal() -> bool:
    """Whether stderr is an interactive terminal (the only place a progress bar belongs)."""
    return sys.stderr.isatty()


def read_records(
    stream: IO[bytes], user: str, *, only_user: bool
) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every non-blank line of a JSONL file, all parsed and
    checked before anything is written. A record without ``user_id`` gets ``user``; with
    ``only_user``, a record of another user is refused."""
    records = []
    for number, raw in enumerate(stream, 1):
        line = decode_utf8(raw, f"line {number}")
        if number == 1:
            line = line.removeprefix("\ufeff")  # a byte-order mark some editors write
        if not line.strip():
            continue
        record = validate.json_document(line, f"line {number}")
        if isinstance(record, dict):
            _require_unicode(record, f"line {number}")
        if not isinstance(record, dict):
            raise ValidationError(f"line {number}: expected a JSON object")
        owner = record.setdefault("user_id", user)
        if only_user and owner != user:
            raise ValidationError(
                f"line {number}: the record belongs to user {owner!r}, not {user!r} "
                "(--keep-users imports records under their own users)"
            )
        records.append((number, record))
    return records


def _require_unicode(value: Any, where: str) -> None:
    """Refuse strings a JSON ``\\ud800``-style escape made unencodable, keys included."""
    if isinstance(value, str):
        require_utf8(value, f"{where}: a string")
    elif isinstance(value, dict):
        for key, item in value.items():
            require_utf8(key, f"{where}: a key")
            _require_unicode(item, f"{where}: {key}")
    elif isinstance(value, list):
        for item in value:
            _require_unicode(item, where)


class LineTracker:
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
        """``error`` with its "record N: " prefix replaced by the record's line number."""
        prefix = f"record {self.count}: "
        if not self.count or not error.message.startswith(prefix):
            return error
        line = self.numbered[self.count - 1][0]
        return type(error)(f"line {line}: {error.message.removeprefix(prefix)}")


@contextlib.contextmanager
def progress(total: int, *, hidden: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal, advanced once per record, its line
    ended before anything else is printed (nothing with ``hidden`` or off a terminal)."""
    if hidden or not stderr_is_terminal():
        yield lambda _number: None
        return
    with click.progressbar(length=total, label="importing", file=sys.stderr) as bar:
        yield lambda _number: bar.update(1)


@click.command(cls=OnceCommand, name="import")
@click.argument("source", metavar="FILE|-", type=click.File("rb"))
@click.option(
    "--keep-users",
    is_flag=True,
    help="Keep each record's own user_id even when --user or ENGRAIN_USER names another "
    "user (without it such a file is refused).",
)
@global_options()
@pass_state
def import_(state: State, source: IO[bytes], keep_users: bool) -> None:
    """Load JSONL records from FILE, or stdin with -.

    \b
    Record types:
      {"type": "memory", ...}   an exported memory, restored as is (the first of
                                each user carries "state": what engrain learned)
      {"type": "state", ...}    one per-user state document
      {"type": "conversation", "session_id": ..., "turns": [{"speaker", "text",
       "turn_id", "at"}, ...]}  the conversation path
      {"type": "text", "text": ...}   the ingest path
    A record without a user_id belongs to --user. With --user (or ENGRAIN_USER), a record
    of another user is refused, and nothing is imported, unless --keep-users is given.
    The file must be UTF-8; nothing is written unless every record is accepted."""
    only_user = state.user_explicit and not keep_users
    records = LineTracker(read_records(source, state.user, only_user=only_user))
    engine = state.engine()
    with progress(len(records.numbered), hidden=state.as_json) as advance:
        try:
            result = engine.import_records(records, on_record=advance)
        except ValidationError as error:
            raise records.relabel(error) from error
    state.emit(
        [{"records": len(records.numbered), **dataclasses.asdict(result)}],
        lambda r: (
            f"imported {plural(r['records'], 'record')}: "
            f"{plural(r['memories'], 'memory')} restored, "
            f"{r['stored']} stored, {r['merged']} merged, {r['discarded']} discarded"
            + (f", {plural(r['states'], 'state')} restored" if r.get("states") else "")
        ),
    )


@click.command(cls=OnceCommand)
@click.argument(
    "target", metavar="[FILE|-]", default="-", type=click.Path(dir_okay=False, allow_dash=True)
)
@click.option("--all-users", is_flag=True, help="Every user's memories, not only --user's.")
@global_options()
@pass_state
def export(state: State, target: str, all_users: bool) -> None:
    """Write memories as JSONL to FILE, or stdout.

    The records are lossless (embeddings included): `engrain import` restores them."""
    records = state.engine().export_records(None if all_users else state.user)
    counts: collections.Counter[str] = collections.Counter()
    with written(target) as out:  # whole or not at all (cli/files.py)
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            counts[record.get("type", "memory")] += 1
            counts["state"] += len(record.get("state") or ())
    if not state.as_json:
        states = f" and {plural(counts['state'], 'state')}" if counts["state"] else ""
        click.echo(f"exported {plural(counts['memory'], 'memory')}{states}", err=True)


@click.command(cls=OnceCommand)
@click.option("--from", "source_url", metavar="URL",
              help="Also copy every memory of the store at URL into this one.")  # fmt: skip
@click.option("--verify", is_flag=True, help="Read each copied batch back and compare it.")
@click.option("--pool-graph", is_flag=True,
              help="PostgreSQL: rebuild the pool's HNSW graph with a wide candidate "
                   "list (once, for a large user; minutes at 100,000 memories).")  # fmt: skip
@click.option("--maintenance-work-mem", metavar="SIZE",
              help="With --pool-graph: the build's memory (e.g. 1GB).")  # fmt: skip
@global_options()
@pass_state
def migrate(
    state: State,
    source_url: str | None,
    verify: bool,
    pool_graph: bool,
    maintenance_work_mem: str | None,
) -> None:
    """Bring the store at --url to the current schema (named migrations), and with
    --from copy another store into it: how a SQLite file moves to PostgreSQL
    (`engrain --url postgresql://… migrate --from sqlite:////path/engrain.db`). The copy
    is lossless (ids, embeddings, every field) and can be re-run.

    On PostgreSQL it also fills the token counts a large table's migration 009 left
    (1,000 rows per transaction; a store opening the database fills them in the
    background otherwise, paced): when it returns, every row holds its count. Stopped,
    it resumes where it was at the next run or open.

    With --pool-graph (PostgreSQL) it then builds the pool's HNSW graph again with
    ef_construction 200 beside the one in use and swaps it in: searches of a large user
    walk a shorter candidate list for at least the same recall (docs/postgres.md, "Session 18"),
    inserts cost the server more. Done once; a graph built so is left as it is."""
    # an option that would do nothing without its partner is refused, not silently dropped
    if verify and source_url is None:
        raise click.UsageError("--verify checks a copy: it goes with --from URL")
    if maintenance_work_mem is not None and not pool_graph:
        raise click.UsageError("--maintenance-work-mem sizes the graph's build: it goes with "
                               "--pool-graph")  # fmt: skip
    engine = state.engine()
    store: Any = engine.store
    applied = store.migrate() if hasattr(store, "migrate") else []
    row: dict[str, Any] = {"applied": list(applied)}
    if hasattr(store, "fill_content_tokens"):
        row["filled"] = store.fill_content_tokens()
    if pool_graph:
        if not hasattr(store, "rebuild_pool_graph"):
            raise click.UsageError("--pool-graph is for a PostgreSQL store")
        row["pool_graph_rebuilt"] = store.rebuild_pool_graph(maintenance_work_mem)
    if source_url is not None:
        _require_source(source_url)
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
        lambda r: (f"schema current ({plural(len(r['applied']), 'migration')} applied now)"
                   + (f"; filled the token counts of {plural(r['filled'], 'memory')}"
                      if r.get("filled") else "")
                   + ("; rebuilt the pool's graph" if r.get("pool_graph_rebuilt") else "")
                   + (f"; copied {plural(r['copied']['memories'], 'memory')} of "
                      f"{plural(r['copied']['users'], 'user')} and "
                      f"{plural(r['copied']['keys'], 'API key')}"
                      if "copied" in r else "")),
    )  # fmt: skip


def _require_source(url: str) -> None:
    """A SQLite source that is not there is a mistyped path: opening it would create an
    empty store, copy nothing and report success (relative to the working directory:
    ``sqlite:///home/…`` is ``./home/…``, ``sqlite:////home/…`` the absolute path)."""
    if url.startswith("sqlite:"):
        path = sqlite_path(url)
        if not path.is_file():
            raise NotFoundError(
                f"no SQLite store at {path.absolute()} to copy from (nothing copied; an "
                "absolute path takes four slashes: sqlite:////path/engrain.db)"
            )


COMMANDS = [import_, export, migrate]
