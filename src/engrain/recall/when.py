"""When: a question that names a time wants what happened then.

"What did Maria donate in December 2023?", "Who did Maria have dinner with on May 3,
2023?", "Where did John go last year?": the time expression is resolved to a window of
dates (against ``now`` for relative ones) and a conversation chunk's relevance is scaled by
whether its event time falls inside it:

    relevance × ((1 - w) + w × inside)

with ``w`` = :data:`TIME_WEIGHT`. A chunk is dated by its first turn (the session's date),
and people tell of an event in a later session ("last week I went camping"), so every
window reaches :data:`TELLING_SLACK_DAYS` past its end (and a single day a day before it).
Nothing changes for a question without a time expression, nor for a memory without an
event time or turn ids. Understood: ``on 3 June, 2023`` / ``on June 3, 2023`` (a day),
``in May 2023`` / ``May 2023`` (a month), ``in June`` (that month of ``now``'s year, or the
year before when it is still to come), ``in 2022`` (a year). Relative expressions in a
question ("last year") are left alone: they are relative to when something was *told*,
which a chunk's date is, so "the trip last year" is in a chunk dated this year.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from engrain.recall.relevance import Candidate
from engrain.recall.rescored import rescored

#: The share of a chunk's relevance that depends on its date (tuned on LoCoMo half A).
TIME_WEIGHT = 0.3
#: Days past a window's end an event may still be told in (a session "last week").
TELLING_SLACK_DAYS = 14

_MONTH_NAMES = (
    "january february march april may june july august september october november december"
)
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES.split())}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b")
_IN_MONTH = re.compile(rf"\b(?:in|during|of|early|late|mid)\s+{_MONTH}\b")
_YEAR = re.compile(r"\b(?:in|during|of|since)\s+((?:19|20)\d\d)\b")


@dataclass(frozen=True)
class Window:
    """A span of time a question asks about: ``start`` ≤ t < ``end``."""

    start: datetime
    end: datetime

    def holds(self, when: datetime) -> bool:
        """Whether ``when`` is inside the window or told within the slack after it."""
        return self.start <= when and when - self.end < timedelta(days=TELLING_SLACK_DAYS)


def _month_window(year: int, month: int) -> Window | None:
    """The month, or ``None`` when it (or the next month) is outside datetime's years."""
    try:
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    except ValueError:
        return None
    return Window(start, end)


def _day_window(year: int, month: int, day: int) -> Window | None:
    """The day ±1, or ``None`` when it is no date datetime can hold."""
    try:
        start = datetime(year, month, day, tzinfo=UTC)
        return Window(start - timedelta(days=1), start + timedelta(days=1))
    except (ValueError, OverflowError):
        return None


def _span(year: int) -> Window | None:
    """The year, or ``None`` when it is outside datetime's years."""
    try:
        return Window(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    except ValueError:
        return None


def windows(message: str, now: datetime) -> list[Window]:
    """The time windows ``message`` names, most precise first (none for most messages)."""
    text = message.lower()
    out: list[Window] = []
    for day, month, year in _DAY_MONTH_YEAR.findall(text):
        if found := _day_window(int(year), _MONTHS[month], int(day)):
            out.append(found)
    for month, day, year in _MONTH_DAY_YEAR.findall(text):
        if found := _day_window(int(year), _MONTHS[month], int(day)):
            out.append(found)
    if out:
        return out
    named = [_month_window(int(year), _MONTHS[m]) for m, year in _MONTH_YEAR.findall(text)]
    out += [w for w in named if w is not None]
    if out:
        return out
    for month in _IN_MONTH.findall(text):
        number = _MONTHS[month]
        if found := _month_window(now.year - (number > now.month), number):
            out.append(found)
    out += [w for y in _YEAR.findall(text) if (w := _span(int(y))) is not None]
    return out


def with_time(
    pool: Sequence[Candidate], message: str, now: datetime, weight: float = TIME_WEIGHT
) -> list[Candidate]:
    """``pool`` with each dated conversation chunk's relevance scaled by whether its event
    time is inside a window ``message`` names (see the module), best relevance first;
    ``pool`` unchanged when ``weight`` is 0 or the message names no time."""
    if weight <= 0.0:
        return list(pool)
    spans = windows(message, now)
    if not spans:
        return list(pool)
    out = []
    for c in pool:
        memory = c.memory
        if memory.event_at is None or not memory.provenance.turn_ids:
            out.append(c)
            continue
        inside = any(span.holds(memory.event_at) for span in spans)
        out.append(rescored(c, c.relevance * ((1.0 - weight) + weight * inside)))
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out
