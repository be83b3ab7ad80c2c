"""API keys: who may call the server, and for which users.

A key is a random secret (``egk_`` + 43 URL-safe characters: 256 bits from
:func:`secrets.token_urlsafe`) shown once, when it is created. The store keeps only its
SHA-256 digest beside a public id (``key_`` + 12 hex digits, safe to log), the users it may
act for, optionally the projects it is limited to, and whether it is an admin key (any user,
and key management). Keys are store-wide, so every process over one store — server workers,
the CLI — sees the same keys, and a revocation counts for all of them on their next request:
:meth:`KeyRing.authenticate` asks the store every time and caches nothing.

>>> ring = KeyRing(engine.store)
>>> secret, key = ring.create(["alice"], name="alice's laptop")
>>> ring.authorize(ring.authenticate(secret), "alice")      # passes
>>> ring.authorize(ring.authenticate(secret), "bob")        # PermissionDeniedError
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engrain import validate
from engrain.errors import (
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    ValidationError,
)
from engrain.store.base import KeyRecord, Store

#: Every secret starts with this, so a leaked key is recognisable (secret scanners, logs).
SECRET_PREFIX = "egk_"
#: ``secrets.token_urlsafe(32)``: 32 random bytes, 43 base64url characters.
SECRET_BYTES = 32
SECRET_CHARS = 43
ID_PREFIX = "key_"
_ID_ATTEMPTS = 3
_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def digest(secret: str) -> str:
    """The SHA-256 of ``secret`` (hex): what the store keeps instead of the secret.

    A plain hash, not a slow password hash (bcrypt, scrypt): those exist to make guessing a
    low-entropy password expensive, and a 256-bit random secret cannot be guessed however
    fast the hash is — while every request pays for the hash, and a slow one would cost
    more than the request."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """An API key as callers see it: never its secret nor its digest."""

    id: str
    name: str | None
    #: the users this key may act for (empty only for admin keys)
    users: tuple[str, ...]
    #: empty: every project of those users
    projects: tuple[str, ...]
    #: an admin key may act for any user and manage keys
    admin: bool
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def from_record(cls, record: KeyRecord) -> ApiKey:
        """The public part of a stored key."""
        return cls(
            id=record.id,
            name=record.name,
            users=record.users,
            projects=record.projects,
            admin=record.admin,
            created_at=record.created_at,
            revoked_at=record.revoked_at,
        )

    @property
    def revoked(self) -> bool:
        """Whether the key was revoked (it then allows nothing)."""
        return self.revoked_at is not None

    def allows(self, user_id: str, project: str | None = None) -> bool:
        """Whether this key may act for ``user_id`` (compared exactly, after NFC, like every
        user id) and, for a key limited to projects, in ``project``. A project-limited key
        allows no call without a project: such a call reaches every project of the user. A
        revoked key allows nothing; an admin key everything else."""
        if self.revoked:
            return False
        if self.admin:
            return True
        if not isinstance(user_id, str) or _nfc(user_id) not in self.users:
            return False
        if not self.projects:
            return True
        return isinstance(project, str) and _nfc(project) in self.projects

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (no secret, no digest)."""
        return {
            "id": self.id,
            "name": self.name,
            "users": list(self.users),
            "projects": list(self.projects),
            "admin": self.admin,
            "created_at": self.created_at.isoformat(),
            "revoked_at": None if self.revoked_at is None else self.revoked_at.isoformat(),
        }


class KeyRing:
    """The API keys of one store: create, list, revoke, and check the key a request presents.

    Nothing is cached: :meth:`authenticate` reads the store on every call (one indexed row),
    so a key created or revoked by any process counts at once everywhere."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self,
        users: Sequence[str] = (),
        *,
        projects: Sequence[str] = (),
        admin: bool = False,
        name: str | None = None,
        now: datetime | None = None,
    ) -> tuple[str, ApiKey]:
        """A new key: ``(secret, key)``. The secret is returned here and never again — only
        its hash is stored.

        A key acts for ``users`` (at least one), optionally only in ``projects``; an admin
        key acts for every user and project, so it takes neither. Every value is checked
        (:class:`ValidationError`) before anything is written."""
        record = _prepared(users, projects, admin, name, now)
        secret = SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
        for _ in range(_ID_ATTEMPTS):  # 48-bit ids: a collision is rare, not impossible
            key_id = ID_PREFIX + secrets.token_hex(6)
            stored = KeyRecord(
                id=key_id,
                digest=digest(secret),
                name=record.name,
                users=record.users,
                projects=record.projects,
                admin=record.admin,
                created_at=record.created_at,
            )
            if self.store.put_key(stored):
                return secret, ApiKey.from_record(stored)
        raise StoreError(f"{_ID_ATTEMPTS} random key ids in a row were taken: is the store sane?")

    def list(self) -> list[ApiKey]:
        """Every key, revoked ones included, oldest first."""
        return [ApiKey.from_record(r) for r in self.store.key_records()]

    def revoke(self, key_id: str, now: datetime | None = None) -> ApiKey:
        """Revoke the key ``key_id`` (at ``now``, default the current time) for every
        process at once; the key as it now is. Revoking a revoked key changes nothing.
        :class:`NotFoundError` if there is no such key."""
        checked = validate.identifier(key_id, "key_id")
        at = validate.moment(now, "now") or datetime.now(UTC)
        if not self.store.revoke_key(checked, at):
            raise NotFoundError(f"no API key {checked!r}")
        found = next((k for k in self.store.key_records() if k.id == checked), None)
        if found is None:  # deleted in between by another process's tool
            raise NotFoundError(f"no API key {checked!r}")
        return ApiKey.from_record(found)

    def authenticate(self, secret: str | None) -> ApiKey:
        """The key ``secret`` belongs to; :class:`AuthenticationError` if it is missing,
        malformed, unknown or revoked (the message never repeats the secret)."""
        if secret is None or (isinstance(secret, str) and not secret.strip()):
            raise AuthenticationError("no API key: send 'Authorization: Bearer <key>'")
        if isinstance(secret, str) and not secret.startswith(SECRET_PREFIX):  # sk-…: a model's
            raise AuthenticationError(
                f"unknown API key: engrain's keys start with {SECRET_PREFIX} "
                "(engrain keys create makes one)"
            )
        if not _well_formed(secret):
            raise AuthenticationError("unknown API key")
        wanted = digest(secret)
        record = self.store.key_record(wanted)
        # The row was found by its digest (an index lookup, whose timing depends only on a
        # hash of the secret); the final comparison is constant-time all the same.
        if record is None or not hmac.compare_digest(record.digest, wanted):
            raise AuthenticationError("unknown API key")
        if record.revoked_at is not None:
            raise AuthenticationError(f"API key {record.id} was revoked")
        return ApiKey.from_record(record)

    def authorize(self, key: ApiKey, user_id: str, project: str | None = None) -> None:
        """Pass if ``key`` may act for ``user_id`` (in ``project``), else
        :class:`PermissionDeniedError`; a malformed user id or project is a
        :class:`ValidationError`."""
        user = validate.identifier(user_id, "user_id")
        scope = validate.optional_identifier(project, "project")
        if key.allows(user, scope):
            return
        if key.revoked:
            raise PermissionDeniedError(f"API key {key.id} was revoked")
        if user not in key.users:
            raise PermissionDeniedError(f"API key {key.id} may not act for user {user!r}")
        shown = ", ".join(map(repr, key.projects))
        if scope is None:
            raise PermissionDeniedError(
                f"API key {key.id} is limited to projects {shown}: name one of them"
            )
        raise PermissionDeniedError(
            f"API key {key.id} may not act in project {scope!r} (only {shown})"
        )


def _prepared(
    users: Sequence[str],
    projects: Sequence[str],
    admin: object,
    name: object,
    now: datetime | None,
) -> KeyRecord:
    """The checked scope of a new key (id and digest still empty)."""
    is_admin = validate.flag(admin, "admin")
    user_ids = _unique(users, "users", validate.user_id)
    project_ids = _unique(projects, "projects", validate.identifier)
    if is_admin and (user_ids or project_ids):
        raise ValidationError(
            "an admin key acts for every user and project: give it no users or projects"
        )
    if not is_admin and not user_ids:
        raise ValidationError("a key needs at least one user (or must be an admin key)")
    return KeyRecord(
        id="",
        digest="",
        name=validate.optional_identifier(name, "name"),
        users=user_ids,
        projects=project_ids,
        admin=is_admin,
        created_at=validate.moment(now, "now") or datetime.now(UTC),
    )


def _unique(values: object, field: str, check: Any) -> tuple[str, ...]:
    """Ids checked one by one, deduplicated in order."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ValidationError(f"{field} must be a list of ids, not {type(values).__name__}")
    return tuple(dict.fromkeys(check(v, f"{field}[{i}]") for i, v in enumerate(values)))


def _well_formed(secret: object) -> bool:
    """Whether ``secret`` has the shape of a key engrain makes (nothing else is looked up)."""
    return (
        isinstance(secret, str)
        and len(secret) == len(SECRET_PREFIX) + SECRET_CHARS
        and secret.startswith(SECRET_PREFIX)
        and all(c in _URLSAFE for c in secret[len(SECRET_PREFIX) :])
    )


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)
