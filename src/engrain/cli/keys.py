"""The ``keys`` group: create, list and revoke the API keys ``engrain serve`` accepts.

Keys live in the store (``--url`` / ``--data-dir``), so a key made here is accepted at once by
every server process over that store, and a revocation refuses it at once. A secret is
printed once, by ``keys create``, and never again: only its hash is stored."""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

from engrain.cli.base import (
    OnceGroup,
    State,
    global_options,
    pass_state,
    store_options,
)
from engrain.keys import ApiKey, KeyRing

ONCE_WARNING = "this key is shown only now and cannot be shown again: store it somewhere safe"


def key_ring(state: State) -> KeyRing:
    """The keys of the store the global options name."""
    return KeyRing(state.engine().store)


def key_line(key: ApiKey) -> str:
    """A key in one line: id, status, scope, name, creation time (never its secret)."""
    status = "revoked" if key.revoked_at is not None else "active"
    scope = "admin (every user)" if key.admin else "users=" + ",".join(key.users)
    if key.projects:
        scope += " projects=" + ",".join(key.projects)
    name = f"  {key.name}" if key.name else ""
    return f"{key.id}  {status:<7}  {key.created_at:%Y-%m-%d %H:%M}  {scope}{name}"


def typed_user(ctx: click.Context) -> tuple[str, ...]:
    """The ``--user`` typed before ``keys create`` (``engrain -u alice keys create``), if
    any. Not one from ``ENGRAIN_USER``: a default must never silently become a key's scope."""
    parent = ctx.parent
    while parent is not None:
        if parent.get_parameter_source("user") is ParameterSource.COMMANDLINE:
            return (parent.ensure_object(State).user,)
        parent = parent.parent
    return ()


@click.group(cls=OnceGroup)
@global_options()
def keys() -> None:
    """API keys for `engrain serve`: create, list, revoke.

    A key acts for the users it names (--user, repeatable), optionally only in some
    projects (--project); an admin key (--admin) acts for every user and manages keys.
    Keys belong to the store (--url, --data-dir), not to a user."""


@keys.command()
@click.option(
    "--user",
    "-u",
    "users",
    multiple=True,
    help="A user the key may act for (repeatable; at least one unless --admin; default: "
    "a --user typed before 'keys create', never ENGRAIN_USER).",
)
@click.option("--project", "-p", "projects", multiple=True, help="Only this project (repeatable).")
@click.option("--admin", is_flag=True, help="Any user and project, and key management.")
@click.option("--name", "-n", help="A label to recognise the key by (shown in lists).")
@store_options()
@pass_state
def create(
    state: State, users: tuple[str, ...], projects: tuple[str, ...], admin: bool, name: str | None
) -> None:
    """Create a key and print it: the only time it is shown.

    Text output: the key alone on stdout (KEY=$(engrain keys create -u alice) works) and
    what it allows on stderr. With --json, one object: key, id, users, projects, admin,
    name, created_at."""
    users = users or typed_user(click.get_current_context())
    if not users and not admin:
        raise click.UsageError(
            "give the users the key acts for with --user after 'keys create' "
            "(repeatable), or --admin"
        )
    secret, key = key_ring(state).create(users, projects=projects, admin=admin, name=name)
    if state.as_json:
        shown = key.to_dict()
        fields = ("id", "users", "projects", "admin", "name", "created_at")
        click.echo(json.dumps({"key": secret, **{f: shown[f] for f in fields}}, ensure_ascii=False))
    else:
        click.echo(secret)
    click.echo(f"created {key_line(key)}", err=True)
    click.echo(f"warning: {ONCE_WARNING}", err=True)


@keys.command(name="list")
@global_options()
@pass_state
def list_(state: State) -> None:
    """Every key, oldest first: id, active or revoked, created, scope, name.

    Secrets are never shown (they are not stored); with --json, one object per key."""
    found = key_ring(state).list()
    state.emit(found, key_line)
    if not found and not state.as_json:
        click.echo("no API keys (engrain keys create --user USER)", err=True)


@keys.command()
@click.argument("key_id")
@global_options()
@pass_state
def revoke(state: State, key_id: str) -> None:
    """Revoke the key KEY_ID: every server over this store refuses it from now on."""
    key = key_ring(state).revoke(key_id)
    state.emit([key], key_line)


COMMANDS = [keys]
