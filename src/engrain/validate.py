"""The one boundary check: every public call and every import record passes here first.

Each function takes a value as a caller sent it, checks its type, range and encoding, and
returns it typed and normalised, or raises :class:`~engrain.errors.ValidationError` (or a
subclass) whose message starts with the field's name. Nothing past this module checks types
again, and nothing is read or written before it has run, so a refused call writes nothing.

Text rules, for memory content, queries and names alike:

* it must be a ``str`` that UTF-8 can encode (a lone surrogate, e.g. from undecodable
  bytes read with ``surrogateescape``, is refused rather than stored);
* control characters other than tab, newline and carriage return (NUL included) are
  removed from content: no backend can store NUL, and they carry no meaning;
* text that is empty once control, format (zero-width, BOM…) and whitespace characters are
  set aside is :class:`~engrain.errors.EmptyInputError`.

User ids (and project, session and memory ids) are opaque, exact strings: case and
surrounding whitespace are significant (``"Ada"``, ``"ada"`` and ``" ada "`` are three
users), the only normalisation is Unicode NFC (so a composed and a decomposed ``"é"`` are
one user), and control or format characters are refused. An id with surrounding whitespace
is almost always a caller's slip, so it is accepted (refusing it would lock out data already
stored under it) but warned about with :class:`UserIdWarning`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import unicodedata
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import Any, TypeVar

import numpy as np

from engrain.errors import (
    EmptyInputError,
    InputTooLargeError,
    UnknownValueError,
    ValidationError,
)
from engrain.model import (
    ENGINE_METADATA,
    Kind,
    Memory,
    MemoryType,
    Provenance,
    Turn,
    as_utc,
    content_hash,
    new_id,
)

#: The longest id (user, project, session, memory, key) or domain tag accepted, in characters.
MAX_ID_CHARS = 256
#: The largest integer a call takes for a budget, a count of results, a window, a turn, a
#: limit or an offset: every surface's bound (HTTP's schema, MCP, the CLI and the client
#: use this one), and one every backend's integer columns and ``LIMIT`` hold.
MAX_INT = 2**31 - 1
#: The deepest a memory's metadata may nest (``{"a": {"b": 1}}`` is 2 deep). Deeper than
#: any record we know of; far below the depth where a JSON parser gives up (Python's
#: recursion limit near 1,000, which made the refusal an accident of the encoder's stack).
MAX_METADATA_DEPTH = 64

_KEEP = frozenset("\t\n\r")
_FLOAT32_MAX = float(np.finfo(np.float32).max)

E = TypeVar("E")


class UserIdWarning(UserWarning):
    """A user id with surrounding whitespace: a different user from the trimmed one."""


# -- text ----------------------------------------------------------------------------------


def text(value: object, field: str = "text", *, max_chars: int | None = None) -> str:
    """Content or a query: a non-empty, encodable string within ``max_chars``, with control
    characters other than tab and line breaks removed."""
    checked = _string(value, field)
    if any(_is_control(c) for c in checked):
        checked = "".join(c for c in checked if not _is_control(c))
    if not any(_is_visible(c) for c in checked):
        raise EmptyInputError(f"{field} is empty (no visible characters)")
    if max_chars is not None and len(checked) > max_chars:
        raise InputTooLargeError(
            f"{field} has {len(checked):,} characters; the limit is {max_chars:,} "
            "(setting max_text_chars)"
        )
    return checked


def user_id(value: object, field: str = "user_id") -> str:
    """A user id: an exact, NFC-normalised string (see the module's rules)."""
    checked = identifier(value, field)
    if checked != checked.strip():
        warnings.warn(
            f"{field} {checked!r} has surrounding whitespace: it is a different user from "
            f"{checked.strip()!r}",
            UserIdWarning,
            stacklevel=_callers_level(),
        )
    return checked


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside engrain, seen from the function that
    calls this: a warning names the caller's line however deep in engrain the check runs
    (a public method, its gate ``lifecycle.admitted``, a helper)."""
    inside = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: FrameType | None = sys._getframe(2)  # the function that warns is level 1
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(inside):
        frame = frame.f_back
        level += 1
    return level


def identifier(value: object, field: str) -> str:
    """An id (memory, project, session, key): a non-empty string of at most
    :data:`MAX_ID_CHARS` characters without control or format characters, NFC-normalised."""
    checked = unicodedata.normalize("NFC", _string(value, field))
    if not checked.strip():
        raise EmptyInputError(f"{field} is empty")
    if len(checked) > MAX_ID_CHARS:
        raise InputTooLargeError(f"{field} is longer than {MAX_ID_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in checked):
        raise ValidationError(f"{field} contains control or invisible characters")
    return checked


def optional_identifier(value: object, field: str) -> str | None:
    """``None``, or an :func:`identifier`."""
    return None if value is None else identifier(value, field)


def identifiers(value: object, field: str = "memory_ids") -> list[str]:
    """One id or a list of ids (deduplicated, in order); at least one."""
    if isinstance(value, str):
        return [identifier(value, field)]
    if isinstance(value, bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(f"{field} must be an id or a list of ids, not {_name(value)}")
    if not value:
        raise EmptyInputError(f"{field} is empty")
    return list(dict.fromkeys(identifier(v, f"{field}[{i}]") for i, v in enumerate(value)))


def domains(value: object, field: str = "domains") -> tuple[str, ...]:
    """Domain tags: ``None``, one string or a list of strings; lower-cased, deduplicated."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if isinstance(items, bytes | bytearray | Mapping) or not isinstance(items, Sequence):
        raise ValidationError(f"{field} must be a string or a list of strings, not {_name(value)}")
    seen: dict[str, None] = {}
    for i, item in enumerate(items):
        tag = _string(item, f"{field}[{i}]").strip().lower()
        if any(unicodedata.category(c) in ("Cc", "Cf") for c in tag):
            raise ValidationError(f"{field}[{i}] contains control or invisible characters")
        if len(tag) > MAX_ID_CHARS:
            raise InputTooLargeError(f"{field}[{i}] is longer than {MAX_ID_CHARS} characters")
        if tag:
            seen.setdefault(tag, None)
    return tuple(seen)


# -- numbers, flags, times --------------------------------------------------------------------


def unit(value: object, field: str) -> float:
    """A finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{field} must be a number in [0, 1], not {_name(value)}")
    if isinstance(value, int):  # compared as an int: a huge one has no float (OverflowError)
        if value not in (0, 1):
            shown = f"{value:,}" if abs(value) < 10**100 else "a number of more than 100 digits"
            raise ValidationError(f"{field} must be a number in [0, 1], not {shown}")
        return float(value)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValidationError(f"{field} must be a number in [0, 1], not {value!r}")
    return float(value)


def integer(value: object, field: str, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """An ``int`` (not a bool, not a float) in ``[minimum, maximum]`` (by default at most
    :data:`MAX_INT`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, not {_name(value)}")
    if not minimum <= value <= maximum:
        shown = f"{value:,}" if abs(value) < 10**100 else "a number of more than 100 digits"
        raise ValidationError(f"{field} must be >= {minimum:,} and <= {maximum:,}, not {shown}")
    return value


def optional_integer(value: object, field: str, *, minimum: int = 0) -> int | None:
    """``None``, or an :func:`integer`."""
    return None if value is None else integer(value, field, minimum=minimum)


#: The largest usage count a caller may set: a 64-bit column holds it with room to count on.
MAX_COUNT = 2**62


def count(value: object, field: str = "access_count") -> int:
    """A usage count: an :func:`integer` in ``[0, MAX_COUNT]``."""
    return integer(value, field, maximum=MAX_COUNT)


def flag(value: object, field: str) -> bool:
    """A ``bool`` (``"no"`` or ``0`` are refused: they are not what they look like)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{field} must be true or false, not {_name(value)}")
    return value


def moment(value: object, field: str) -> datetime | None:
    """``None`` or a ``datetime`` (naive means UTC), as aware UTC."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(f"{field} must be a datetime, not {_name(value)}")
    try:
        return as_utc(value)
    except (OverflowError, ValueError) as exc:
        raise ValidationError(f"{field} is out of range: {exc}") from exc


def timestamp(value: object, field: str) -> datetime | None:
    """``None``, a ``datetime`` or an ISO-8601 string (JSON input), as aware UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise ValidationError(f"{field} is not an ISO-8601 time: {value!r}") from exc
    return moment(value, field)


# -- structured values ------------------------------------------------------------------------


def json_document(raw: str | bytes, field: str) -> object:
    """A JSON text (an import line) parsed, or :class:`ValidationError` starting with
    ``field`` and saying why: invalid JSON (with the column), bytes that are not UTF-8,
    nesting past the parser's depth, or an integer of more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4,300 by default: ``json`` raises a bare
    ``ValueError`` for it, which every caller of ``json.loads`` used to let through)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        # the position too: some of the parser's messages end in "at" and need it
        where = f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
        raise ValidationError(f"{field}: invalid JSON: {where}") from exc
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{field} is not valid UTF-8") from exc
    except RecursionError as exc:  # nesting past the parser's depth: bad input
        raise ValidationError(f"{field}: JSON nested too deeply") from exc
    except ValueError as exc:  # int(): more digits than Python converts
        raise ValidationError(
            f"{field}: a number in the JSON has more than {sys.get_int_max_str_digits():,} digits"
        ) from exc


def metadata(
    value: object, field: str = "metadata", *, max_chars: int | None = None
) -> dict[str, Any]:
    """A JSON object (string keys, JSON values, encodable text) nested at most
    :data:`MAX_METADATA_DEPTH` deep; ``None`` is ``{}``. With ``max_chars`` (a memory's
    metadata: the ``max_text_chars`` its content may have), its JSON may be at most that
    many characters, so a memory's metadata is never larger than its content may be."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a mapping, not {_name(value)}")
    _json_values(value, field)
    try:
        encoded = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # what _json_values let through: a subclass's
        raise ValidationError(f"{field} must be a JSON object: {exc}") from exc
    if max_chars is not None and len(encoded) > max_chars:
        raise InputTooLargeError(
            f"{field} has {len(encoded):,} characters as JSON; the limit is {max_chars:,} "
            "(setting max_text_chars)"
        )
    result: dict[str, Any] = json.loads(encoded)
    return result


def callers_metadata(value: object, *, max_chars: int | None = None) -> dict[str, Any]:
    """A caller's ``metadata`` for a memory (:func:`metadata`), holding none of the keys
    engrain writes there itself (:data:`~engrain.model.ENGINE_METADATA`): a caller's
    ``conflicts_with`` or ``history`` would be read as engrain's, and one of another shape
    broke every later call that read it."""
    checked = metadata(value, max_chars=max_chars)
    taken = sorted(ENGINE_METADATA & checked.keys())
    if taken:
        raise ValidationError(
            f"metadata.{taken[0]}: a key engrain keeps itself in a memory's metadata "
            f"({', '.join(sorted(ENGINE_METADATA))}); name yours otherwise"
        )
    return checked


def _engine_metadata(meta: Mapping[str, Any], field: str) -> None:
    """Refuse an exported memory's engine keys in another shape than engrain writes:
    ``conflicts_with`` and ``distinct_from`` lists of ids, ``corrects`` an id, ``history``
    a list of objects."""
    for key in ("conflicts_with", "distinct_from"):
        if key in meta and not (
            isinstance(meta[key], list) and all(isinstance(i, str) for i in meta[key])
        ):
            raise ValidationError(f"{field}.{key} must be a list of memory ids")
    if "corrects" in meta and not isinstance(meta["corrects"], str):
        raise ValidationError(f"{field}.corrects must be a memory id")
    history = meta.get("history", [])
    if not (isinstance(history, list) and all(isinstance(h, Mapping) for h in history)):
        raise ValidationError(f"{field}.history must be a list of objects")


def _json_values(value: Mapping[Any, Any], field: str) -> None:
    """Refuse, naming where, what ``json.dumps`` would change or choke on, before it runs:
    keys that are not strings (it writes ``1`` as ``"1"`` and ``True`` as ``"true"``,
    silently), values JSON has no word for (NaN, infinities, bytes, sets, objects), text
    UTF-8 cannot encode, integers Python will not print, and nesting deeper than
    :data:`MAX_METADATA_DEPTH` (it would recurse past the stack)."""
    pending: list[tuple[object, int, str]] = [(value, 1, field)]
    while pending:
        node, depth, where = pending.pop()
        if isinstance(node, str):
            _string(node, where)
            continue
        if isinstance(node, float) and not math.isfinite(node):
            raise ValidationError(f"{where} is {node!r}, which JSON cannot hold")
        if isinstance(node, int) and not isinstance(node, bool):
            try:
                str(node)
            except ValueError as exc:  # Python's limit on printing an int
                raise ValidationError(
                    f"{where} is an integer of more than {sys.get_int_max_str_digits():,} digits"
                ) from exc
            continue
        if node is None or isinstance(node, bool | float):
            continue
        if not isinstance(node, Mapping | list | tuple):
            raise ValidationError(
                f"{where} is of type {_name(node)}, not a JSON value (a string, number, true, "
                "false, null, list or object)"
            )
        if depth > MAX_METADATA_DEPTH:
            raise ValidationError(f"{field} is nested deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(node, Mapping):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise ValidationError(f"{where} has a key that is not a string: {key!r}")
                _string(key, f"{where} key {_shown(key)!r}")
                pending.append((item, depth + 1, f"{where}.{_shown(key)}"))
        else:
            pending.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(node))


def memory_type(value: object, field: str = "memory_type") -> MemoryType:
    """One of the four memory types."""
    return _enum(MemoryType.parse, value, field)


def optional_memory_type(value: object, field: str = "memory_type") -> MemoryType | None:
    """``None``, or a :func:`memory_type`."""
    return None if value is None else memory_type(value, field)


def memory_types(value: object, field: str = "memory_types") -> list[MemoryType] | None:
    """``None`` (any type) or a list of memory types."""
    if value is None:
        return None
    if isinstance(value, str):
        return [memory_type(value, field)]
    if isinstance(value, bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(f"{field} must be a list of memory types, not {_name(value)}")
    return [memory_type(v, f"{field}[{i}]") for i, v in enumerate(value)]


def kind(value: object, field: str = "kind") -> Kind:
    """One of the memory kinds."""
    return _enum(Kind.parse, value, field)


def turns(value: object, *, max_chars: int | None = None) -> list[Turn]:
    """A conversation: a non-empty list of :class:`Turn` or mappings with ``speaker``,
    ``text``, ``turn_id`` (or LoCoMo's ``dia_id``) and ``at`` (datetime or ISO string)."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(f"turns must be a list of turns, not {_name(value)}")
    if not value:
        raise EmptyInputError("turns is empty: a conversation needs at least one turn")
    return [_turn(t, i, max_chars) for i, t in enumerate(value)]


def _speaker(value: object, field: str) -> str:
    """A turn's speaker, which the chunk's content will carry (``"ada: …"``): a string with
    control characters removed, like content's, and surrounding whitespace."""
    checked = _string(value, field)
    return "".join(c for c in checked if not _is_control(c)).strip()


def _turn(value: object, index: int, max_chars: int | None) -> Turn:
    field = f"turns[{index}]"
    if isinstance(value, Turn):
        raw: Mapping[str, Any] = {"speaker": value.speaker, "text": value.text,
                                  "turn_id": value.turn_id, "at": value.at}  # fmt: skip
    elif isinstance(value, Mapping):
        raw = value
    else:
        raise ValidationError(f"{field} must be a Turn or a mapping, not {_name(value)}")
    speaker = raw.get("speaker")
    turn_id = raw.get("turn_id", raw.get("dia_id"))
    return Turn(
        speaker="" if speaker is None else _speaker(speaker, f"{field}.speaker"),
        text=text(raw.get("text"), f"{field}.text", max_chars=max_chars),
        turn_id=optional_identifier(turn_id, f"{field}.turn_id"),
        at=timestamp(raw.get("at"), f"{field}.at"),
    )


# -- import records ---------------------------------------------------------------------------

_STRINGS = ("project", "session_id", "key", "source_session_id", "superseded_by")
_UNITS = ("importance", "confidence", "usefulness")
_FLAGS = ("pinned", "muted", "compressed", "compression_source")
_TIMES = ("event_at", "last_accessed_at", "promoted_at")


@dataclass(frozen=True)
class StateRecord:
    """An exported per-user state document (learned co-occurrence, context records…)."""

    user_id: str
    namespace: str
    key: str
    value: dict[str, Any]


def memory_record(record: Mapping[str, Any], *, max_chars: int | None = None) -> Memory:
    """An exported memory (``Memory.to_dict(with_embedding=True)``), checked field by field:
    wrong types, out-of-range numbers and malformed times are refused, never coerced."""
    content = text(record.get("content"), "content", max_chars=max_chars)
    created = timestamp(record.get("created_at"), "created_at")
    if created is None:
        raise ValidationError("created_at is required")
    fields: dict[str, Any] = {
        "id": new_id() if record.get("id") is None else identifier(record["id"], "id"),
        "user_id": user_id(record.get("user_id")),
        "content": content,
        "memory_type": memory_type(record.get("memory_type")),
        "kind": kind(record.get("kind")),
        "created_at": created,
        "updated_at": timestamp(record.get("updated_at"), "updated_at") or created,
        "domains": _tag_list(record.get("domains")),
        "access_count": count(record.get("access_count", 0)),
        # no size limit: an exported memory's metadata holds the texts dedup merges replaced
        # (its history), which may outgrow what one call may send; a round trip keeps it
        "provenance": _provenance(record.get("provenance")),
        "content_hash": content_hash(content),
        "embedding": _embedding(record.get("embedding")),
    }
    for name in _STRINGS:
        fields[name] = optional_identifier(record.get(name), name)
    for name in _UNITS:
        if record.get(name) is not None:
            fields[name] = unit(record[name], name)
    for name in _FLAGS:
        if record.get(name) is not None:
            fields[name] = flag(record[name], name)
    for name in _TIMES:
        fields[name] = timestamp(record.get(name), name)
    return Memory(**fields)


def state_record(record: Mapping[str, Any]) -> StateRecord:
    """An exported state document: ``user_id``, ``namespace``, ``key`` and a JSON ``value``."""
    value = record.get("value")
    if not isinstance(value, Mapping):
        raise ValidationError(f"value must be a JSON object, not {_name(value)}")
    return StateRecord(
        user_id=user_id(record.get("user_id")),
        namespace=identifier(record.get("namespace"), "namespace"),
        key=identifier(record.get("key"), "key"),
        value=metadata(value, "value"),
    )


def attached_states(value: object, owner: str) -> list[StateRecord]:
    """The ``state`` list an exported memory record carries for its user: documents of
    ``namespace``, ``key`` and a JSON object ``value``, owned by ``owner``."""
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(f"state must be a list of state documents, not {_name(value)}")
    docs = []
    for i, doc in enumerate(value):
        if not isinstance(doc, Mapping):
            raise ValidationError(f"state[{i}] must be an object, not {_name(doc)}")
        try:
            docs.append(state_record({**doc, "user_id": owner}))
        except ValidationError as exc:
            raise type(exc)(f"state[{i}].{exc.message}") from exc
    return docs


def _tag_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # an export always writes a list; a string is a mistake
        raise ValidationError(f"domains must be a list of strings, not str ({value!r})")
    return domains(value)


def _provenance(value: object) -> Provenance:
    if value is None:
        return Provenance()
    if not isinstance(value, Mapping):
        raise ValidationError(f"provenance must be a mapping, not {_name(value)}")
    ids = value.get("turn_ids") or []
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise ValidationError("provenance.turn_ids must be a list of ids")
    meta = metadata(value.get("metadata"), "provenance.metadata")
    _engine_metadata(meta, "provenance.metadata")
    return Provenance(
        tuple(identifier(t, f"provenance.turn_ids[{i}]") for i, t in enumerate(ids)), meta
    )


def _embedding(value: object) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(f"embedding must be a list of numbers, not {_name(value)}")
    if not value or not all(  # an int is finite (and a huge one has no float to test)
        (isinstance(x, int) and not isinstance(x, bool))
        or (isinstance(x, float) and math.isfinite(x))
        for x in value
    ):
        raise ValidationError("embedding must be a non-empty list of finite numbers")
    if any(abs(x) > _FLOAT32_MAX for x in value):  # stored as float32: it would be infinite
        raise ValidationError(
            f"embedding holds a number beyond {_FLOAT32_MAX:.4g}, which a float32 vector "
            "cannot hold"
        )
    return np.asarray(value, dtype=np.float32)


# -- helpers ----------------------------------------------------------------------------------


def _enum(parse: Callable[[str], E], value: object, field: str) -> E:
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {_name(value)}")
    try:
        return parse(value)
    except UnknownValueError as exc:
        raise UnknownValueError(f"{field}: {exc.message}") from exc


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"{field} contains characters UTF-8 cannot encode (a lone surrogate at position "
            f"{exc.start}: undecodable input?)"
        ) from exc
    return value


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" and char not in _KEEP


def _is_visible(char: str) -> bool:
    return not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf", "Zs")


def _shown(key: str, limit: int = 40) -> str:
    """A metadata key as a message names it: at most ``limit`` characters."""
    return key if len(key) <= limit else key[:limit] + "…"


def _name(value: object) -> str:
    return "None" if value is None else type(value).__name__
