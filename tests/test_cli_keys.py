"""``engrain keys create/list/revoke``: through click's runner over a SQLite file, and once
as a real ``engrain`` process whose key a :class:`KeyRing` of this process checks."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from engrain.cli.app import cli
from engrain.errors import AuthenticationError, PermissionDeniedError
from engrain.keys import KeyRing
from engrain.store.sqlite import SQLiteStore

from .conftest import cli_env

Invoke = Callable[..., Result]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "keys.db"


@pytest.fixture
def invoke(runner: CliRunner, tmp_path: Path, db: Path) -> Invoke:
    """Run ``engrain ARGS --url sqlite:///<db>`` (the store option after the subcommand)
    with an environment of our own."""
    env = cli_env(tmp_path)

    def run(*args: str) -> Result:
        return runner.invoke(
            cli, [*args, "--url", f"sqlite:///{db}"], env=env, catch_exceptions=False
        )

    return run


@pytest.fixture
def ring(db: Path) -> Iterator[Callable[[], KeyRing]]:
    """Open (each time it is called) a key ring on the test's file, as a server would."""
    stores: list[SQLiteStore] = []

    def open_ring() -> KeyRing:
        stores.append(SQLiteStore(db))
        return KeyRing(stores[-1])

    yield open_ring
    for store in stores:
        store.close()


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(result).stdout.splitlines()]


def test_create_prints_the_key_once_and_it_authenticates(
    invoke: Invoke, ring: Callable[[], KeyRing]
) -> None:
    result = ok(invoke("keys", "create", "--user", "alice", "-u", "bob", "--name", "laptop"))
    secret = result.stdout.strip()
    assert secret.startswith("egk_") and "\n" not in secret  # the key alone on stdout
    assert "cannot be shown again" in result.stderr and secret not in result.stderr
    key = ring().authenticate(secret)
    assert key.users == ("alice", "bob") and key.name == "laptop" and not key.admin
    listed = ok(invoke("keys", "list"))
    assert key.id in listed.stdout and "alice,bob" in listed.stdout and "laptop" in listed.stdout
    assert secret not in listed.stdout and secret[4:] not in listed.stdout


def test_create_json_is_one_object_with_the_key_as_the_last_line(
    invoke: Invoke, ring: Callable[[], KeyRing]
) -> None:
    result = ok(invoke("--json", "keys", "create", "-u", "alice", "--project", "web"))
    created = json.loads(result.stdout.splitlines()[-1])
    assert list(created) == ["key", "id", "users", "projects", "admin", "name", "created_at"]
    assert created["users"] == ["alice"] and created["projects"] == ["web"]
    assert created["admin"] is False and created["name"] is None
    keys = ring()
    key = keys.authenticate(created["key"])
    assert key.id == created["id"] and key.created_at.isoformat() == created["created_at"]
    keys.authorize(key, "alice", "web")
    with pytest.raises(PermissionDeniedError):
        keys.authorize(key, "alice", "api")


def test_a_user_typed_before_create_scopes_the_key_but_engrain_user_does_not(
    invoke: Invoke, runner: CliRunner, db: Path
) -> None:
    before = json_lines(invoke("--user", "alice", "--json", "keys", "create"))[-1]
    inside = json_lines(invoke("keys", "-u", "bob", "create", "--json"))[-1]
    both = json_lines(invoke("-u", "alice", "keys", "create", "-u", "carol", "--json"))[-1]
    assert (before["users"], inside["users"], both["users"]) == (["alice"], ["bob"], ["carol"])
    from_env = runner.invoke(
        cli, ["keys", "create", "--url", f"sqlite:///{db}"], env={"ENGRAIN_USER": "dave"}
    )
    assert from_env.exit_code == 2 and "--user" in from_env.stderr
    assert len(json_lines(invoke("keys", "list", "--json"))) == 3


def test_an_admin_key_acts_for_anyone(invoke: Invoke, ring: Callable[[], KeyRing]) -> None:
    created = json_lines(invoke("keys", "create", "--admin", "--json"))[-1]
    assert created["admin"] is True and created["users"] == []
    keys = ring()
    keys.authorize(keys.authenticate(created["key"]), "anyone")


def test_list_json_shows_scopes_and_revocations_but_no_secret(invoke: Invoke) -> None:
    first = json_lines(invoke("keys", "create", "-u", "alice", "--json"))[-1]
    second = json_lines(invoke("keys", "create", "-u", "bob", "--json"))[-1]
    ok(invoke("keys", "revoke", first["id"]))
    listed = json_lines(invoke("--json", "keys", "list"))
    assert [k["id"] for k in listed] == [first["id"], second["id"]]
    assert listed[0]["revoked_at"] is not None and listed[1]["revoked_at"] is None
    assert all("key" not in k and "digest" not in k for k in listed)
    text = ok(invoke("keys", "list")).stdout
    assert f"{first['id']}  revoked" in text and f"{second['id']}  active" in text


def test_revoke_refuses_the_key_at_once(invoke: Invoke, ring: Callable[[], KeyRing]) -> None:
    created = json_lines(invoke("keys", "create", "-u", "alice", "--json"))[-1]
    server = ring()  # opened before the revocation, like a running server
    server.authenticate(created["key"])
    revoked = json_lines(invoke("keys", "revoke", created["id"], "--json"))
    assert revoked[0]["id"] == created["id"] and revoked[0]["revoked_at"] is not None
    with pytest.raises(AuthenticationError):
        server.authenticate(created["key"])


def test_list_of_no_keys_says_how_to_make_one(invoke: Invoke) -> None:
    result = ok(invoke("keys", "list"))
    assert result.stdout == "" and "keys create" in result.stderr
    assert json_lines(invoke("keys", "list", "--json")) == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["keys", "create"], 2, "--user"),  # no user and not admin
        (["keys", "create", "--admin", "-u", "alice"], 2, "admin key"),
        (["keys", "create", "-u", ""], 2, "empty"),
        (["keys", "create", "-u", "alice", "-p", "a\u200bb"], 2, "invisible"),
        (["keys", "revoke", "key_000000000000"], 1, "no API key"),
    ],
)
def test_errors_exit_with_their_code_and_create_nothing(
    invoke: Invoke, db: Path, args: list[str], code: int, message: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == code and message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    if db.exists():
        with sqlite3.connect(db) as raw:
            assert raw.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)


def test_a_json_error_is_a_json_object_on_stderr(invoke: Invoke) -> None:
    result = invoke("keys", "revoke", "key_000000000000", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stderr) == {
        "error": "not_found",
        "status": 404,
        "message": "no API key 'key_000000000000'",
    }


def test_a_real_engrain_process_creates_a_key_this_process_accepts(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env["ENGRAIN_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "engrain.cli", "--json", "keys", "create", "-u", "alice",
         "--url", f"sqlite:///{db}"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout.splitlines()[-1])
    assert "cannot be shown again" in done.stderr
    store = SQLiteStore(db)
    keys = KeyRing(store)
    keys.authorize(keys.authenticate(created["key"]), "alice")
    store.close()
    with sqlite3.connect(db) as raw:
        assert created["key"] not in str(raw.execute("SELECT * FROM api_keys").fetchall())
