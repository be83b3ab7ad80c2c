"""A report that something is well is trivial (issue 12): "nice, CI's green" asks nothing,
like work reported done ("merged!"); a question, a negation or a second subject word keeps
a message real (``recall.trivial._reports_success``)."""

from __future__ import annotations

import pytest

from engrain.recall.classify import Complexity, classify
from engrain.recall.trivial import is_trivial


@pytest.mark.parametrize(
    "text",
    ["nice, CI's green", "tests passing now", "all green", "build passes", "it compiles!",
     "ok, pipeline green", "yay, it builds"],
)  # fmt: skip
def test_a_report_that_something_is_well_is_trivial(text: str) -> None:
    assert is_trivial(text)
    assert classify(text).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "text",
    ["not green", "still not passing", "CI green?", "is it live", "did it pass",
     "green on 3.12", "make the button green", "the deploy is live but slow",
     "CI is red only on Windows"],
)  # fmt: skip
def test_a_negated_asked_or_longer_report_is_not_trivial(text: str) -> None:
    assert not is_trivial(text)
