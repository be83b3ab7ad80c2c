"""``bench/report_diff.py``: two reports of a behaviour-preserving change compared value by
value, the per-message rows included, how a run went left out."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import report_diff  # noqa: E402


def test_every_value_is_compared_but_how_the_run_went() -> None:
    """A row's changed value and a missing key are found by path; the machine, the
    seconds and the source are not compared; equal reports have no differences."""
    before = {"seconds": 10, "machine": {"load": 3}, "engrain_source": "/a",
              "profiles": {"gated": {"mean": 0.5, "messages": [{"id": "m1", "injected": ["x"]},
                                                               {"id": "m2", "injected": []}]}},
              "sets": {"pulse": {"profiles": {"gated": {"messages": [{"id": "p1"}]}}}}}  # fmt: skip
    after = {**before, "seconds": 99, "machine": {"load": 30}, "engrain_source": "/b"}
    assert report_diff.differences(before, after) == (5, [])  # an empty list holds none
    changed = {**after, "profiles": {"gated": {"mean": 0.5, "messages": [
        {"id": "m1", "injected": ["y"]}, {"id": "m2"}]}}}  # fmt: skip
    compared, differ = report_diff.differences(before, changed)
    assert differ == ["/profiles/gated/messages[0]/injected[0]",
                      "/profiles/gated/messages[1]/injected"]  # fmt: skip
    assert compared == 6
    assert report_diff.messages(before) == 3
