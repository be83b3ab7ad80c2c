"""The limits ``validate.py`` sets once for every surface, at their edges: a memory's
metadata (JSON within ``max_text_chars`` characters, 64 deep, string keys), the integer
bound ``MAX_INT``, a domain tag's length, and a turn's speaker, which the stored content
carries. ``test_facade_validation.py`` holds the refusals' field names and that they write
nothing; the HTTP, MCP and CLI tests hold the same bound on their surfaces."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.errors import InputTooLargeError, ValidationError
from engrain.store import MemoryStore
from engrain.validate import MAX_ID_CHARS, MAX_INT, MAX_METADATA_DEPTH

from .conftest import NOW, make_settings

LIMIT = 1_000  # max_text_chars of the small engine below


@pytest.fixture
def small(tmp_path):  # type: ignore[no-untyped-def]
    """An engine whose calls take at most :data:`LIMIT` characters of text."""
    return Engine(settings=make_settings(tmp_path, max_text_chars=LIMIT), store=MemoryStore(),
                  embedder=HashEmbedder())  # fmt: skip


def sized(chars: int) -> dict[str, str]:
    """Metadata whose JSON is exactly ``chars`` characters."""
    meta = {"x": ""}
    meta["x"] = "a" * (chars - len(json.dumps(meta)))
    assert len(json.dumps(meta, ensure_ascii=False)) == chars
    return meta


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_metadata_up_to_max_text_chars_as_json_is_kept_and_one_more_is_refused(small) -> None:  # type: ignore[no-untyped-def]
    kept = small.remember("Ada's invoices are in euros", "ada", metadata=sized(LIMIT))
    assert small.get(kept.memory_id, "ada").provenance.metadata == sized(LIMIT)
    too_large = r"metadata has 1,001 characters as JSON; the limit is 1,000 \(setting max_text"
    with pytest.raises(InputTooLargeError, match=too_large):
        small.remember("Bob's invoices are in dollars", "bob", metadata=sized(LIMIT + 1))
    with pytest.raises(InputTooLargeError):  # the same on every path a caller's metadata takes
        small.ingest("Bob's invoices are in dollars", "bob", metadata=sized(LIMIT + 1))
    with pytest.raises(InputTooLargeError):
        small.ingest_conversations([{"turns": [{"text": "hello Bob"}], "user_id": "bob",
                                     "metadata": sized(LIMIT + 1)}])  # fmt: skip
    with pytest.raises(InputTooLargeError):
        small.import_records([{"type": "remember", "user_id": "bob", "content": "hello Bob",
                               "metadata": sized(LIMIT + 1)}])  # fmt: skip
    with pytest.raises(InputTooLargeError):
        small.update(kept.memory_id, "ada", metadata=sized(LIMIT + 1))
    assert small.store.users() == ["ada"]


def test_an_exported_memorys_metadata_round_trips_whatever_its_size(small) -> None:  # type: ignore[no-untyped-def]
    """A merged memory's metadata keeps the texts it replaced (its history): it may outgrow
    what one call may send, and an export of it still imports."""
    memory = small.remember("Ada's invoices are in euros", "ada", now=NOW)
    record = next(small.export_records("ada"))
    record["provenance"]["metadata"] = sized(3 * LIMIT)
    small.forget(memory.memory_id, "ada")
    small.import_records([record])
    assert small.get(memory.memory_id, "ada").provenance.metadata == sized(3 * LIMIT)


def test_metadata_nests_up_to_its_depth(small) -> None:  # type: ignore[no-untyped-def]
    deepest = nested(MAX_METADATA_DEPTH)
    kept = small.remember("Ada's invoices are in euros", "ada", metadata=deepest)
    assert small.get(kept.memory_id, "ada").provenance.metadata == deepest
    # lists count as levels too; 100,000 levels are refused as plainly as 65 (the encoder
    # used to recurse until Python's stack gave out)
    for value in (nested(MAX_METADATA_DEPTH + 1), {"a": [[[]] * 2] * 2} | nested(65),
                  nested(100_000)):  # fmt: skip
        with pytest.raises(ValidationError, match="metadata is nested deeper than 64 levels"):
            small.remember("Bob's invoices are in dollars", "bob", metadata=value)
    assert small.store.users() == ["ada"]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({1: "one"}, "metadata has a key that is not a string: 1"),
        ({"a": {None: 1}}, "metadata.a has a key that is not a string: None"),
        ({"a": [0, float("inf")]}, "metadata.a[1] is inf, which JSON cannot hold"),
        ({"a": {1, 2}}, "metadata.a is of type set, not a JSON value"),
        ({"a": 10**5000}, "metadata.a is an integer of more than 4,300 digits"),
        ({"a": "\ud800"}, "metadata.a contains characters UTF-8 cannot encode"),
        ({"\udcff": 1}, "metadata key '\\udcff' contains characters UTF-8 cannot encode"),
    ],
)
def test_metadata_refusals_say_where(small, metadata, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError) as info:
        small.remember("Ada's invoices are in euros", "ada", metadata=metadata)
    assert info.value.message.startswith(message)
    assert small.store.users() == []


def test_integers_are_taken_up_to_max_int(small) -> None:  # type: ignore[no-untyped-def]
    small.remember("Ada's invoices are in euros", "ada")
    block = small.context("which currency are the invoices in?", "ada", token_budget=MAX_INT,
                          top_k=MAX_INT, turn=MAX_INT)  # fmt: skip
    assert "euros" in block.text
    assert len(small.list("ada", limit=MAX_INT)) == 1
    with pytest.raises(ValidationError, match=r"token_budget must be >= 0 and <= 2,147,483,647, "
                                              r"not 2,147,483,648"):  # fmt: skip
        small.context("which currency?", "ada", token_budget=MAX_INT + 1)
    with pytest.raises(ValidationError, match=r"not a number of more than 100 digits"):
        small.context("which currency?", "ada", token_budget=10**5000)


def test_a_domain_tag_is_as_long_as_an_id_at_most(small) -> None:  # type: ignore[no-untyped-def]
    tag = "d" * MAX_ID_CHARS
    kept = small.remember("Ada's invoices are in euros", "ada", domains=[tag])
    assert small.get(kept.memory_id, "ada").domains == (tag,)
    with pytest.raises(InputTooLargeError, match=r"domains\[1\] is longer than 256 characters"):
        small.remember("Bob's invoices are in dollars", "bob", domains=["billing", tag + "d"])


def test_a_speakers_control_characters_are_removed_like_contents(engine: Engine) -> None:
    """The speaker is written into the chunk's content (``"ada: …"``): a NUL in it was
    stored on SQLite and the in-memory store, and broke the write on PostgreSQL."""
    report = engine.ingest_conversation(
        [{"speaker": " a\x00da\x07 ", "text": "The staging database is on port 5433"}], "ada"
    )
    stored = engine.get(report.stored[0], "ada").content
    assert stored == "ada: The staging database is on port 5433"
