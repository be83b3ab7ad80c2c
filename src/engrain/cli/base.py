"""What every command shares: the global options, the engine they open, the exit codes, and
the one place an :class:`EngrainError` becomes a message.

Exit codes (the README's table)::

    0  success
    1  not found: an unknown memory or context id (HTTP 404)
    2  usage or invalid input: click's usage errors, ValidationError (4xx), text that is
       not valid UTF-8 (argv, stdin, import files)
    3  failure of the configuration, the store, the model or the LLM (5xx), and a missing
       extra (ConfigError, its message naming the ``pip install 'engrain[…]'`` that adds it)

The global options (``--url``, ``--data-dir``, ``--json``, ``--user/-u``) are accepted
before the subcommand and after it: the group's values (with ``ENGRAIN_USER`` and the
defaults) are set first, then any given to the subcommand on its command line win.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from engrain.config import ConfigWarning, load_settings
from engrain.engine import Engine
from engrain.errors import ConfigError, EngrainError, ValidationError
from engrain.recall.results import ScoredMemory

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_FAILURE = 3

F = TypeVar("F", bound=Callable[..., Any])


def exit_code(error: EngrainError) -> int:
    """1 for an unknown id (404), 2 for other caller mistakes (4xx), 3 for failures of the
    configuration, store, model or LLM (5xx)."""
    if error.http_status == 404:
        return EXIT_NOT_FOUND
    return EXIT_USAGE if error.http_status < 500 else EXIT_FAILURE


def printable(text: str) -> str:
    """``text`` on one line, with anything UTF-8 cannot encode (lone surrogates) escaped, so
    printing it can never fail."""
    lines = (line.strip() for line in text.splitlines())
    flat = "; ".join(line for line in lines if line)
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


#: The engine's fields a command line spells otherwise: a refusal naming one names the
#: option too (``token_budget (--budget) must be …``), so the user sees what to change.
OPTION_OF = {"token_budget": "--budget", "context_window": "--window", "top_k": "--top-k",
             "memory_type": "--type", "domains": "--domain", "user_id": "--user",
             "session_id": "--session"}  # fmt: skip
_FIELD = re.compile(r"([a-z_]+)(\[\d+\])?")


def with_option(message: str) -> str:
    """``message`` with the command-line option of the field it starts with, if it has one."""
    found = _FIELD.match(message)
    if found is None or found.group(1) not in OPTION_OF:
        return message
    end = found.end()
    return f"{message[:end]} ({OPTION_OF[found.group(1)]}){message[end:]}"


def report(error: EngrainError, *, as_json: bool) -> None:
    """Print ``error`` on stderr: ``error: <message>`` on one line (naming the option of
    the field it is about), or its JSON object (the engine's message as it is)."""
    if as_json:
        click.echo(json.dumps(error.to_dict()), err=True)
    else:
        click.echo(f"error: {printable(with_option(error.message))}", err=True)


def click_error(error: click.ClickException) -> EngrainError:
    """One of click's refusals as engrain's error: a usage error (exit 2) is a
    :class:`ValidationError` whose message says where the help is; another (exit 3) a
    :class:`ConfigError`."""
    message = error.format_message().strip().removesuffix(".")
    if message[:1].isupper() and message[1:2].islower():  # "Missing argument", as ours read
        message = message[0].lower() + message[1:]
    if not isinstance(error, click.UsageError):
        return ConfigError(message)
    if error.ctx is not None:
        message += f" (see '{error.ctx.command_path} --help')"
    return ValidationError(message)


def warn(message: str, *, as_json: bool) -> None:
    """Print a warning on stderr: ``warning: <message>``, or ``{"warning": message}``."""
    if as_json:
        click.echo(json.dumps({"warning": message}), err=True)
    else:
        click.echo(f"warning: {printable(message)}", err=True)


def require_utf8(value: str, what: str) -> str:
    """``value`` unchanged, or :class:`ValidationError` if it holds a lone surrogate: what
    Python makes of bytes that are not UTF-8 in argv, the environment or a file name."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        try:  # show the bytes argv had; a surrogate from elsewhere (a JSON escape) as is
            shown = repr(value.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:
            shown = repr(value.encode("utf-8", "backslashreplace").decode("utf-8"))
        raise ValidationError(f"{what} is not valid UTF-8: {shown}") from exc
    return value


def decode_utf8(data: bytes, what: str) -> str:
    """``data`` decoded as UTF-8, or :class:`ValidationError` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise ValidationError(
            f"{what} is not valid UTF-8 (byte 0x{bad} at offset {exc.start})"
        ) from exc


@dataclass
class State:
    """The global options, and the engine opened from them on first use."""

    url: str | None = None
    data_dir: str | None = None
    as_json: bool = False
    user: str = "default"
    #: the user came from ``--user`` or ``ENGRAIN_USER``, not from the default
    user_explicit: bool = False

    def engine(self) -> Engine:
        """The engine for these options, closed when the command ends."""
        require_utf8(self.user, "the user id")
        for value, what in ((self.url, "--url"), (self.data_dir, "--data-dir")):
            if value is not None:
                require_utf8(value, what)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigWarning)
            settings = load_settings({"url": self.url, "data_dir": self.data_dir})
        for found in caught:  # a misspelt ENGRAIN_* variable: one line, as errors are
            if issubclass(found.category, ConfigWarning):
                warn(str(found.message), as_json=self.as_json)
            else:
                warnings.warn_explicit(found.message, found.category, found.filename, found.lineno)
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
        return scored_dict(row)
    return row.to_dict() if hasattr(row, "to_dict") else row


def scored_dict(scored: ScoredMemory) -> dict[str, Any]:
    """A recalled memory as JSON: every field of the memory plus its score, similarity and
    tokens."""
    return {
        **scored.memory.to_dict(),
        "score": scored.score,
        "similarity": scored.similarity,
        "tokens": scored.tokens,
    }


pass_state = click.make_pass_decorator(State, ensure=True)


def _setter(field: str, *, top: bool) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback storing an option's value in the :class:`State`: always for the group's
    options, and for a subcommand's only when given on its command line (so it wins)."""

    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        source = ctx.get_parameter_source(param.name or field)
        if not top and source is not ParameterSource.COMMANDLINE:
            return
        state = ctx.ensure_object(State)
        setattr(state, field, value)
        if field == "user":
            state.user_explicit = source is not ParameterSource.DEFAULT

    return store


def _store_option_list(top: bool) -> list[Callable[[F], F]]:
    return [
        click.option(
            "--url",
            callback=_setter("url", top=top),
            expose_value=False,
            help="Store URL (sqlite:///path, postgresql://…, memory://); default from "
            "settings (ENGRAIN_URL, else engrain.db in the data directory).",
        ),
        click.option(
            "--data-dir",
            type=click.Path(file_okay=False),
            callback=_setter("data_dir", top=top),
            expose_value=False,
            help="Data directory (default: ENGRAIN_DATA_DIR, else $XDG_DATA_HOME/engrain).",
        ),
        click.option(
            "--json",
            "as_json",
            is_flag=True,
            callback=_setter("as_json", top=top),
            expose_value=False,
            help="Output JSON, one object per line; errors as a JSON object on stderr.",
        ),
    ]


def _decorator(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def store_options(*, top: bool = False) -> Callable[[F], F]:
    """Add ``--url``, ``--data-dir`` and ``--json`` (the global options without ``--user``)
    to a command whose ``--user`` means something else, such as ``keys create`` (the key's
    users). Values land in the :class:`State` exactly as :func:`global_options` puts them."""
    return _decorator(_store_option_list(top))


def global_options(*, top: bool = False) -> Callable[[F], F]:
    """Add ``--url``, ``--data-dir``, ``--json`` and ``--user/-u`` to a command: the group
    (``top=True``, with ``ENGRAIN_USER`` and the default user) or any subcommand."""
    user: Callable[[F], F] = click.option(
        "--user",
        "-u",
        callback=_setter("user", top=top),
        expose_value=False,
        envvar="ENGRAIN_USER" if top else None,
        default="default" if top else None,
        help="User id (default: ENGRAIN_USER, else 'default').",
    )
    return _decorator([*_store_option_list(top), user])


def refuse_repeats(command: click.Command, ctx: click.Context, args: Sequence[str]) -> None:
    """:class:`click.UsageError` when ``args`` give one of ``command``'s single-valued
    options more than once: click keeps the last and drops the others without a word, so
    ``feedback --helpful --unhelpful`` would teach "unhelpful". Contradicting spellings of
    one flag (``--helpful``/``--unhelpful``) and a value given twice (``--budget 50
    --budget 80``) are refused; the same flag twice (``--pin --pin``) loses nothing and
    passes. Repeatable options (``--domain``) and the group's options given again after
    the subcommand (another context: "after it wins") are not repeats."""
    if ctx.resilient_parsing or any(a in ctx.help_option_names for a in args):
        return  # completion, or a help page: nothing runs
    try:  # the parser alone: values are not converted, no callback runs
        _, rest, order = command.make_parser(ctx).parse_args(args=list(args))
    except click.UsageError:
        return  # click's own refusal, said as it says it, when the command parses
    own = args[: len(args) - len(rest)]  # a group's: what precedes its subcommand
    seen = Counter(id(param) for param in order)
    for param in command.get_params(ctx):
        if seen[id(param)] < 2 or not isinstance(param, click.Option):
            continue
        if param.multiple or param.count:
            continue
        given = _spellings(param, own)
        if param.is_flag and len(set(given)) == 1:
            continue
        if param.is_flag:
            names = " and ".join(dict.fromkeys(given))
            raise click.UsageError(f"{names} contradict each other: give one", ctx)
        names = "/".join(dict.fromkeys(given))  # -u and --user: one option
        raise click.UsageError(f"{names} given {len(given)} times: give it once", ctx)


def _spellings(param: click.Option, args: Sequence[str]) -> list[str]:
    """How ``args`` spell ``param``, in order (``--budget=5`` as ``--budget``)."""
    names = {*param.opts, *param.secondary_opts}
    found: list[str] = []
    for arg in args:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name in names:
            found.append(name)
        elif arg[:1] == "-" and arg[1:2] != "-" and f"-{arg[1:2]}" in names:
            found.append(f"-{arg[1:2]}")  # a short option with its value attached: -n5
    return found or [param.opts[0]] * 2


class OnceCommand(click.Command):
    """A command whose single-valued options may be given once (:func:`refuse_repeats`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse a repeated option, then parse as click does."""
        refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    """A group of :class:`OnceCommand` whose own options may be given once too."""

    command_class = OnceCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse a repeated option of the group, then parse as click does."""
        refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


class EngrainGroup(OnceGroup):
    """The top-level group: refuses argv that is not UTF-8 and turns every
    :class:`EngrainError` into one line on stderr and its exit code."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        """Check argv before click parses it, then run as click does, except that click's
        own refusals (a missing argument, an unknown option, a value of the wrong type, a
        file that is not there) are one line too, ``error: …`` or a JSON object, like every
        other error (click prints a usage block and ``Error: …`` on three lines)."""
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv
        try:
            for position, arg in enumerate(argv, 1):
                require_utf8(arg, f"argument {position}")
        except ValidationError as error:
            report(error, as_json=as_json)
            sys.exit(exit_code(error))
        if not extra.pop("standalone_mode", True):
            return super().main(argv, prog_name, standalone_mode=False, **extra)
        try:
            done = super().main(argv, prog_name, standalone_mode=False, **extra)
        except click.ClickException as error:
            failure = click_error(error)
            report(failure, as_json=as_json)
            sys.exit(exit_code(failure))  # the table's codes, not click's 1 for its others
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(done if isinstance(done, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; an :class:`EngrainError` exits with its code, no traceback."""
        try:
            return super().invoke(ctx)
        except EngrainError as error:
            report(error, as_json=ctx.ensure_object(State).as_json)
            ctx.exit(exit_code(error))
