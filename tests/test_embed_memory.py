"""What issue 18 cut from the resident memory: the session's freed heap handed back after
loading, and cl100k without tiktoken's Python copy of its ranks."""

from __future__ import annotations

import json
import pickle
import platform
import subprocess
import sys

import pytest
import tiktoken

from engrain import tokens
from engrain.embed import minilm

TEXTS = [
    "Hello wörld 🎉 東京, snake_case and camelCase at 10:45 on 2026-11-25",
    "<|endoftext|> is text here, not a special token",
    "   leading spaces\n\n\ttabs and a very-long-hyphenated-word " * 5,
    "",
]

_CHILD = """
import json, sys
from engrain.embed import minilm
if sys.argv[1] == "untrimmed":
    minilm.trim_heap = lambda: False
int8 = sys.argv[1] == "int8"
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
before = rss()
embedder = minilm.MiniLMEmbedder(threads=1, int8=int8)
embedder.embed(["one query about the weekend in Lisbon"])
print(json.dumps({"session_mb": rss() - before}))
"""


def test_engrains_encoding_encodes_and_decodes_like_tiktokens() -> None:
    lean = tokens.encoding()
    reference = tiktoken.get_encoding(tokens.ENCODING_NAME)
    assert isinstance(lean, tokens.LeanEncoding) and lean is not reference
    for text in TEXTS:
        ids = lean.encode(text, disallowed_special=())
        assert ids == reference.encode(text, disallowed_special=())
        assert lean.decode(ids) == text
    assert lean.n_vocab == reference.n_vocab
    assert lean._mergeable_ranks == {}  # the ~15 MB Python copy is gone
    assert len(reference._mergeable_ranks) > 100_000  # tiktoken's own instance is untouched
    with pytest.raises(TypeError):
        pickle.dumps(lean)


def test_trim_heap_trims_on_glibc_and_says_so() -> None:
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert minilm.trim_heap() is glibc


@pytest.mark.model
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, /proc")
def test_loading_the_model_hands_the_freed_heap_back() -> None:
    def session_mb(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", _CHILD, mode], check=True,
                              capture_output=True, text=True)  # fmt: skip
        return float(json.loads(done.stdout.strip().splitlines()[-1])["session_mb"])

    trimmed, untrimmed = session_mb("trimmed"), session_mb("untrimmed")
    # the float graph: measured 93 against 156 MB (the imports included)
    assert trimmed < untrimmed - 20, (trimmed, untrimmed)
    # the int8 graph folds no weight into float32: 54 against 84 MB (onnxruntime included)
    int8 = session_mb("int8")
    assert int8 < trimmed - 15, (int8, trimmed)
