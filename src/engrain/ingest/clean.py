"""Step 1, text cleaning (spec 1.2): strip, NFC, collapse runs of blank lines.

Formatting markers and code blocks are kept as they are.
"""

from __future__ import annotations

import re
import unicodedata

_LINE_ENDINGS = re.compile(r"\r\n?")
_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def clean_text(text: str) -> str:
    """``text`` stripped, NFC-normalised, with three or more newlines collapsed to two."""
    text = unicodedata.normalize("NFC", _LINE_ENDINGS.sub("\n", text))
    return _BLANK_RUN.sub("\n\n", text).strip()
