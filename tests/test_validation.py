"""The boundary check (``engrain.validate``), value by value: what is refused, with which
error and naming which field, and how accepted values are normalised."""

from __future__ import annotations

import unicodedata
import warnings
from datetime import UTC, datetime, timedelta, timezone

import pytest

from engrain import validate as v
from engrain.errors import EmptyInputError, InputTooLargeError, ValidationError
from engrain.model import Kind, MemoryType, Turn

REFUSED_TEXT = [
    (None, ValidationError),
    (42, ValidationError),
    (b"bytes", ValidationError),
    (["a"], ValidationError),
    ("", EmptyInputError),
    ("   \n\t ", EmptyInputError),
    ("\x00\x00", EmptyInputError),
    ("\u200b\u200c\ufeff", EmptyInputError),
    ("\x01\x02\x1b", EmptyInputError),
    ("\u00a0\u2003", EmptyInputError),
    ("ok\ud800", ValidationError),
    ("\udcff", ValidationError),
]


@pytest.mark.parametrize(("value", "error"), REFUSED_TEXT)
def test_text_refuses(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^content"):
        v.text(value, "content")


def test_text_removes_control_characters_but_keeps_line_breaks() -> None:
    assert v.text("a\x00b\x07c\td\ne\rf") == "ab" + "c\td\ne\rf"


def test_text_keeps_format_characters_inside_real_text() -> None:
    # a zero-width joiner inside an emoji sequence is meaning, not noise
    assert v.text("family \U0001f468\u200d\U0001f469") == "family \U0001f468\u200d\U0001f469"


def test_text_size_limit() -> None:
    assert v.text("x" * 10, max_chars=10) == "x" * 10
    with pytest.raises(InputTooLargeError, match="11 characters; the limit is 10"):
        v.text("x" * 11, max_chars=10)


def test_user_id_is_exact_but_nfc() -> None:
    assert v.user_id("Ada") == "Ada"
    assert v.user_id("Ada") != v.user_id("ada")
    decomposed = unicodedata.normalize("NFD", "José")
    assert decomposed != "José"
    assert v.user_id(decomposed) == "José"


def test_user_id_with_surrounding_whitespace_is_kept_and_warned() -> None:
    with pytest.warns(v.UserIdWarning, match="different user"):
        assert v.user_id(" ada ") == " ada "
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v.user_id("ada lovelace")  # inner spaces are fine


@pytest.mark.parametrize(
    "value", [None, 7, "", "   ", "a\x00b", "a\u200bb", "x" * 257, "\ud800", ["ada"]]
)
def test_user_id_refuses(value: object) -> None:
    with pytest.raises(ValidationError, match=r"^user_id"):
        v.user_id(value)


def test_identifiers() -> None:
    assert v.identifiers("a") == ["a"]
    assert v.identifiers(["a", "b", "a"]) == ["a", "b"]
    for bad in (None, [], 3, [None], b"ab", {"a": 1}):
        with pytest.raises(ValidationError, match=r"^memory_ids"):
            v.identifiers(bad)


def test_domains() -> None:
    assert v.domains(None) == ()
    assert v.domains("Python") == ("python",)
    assert v.domains(["Python", "python", " ", "Go"]) == ("python", "go")
    for bad in (123, [1], b"x", {"a": 1}):
        with pytest.raises(ValidationError, match=r"^domains"):
            v.domains(bad)


@pytest.mark.parametrize("good", [0, 0.5, 1, 1.0])
def test_unit_accepts(good: float) -> None:
    assert v.unit(good, "importance") == float(good)


@pytest.mark.parametrize("bad", [-0.01, 1.01, 7, float("nan"), float("inf"), True, "0.5", None])
def test_unit_refuses(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"^importance"):
        v.unit(bad, "importance")


@pytest.mark.parametrize("bad", [1.5, "100", True, None, -1])
def test_integer_refuses(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"^token_budget"):
        v.integer(bad, "token_budget")


def test_integer_range() -> None:
    assert v.integer(0, "n") == 0
    assert v.integer(5, "n", minimum=1, maximum=5) == 5
    with pytest.raises(ValidationError, match=">= 1"):
        v.integer(0, "top_k", minimum=1)
    with pytest.raises(ValidationError, match="<= 5"):
        v.integer(6, "n", maximum=5)
    assert v.optional_integer(None, "n") is None


@pytest.mark.parametrize("bad", ["no", "yes", 0, 1, None])
def test_flag_refuses_look_alikes(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"^pinned"):
        v.flag(bad, "pinned")


def test_moment_takes_datetimes_only() -> None:
    naive = datetime(2024, 1, 1, 12)
    assert v.moment(naive, "event_at") == datetime(2024, 1, 1, 12, tzinfo=UTC)
    paris = datetime(2024, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    assert v.moment(paris, "event_at") == datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert v.moment(None, "event_at") is None
    for bad in ("2024-01-01", 123, 1.5):
        with pytest.raises(ValidationError, match=r"^event_at"):
            v.moment(bad, "event_at")


def test_timestamp_also_takes_iso_strings() -> None:
    assert v.timestamp("2024-01-01", "at") == datetime(2024, 1, 1, tzinfo=UTC)
    for bad in ("garbage", 123, "2024-13-01"):
        with pytest.raises(ValidationError, match=r"^at"):
            v.timestamp(bad, "at")


def test_metadata() -> None:
    assert v.metadata(None) == {}
    assert v.metadata({"a": [1, "x"]}) == {"a": [1, "x"]}
    for bad in ([1], "x", {"a": object()}, {"a": float("nan")}, {"a": "\ud800"}):
        with pytest.raises(ValidationError, match=r"^metadata"):
            v.metadata(bad)


def test_enums() -> None:
    assert v.memory_type("Semantic") is MemoryType.SEMANTIC
    assert v.kind("preference") is Kind.PREFERENCE
    assert v.memory_types(None) is None
    assert v.memory_types(["episodic"]) == [MemoryType.EPISODIC]
    for bad in (3, "nope", None):
        with pytest.raises(ValidationError):
            v.memory_type(bad)
    with pytest.raises(ValidationError, match=r"^memory_types"):
        v.memory_types(3)


def test_turns() -> None:
    parsed = v.turns(
        [{"speaker": "Ada", "text": "hi", "dia_id": "D1:1", "at": "2024-01-01T10:00:00"},
         Turn("Bob", "hello", None, None)]
    )  # fmt: skip
    assert parsed[0] == Turn("Ada", "hi", "D1:1", datetime(2024, 1, 1, 10, tzinfo=UTC))
    assert parsed[1].text == "hello"
    cases = [
        ("not a list", "^turns must"),
        ([], "^turns is empty"),
        ([{"text": "x", "at": "garbage"}], r"^turns\[0\]\.at"),
        ([{"text": "x", "at": 123}], r"^turns\[0\]\.at"),
        ([{"text": None}], r"^turns\[0\]\.text"),
        ([{"text": "\u200b"}], r"^turns\[0\]\.text"),
        ([{"text": "ok", "speaker": 5}], r"^turns\[0\]\.speaker"),
        ([3], r"^turns\[0\] must"),
    ]
    for value, message in cases:
        with pytest.raises(ValidationError, match=message):
            v.turns(value)


EXPORTED = {
    "id": "m1", "user_id": "ada", "content": "Ada prefers tabs", "memory_type": "procedural",
    "kind": "preference", "domains": ["code"], "created_at": "2024-01-01T00:00:00+00:00",
    "importance": 0.7, "access_count": 3, "pinned": True, "embedding": [0.5, 0.5],
    "provenance": {"turn_ids": ["t1"], "metadata": {"src": "chat"}},
}  # fmt: skip


def test_memory_record_round_trips_an_export() -> None:
    memory = v.memory_record(EXPORTED)
    assert (memory.id, memory.user_id, memory.kind) == ("m1", "ada", Kind.PREFERENCE)
    assert memory.pinned
    assert memory.access_count == 3 and memory.domains == ("code",)
    assert memory.embedding is not None and memory.embedding.tolist() == [0.5, 0.5]
    again = v.memory_record(memory.to_dict(with_embedding=True))
    assert again == memory


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user_id", None), ("content", None), ("content", 42), ("domains", "abc"),
        ("domains", 5), ("importance", 7), ("access_count", -5), ("access_count", 1.5),
        ("pinned", "no"), ("muted", 1), ("created_at", "yesterday"), ("created_at", None),
        ("memory_type", "nope"), ("kind", 3), ("embedding", "0.5"), ("embedding", [True]),
        ("provenance", "x"), ("project", 5), ("id", ""),
    ],
)  # fmt: skip
def test_memory_record_refuses(field: str, value: object) -> None:
    record = {**EXPORTED, field: value}
    with pytest.raises(ValidationError, match=rf"^{field}"):
        v.memory_record(record)


def test_state_record() -> None:
    state = v.state_record({"user_id": "ada", "namespace": "cooccurrence", "key": "pairs",
                            "value": {"pairs": {"a|b": 1}}})  # fmt: skip
    assert state.value == {"pairs": {"a|b": 1}}
    with pytest.raises(ValidationError, match=r"^value"):
        v.state_record({"user_id": "ada", "namespace": "n", "key": "k", "value": [1]})
    with pytest.raises(ValidationError, match=r"^namespace"):
        v.state_record({"user_id": "ada", "namespace": None, "key": "k", "value": {}})
