"""API keys (``engrain.keys``): what a key allows, how it is checked, what is stored.

The store half (key records on every backend) is in the contract suite; here the
:class:`KeyRing` over the in-memory store, and over SQLite files shared by two engines and by
two processes."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
import unicodedata
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import (
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    ValidationError,
)
from engrain.keys import ApiKey, KeyRing, digest
from engrain.store import MemoryStore
from engrain.validate import UserIdWarning

from .conftest import NOW, make_settings


@pytest.fixture
def ring() -> KeyRing:
    return KeyRing(MemoryStore())


# -- creating keys ----------------------------------------------------------------------------


def test_a_new_key_is_a_random_prefixed_secret_with_a_public_id(ring: KeyRing) -> None:
    secret, key = ring.create(["alice"], name="laptop", now=NOW)
    other, _ = ring.create(["alice"])
    assert secret.startswith("egk_") and len(secret) == 4 + 43 and secret != other
    assert key.id.startswith("key_") and len(key.id) == 16 and int(key.id[4:], 16) >= 0
    assert key == ApiKey(key.id, "laptop", ("alice",), (), False, NOW, None)
    assert secret not in repr(key) and secret not in str(key.to_dict())


def test_create_checks_and_normalises_users_and_projects(ring: KeyRing) -> None:
    _, key = ring.create(["bob", "e\u0301", "bob", "Bob"], projects=["web", "web", "api"])
    assert key.users == ("bob", "\u00e9", "Bob") and key.projects == ("web", "api")
    with pytest.warns(UserIdWarning):
        _, spaced = ring.create([" carol "])
    assert spaced.users == (" carol ",)


@pytest.mark.parametrize(
    ("users", "options"),
    [
        ((), {}),  # no user and not admin
        (["alice"], {"admin": True}),  # an admin key takes no users
        ((), {"admin": True, "projects": ["web"]}),
        ([""], {}),
        (["a\x00b"], {}),
        (["x" * 257], {}),
        ("alice", {}),  # a string, not a list of users
        ([7], {}),
        (["alice"], {"projects": [""]}),
        (["alice"], {"admin": "yes"}),
        (["alice"], {"name": "tab\u200bbed"}),
    ],
)
def test_a_bad_scope_is_refused_before_anything_is_stored(
    ring: KeyRing, users: object, options: dict[str, object]
) -> None:
    with pytest.raises(ValidationError):
        ring.create(users, **options)  # type: ignore[arg-type]
    assert ring.list() == []


def test_the_store_keeps_only_the_hash_of_the_secret(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path), embedder=HashEmbedder())
    with engine:
        secret, key = KeyRing(engine.store).create(["alice"], name="n")
    raw = (tmp_path / "engrain.db").read_bytes()
    wal = tmp_path / "engrain.db-wal"
    raw += wal.read_bytes() if wal.exists() else b""
    assert secret.encode() not in raw and secret[4:].encode() not in raw
    with sqlite3.connect(tmp_path / "engrain.db") as db:
        rows = db.execute("SELECT id, digest FROM api_keys").fetchall()
    assert rows == [(key.id, hashlib.sha256(secret.encode()).hexdigest())]


# -- authenticating ---------------------------------------------------------------------------


def test_authenticate_returns_the_key_a_secret_belongs_to(ring: KeyRing) -> None:
    alice_secret, alice = ring.create(["alice"])
    admin_secret, admin = ring.create(admin=True)
    assert ring.authenticate(alice_secret) == alice
    assert ring.authenticate(admin_secret) == admin


@pytest.mark.parametrize(
    "secret",
    [None, "", "   ", "egk_", "Bearer egk_x", "key_0123456789ab", "egk_" + "A" * 43,
     "egk_" + "A" * 42 + "!", "egk_" + "A" * 44, "x" * 10_000, "\udcff", b"egk_", 42],
)  # fmt: skip
def test_missing_malformed_and_unknown_secrets_are_unauthenticated(
    ring: KeyRing, secret: object
) -> None:
    real, _ = ring.create(["alice"])
    with pytest.raises(AuthenticationError) as caught:
        ring.authenticate(secret)  # type: ignore[arg-type]
    assert caught.value.http_status == 401 and real not in caught.value.message


def test_a_secret_close_to_a_real_one_is_unknown(ring: KeyRing) -> None:
    secret, _ = ring.create(["alice"])
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for wrong in (flipped, secret.upper() if secret.upper() != secret else secret.lower(),
                  " " + secret, secret + "\n"):  # fmt: skip
        with pytest.raises(AuthenticationError, match="unknown API key"):
            ring.authenticate(wrong)


def test_a_key_of_another_kind_is_told_what_an_engrain_key_looks_like(ring: KeyRing) -> None:
    """The natural mistake: the model provider's key (``sk-…``) where engrain's goes."""
    foreign = "sk-proj-" + "x" * 40
    with pytest.raises(AuthenticationError) as caught:
        ring.authenticate(foreign)
    assert caught.value.message.startswith("unknown API key: engrain's keys start with egk_")
    assert "x" * 10 not in caught.value.message  # never echoed
    secret, _ = ring.create(["alice"])
    with pytest.raises(AuthenticationError) as caught:
        ring.authenticate(secret[:-1])  # an engrain key cut short: unknown, nothing more
    assert caught.value.message == "unknown API key"


def test_a_revoked_key_is_refused_at_once(ring: KeyRing) -> None:
    secret, key = ring.create(["alice"])
    kept, _ = ring.create(["alice"])
    revoked = ring.revoke(key.id, now=NOW)
    assert revoked.revoked_at == NOW and revoked.revoked and not revoked.allows("alice")
    with pytest.raises(AuthenticationError, match=f"{key.id} was revoked"):
        ring.authenticate(secret)
    assert ring.authenticate(kept).users == ("alice",)
    # revoking again keeps the first time; an unknown id is not found
    assert ring.revoke(key.id, now=NOW + timedelta(days=1)).revoked_at == NOW
    with pytest.raises(NotFoundError):
        ring.revoke("key_000000000000")
    with pytest.raises(ValidationError):
        ring.revoke("")


def test_list_shows_every_key_oldest_first_without_secrets(ring: KeyRing) -> None:
    made = [ring.create(["alice"], now=NOW + timedelta(minutes=m)) for m in (2, 0, 1)]
    ring.revoke(made[0][1].id, now=NOW + timedelta(minutes=3))
    listed = ring.list()
    assert [k.id for k in listed] == [made[1][1].id, made[2][1].id, made[0][1].id]
    assert listed[-1].revoked_at == NOW + timedelta(minutes=3)
    assert not any(s in repr(listed) or digest(s) in repr(listed) for s, _ in made)


# -- authorizing ------------------------------------------------------------------------------


ALICE, ALICE_BOB, ALICE_WEB, ADMIN = "alice", "alice+bob", "alice@web", "admin"
#: (key, user, project) → allowed: every kind of key against every kind of request.
MATRIX = [
    (ALICE, "alice", None, True),
    (ALICE, "alice", "web", True),
    (ALICE, "bob", None, False),
    (ALICE, "Alice", None, False),  # user ids are exact
    (ALICE, "alice ", None, False),
    (ALICE, "ali", None, False),
    (ALICE, "alice2", None, False),
    (ALICE_BOB, "alice", None, True),
    (ALICE_BOB, "bob", "api", True),
    (ALICE_BOB, "carol", None, False),
    (ALICE_WEB, "alice", "web", True),
    (ALICE_WEB, "alice", "api", False),
    (ALICE_WEB, "alice", "Web", False),
    (ALICE_WEB, "alice", None, False),  # no project would reach every project
    (ALICE_WEB, "bob", "web", False),
    (ADMIN, "alice", None, True),
    (ADMIN, "anyone at all", "any", True),
]


@pytest.fixture
def scoped(ring: KeyRing) -> dict[str, ApiKey]:
    return {
        ALICE: ring.create(["alice"])[1],
        ALICE_BOB: ring.create(["alice", "bob"])[1],
        ALICE_WEB: ring.create(["alice"], projects=["web"])[1],
        ADMIN: ring.create(admin=True)[1],
    }


@pytest.mark.parametrize(("key", "user", "project", "allowed"), MATRIX)
def test_authorize_matrix(
    ring: KeyRing,
    scoped: dict[str, ApiKey],
    key: str,
    user: str,
    project: str | None,
    allowed: bool,
) -> None:
    assert scoped[key].allows(user, project) is allowed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserIdWarning)
        if allowed:
            ring.authorize(scoped[key], user, project)
        else:
            with pytest.raises(PermissionDeniedError) as caught:
                ring.authorize(scoped[key], user, project)
            assert caught.value.http_status == 403 and scoped[key].id in caught.value.message


def test_user_ids_are_compared_after_nfc(ring: KeyRing) -> None:
    _, key = ring.create(["jos\u00e9"], projects=["caf\u00e9"])
    assert key.allows("jose\u0301", "cafe\u0301")
    ring.authorize(key, "jose\u0301", "cafe\u0301")


def test_a_revoked_key_object_allows_nothing(ring: KeyRing) -> None:
    _, key = ring.create(admin=True)
    revoked = ring.revoke(key.id)
    assert not revoked.allows("alice")
    with pytest.raises(PermissionDeniedError, match="revoked"):
        ring.authorize(revoked, "alice")


def test_authorize_refuses_malformed_ids_as_invalid_input(
    ring: KeyRing, scoped: dict[str, ApiKey]
) -> None:
    for user, project in [("", None), ("a\x00", None), ("alice", ""), (None, None)]:
        with pytest.raises(ValidationError):
            ring.authorize(scoped[ADMIN], user, project)  # type: ignore[arg-type]
    assert not scoped[ALICE].allows(None)  # type: ignore[arg-type]


# -- one store, several engines and processes --------------------------------------------------


def test_two_engines_on_one_file_see_each_others_keys_and_revocations(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with (
        Engine(settings=settings, embedder=HashEmbedder()) as one,
        Engine(settings=settings, embedder=HashEmbedder()) as two,
    ):
        first, second = KeyRing(one.store), KeyRing(two.store)
        secret, key = first.create(["alice"])
        assert second.authenticate(secret) == key
        assert [k.id for k in second.list()] == [key.id]
        second.revoke(key.id)
        with pytest.raises(AuthenticationError, match="revoked"):
            first.authenticate(secret)


def test_another_process_sees_a_key_and_its_revocation(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    engine = Engine(f"sqlite:///{db}", embedder=HashEmbedder())
    ring = KeyRing(engine.store)
    secret, key = ring.create(["alice"], projects=["web"])
    script = textwrap.dedent(
        """
        import sys
        from engrain.errors import AuthenticationError
        from engrain.keys import KeyRing
        from engrain.store.sqlite import SQLiteStore
        ring = KeyRing(SQLiteStore(sys.argv[1]))
        try:
            key = ring.authenticate(sys.argv[2])
        except AuthenticationError as exc:
            print("refused", exc.message)
        else:
            print("ok", key.id, ",".join(key.users), ",".join(key.projects))
        """
    )

    def other_process() -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, str(db), secret],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return done.stdout.strip()

    with engine:
        assert other_process() == f"ok {key.id} alice web"
        ring.revoke(key.id)
        assert other_process() == f"refused API key {key.id} was revoked"


# -- stores written before keys ---------------------------------------------------------------


def test_a_sqlite_file_from_before_keys_gains_them_and_keeps_its_memories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engrain.store import sqlite_schema

    db = tmp_path / "old.db"
    settings = make_settings(tmp_path, url=f"sqlite:///{db}")
    with monkeypatch.context() as patch:
        # every migration but the keys' (004): the rest of today's code needs the others
        patch.setattr(
            sqlite_schema, "MIGRATIONS", sqlite_schema.MIGRATIONS[:3] + sqlite_schema.MIGRATIONS[4:]
        )
        with Engine(settings=settings, embedder=HashEmbedder()) as old:
            kept = old.remember("I prefer tabs over spaces", "alice", "preference").memory_id
    assert "004_api_keys" not in _sql(db, "SELECT name FROM migrations")
    with Engine(settings=settings, embedder=HashEmbedder()) as engine:
        assert "004_api_keys" in _sql(db, "SELECT name FROM migrations")
        secret, key = KeyRing(engine.store).create(["alice"])
        assert KeyRing(engine.store).authenticate(secret) == key
        assert [m.id for m in engine.store.query("alice")] == [kept]


def _sql(db: Path, query: str) -> list[str]:
    with sqlite3.connect(db) as raw:
        return [r[0] for r in raw.execute(query)]


def test_a_postgres_database_from_before_keys_gains_them(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres = pytest.importorskip("engrain.store.postgres")
    with monkeypatch.context() as patch:
        # every migration but the keys' (002): the rest of today's code needs the others
        patch.setattr(
            postgres.schema, "MIGRATIONS", postgres.MIGRATIONS[:1] + postgres.MIGRATIONS[2:]
        )
        old_store = postgres.PostgresStore(pg_url, pool_size=1)
        with Engine(
            settings=make_settings(tmp_path), store=old_store, embedder=HashEmbedder()
        ) as old:
            kept = old.remember("I prefer tabs over spaces", "alice", "preference").memory_id
            with pytest.raises(StoreError):  # no api_keys table yet
                old_store.key_records()
    store = postgres.PostgresStore(pg_url, pool_size=1)
    try:
        secret, key = KeyRing(store).create(["alice"])
        assert KeyRing(store).authenticate(secret) == key
        assert [m.id for m in store.query("alice")] == [kept]
    finally:
        store.close()


# -- no look-alike gets through ---------------------------------------------------------------

_ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs")), min_size=1, max_size=8
).filter(str.strip)


@settings(max_examples=200, deadline=None)
@given(
    users=st.lists(_ids, min_size=1, max_size=3),
    asked=_ids,
    projects=st.lists(_ids, max_size=2),
)
def test_a_key_allows_exactly_its_users_never_a_look_alike(
    users: list[str], asked: str, projects: list[str]
) -> None:
    """Whatever the ids — case variants, accents composed or not, spaces — a key allows a
    user only if the id equals one of its users after NFC, and nothing else."""
    ring = KeyRing(MemoryStore())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserIdWarning)
        secret, _ = ring.create(users, projects=projects)
        key = ring.authenticate(secret)
        nfc = {unicodedata.normalize("NFC", u) for u in users}
        project = unicodedata.normalize("NFC", projects[0]) if projects else None
        expected = unicodedata.normalize("NFC", asked) in nfc
        assert key.allows(asked, project) is expected
        for variant in {asked.upper(), asked.lower(), f" {asked}", asked.casefold()} - {asked}:
            allowed = unicodedata.normalize("NFC", variant) in nfc
            assert key.allows(variant, project) is allowed
        for user in users:
            assert key.allows(user, project)
            assert key.allows(unicodedata.normalize("NFD", user), project)
        if projects:
            assert not key.allows(users[0], None)
