"""``bench/bm25_parse.py``'s own machinery: a store's saved BM25 copy written again in a
tree's format and parsed in fresh processes of each tree, whose answers are compared (here
both trees are this one, on a small store whose copy is of the earlier layout)."""

from __future__ import annotations

import io
import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import bm25_parse  # noqa: E402

from engrain.store import derived_blobs  # noqa: E402
from engrain.store.lexical import LexicalIndex  # noqa: E402
from tests.test_lexical import _corpus  # noqa: E402


def test_a_copy_of_either_layout_is_written_parsed_and_answers_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "engrain.db"
    earlier = io.BytesIO()  # the layout before this session's: int32 documents
    np.savez(earlier, fingerprint=np.zeros(32, dtype=np.uint8),
             **LexicalIndex(_corpus(400)).to_arrays())  # fmt: skip
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE derived_indexes (user_id TEXT, kind TEXT, data BLOB, "
                   "updated_at TEXT, PRIMARY KEY (user_id, kind))")  # fmt: skip
        derived_blobs.write(db, bm25_parse.USER, "bm25", earlier.getvalue(), "now")
    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", [
        "bm25_parse.py", "--store", str(store), "--tree", f"a={REPO}", "--tree", f"b={REPO}",
        "--rounds", "2", "--workdir", str(tmp_path / "work"), "--out", str(out),
    ])  # fmt: skip
    bm25_parse.main()
    summary = json.loads(out.read_text())["summary"]
    assert summary["same_answers"] == "True (4 processes)"
    assert summary["a"]["parse_cpu_s"] >= 0 and summary["a"]["bytes"] == summary["b"]["bytes"]
