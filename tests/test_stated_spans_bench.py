"""``bench/stated_spans.py``: each context note of a set with the end it states, its scales
and its labels on one split; the split's messages answered with and without the rule."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import stated_spans  # noqa: E402


def test_a_set_s_context_notes_with_their_stated_ends_and_labels() -> None:
    notes = {n["id"]: n for n in stated_spans.note_rows("quill", "tune")}
    assert len(notes) == 6  # quill's context notes, muted ones included
    leave = notes["qu-ctx-01"]  # "… to the end of March 2026", written 2025-11-24
    assert (leave["end"], leave["ahead"], leave["phrase"]) == ("2026-04-01", True,
                                                             "end of March 2026")  # fmt: skip
    assert leave["scale_default"] == round(0.5 ** ((52 + 2 / 24) / 90), 4)  # 10:00 to 12:00
    assert leave["scale_stated"] == 1.0
    assert leave["include"] == ["fq-03", "fq-48", "fq-74"] and leave["exclude"] == ["fq-15"]
    beta = notes["qu-ctx-03"]  # "… until 2.0.0 in March", written 2025-01-27
    assert (beta["end"], beta["ahead"]) == ("2025-04-01", False)
    assert beta["scale_stated"] < beta["scale_default"]
    assert notes["qu-ctx-04"]["end"] is None  # "windows-2022" is no date


def test_every_message_of_the_split_is_answered_both_ways() -> None:
    answered = stated_spans.injections("pulse", "tune", "hash")
    assert len(answered) == 39
    for answer in answered.values():
        assert set(answer) == {"default", "stated_span"}
        assert all(n.startswith("mo-ctx-") for n in answer["stated_span"]["notes"])
