"""Spans: a note about the present that says itself how long it holds.

"Maya is on parental leave from 2025-12-01 to the end of March 2026", "Code freeze for 0.12
until 30 September 2025", "We are migrating off W&B this month": a context note often
states when it stops being true. Its relevance otherwise halves every 90 days of written age
(``score.present_scale``), so a leave whose end is still ahead fades like a stale note, and
a freeze that ended last week is still current until it has aged. :func:`stated_end` reads
the latest end a note states, resolved against the time it was written (``memory.when``);
:func:`span_scale` turns it into the note's present scale at ``now``.

What counts as an end (each a date the text puts after an end word, or a period it names):

* a date after ``until``, ``till``, ``through``, ``to``, ``ends``/``ended``/``end of``,
  ``before``, ``by``, ``due``, ``for``, ``planned``, ``scheduled``, ``targeted``,
  ``aiming``, ``expected``, ``launches``, ``go-live`` or ``deadline``, within six words of
  it in the same clause ("paused until the new GPU quota arrives in February");
* a range's second date ("January-February 2026", "October 1-15, 2024",
  "(Dec 2025 - Feb 2026)");
* ``until then``: the date stated before it ("the week of 16 June 2025; until then …");
* a period the note names: a quarter ("Q1 2026 goals", "in Q1"), a month in parentheses
  ("This sprint (January 2026)", "In progress (Rosa, January 2026)"), ``this week`` /
  ``month`` / ``quarter``, ``next week`` / ``month`` / ``quarter`` (relative to the time
  written).

A date is a day (``2026-01-28``, ``30 September 2025``, ``February 23, 2026``; "the week of
…" a week from it), a month (``March 2026``, ``Dec 2025``, ``mid-February 2026``; a month
without a year is its next occurrence from the month written, so "until February" written in
December is February of the next year) or a quarter. An end is exclusive: the first moment
after the day, month or quarter named. A date with no end word is an event or a start, not an
end ("Redshift was switched off in September 2024", "since November 2025", "Incident
2025-11-03"), and phrases whose length is not stated are left alone ("this sprint" alone,
"until it is merged", weekdays, "soon"). Pure functions of the text and the times given, the
parse cached by text and written time (:data:`CACHE_SIZE`): threads and processes reading the
same row at the same ``now`` get the same scale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

#: Parses kept, by (text, written time): a user's context notes are few and are scored on
#: every call, so a bounded cache makes the parse a dictionary look-up after the first.
CACHE_SIZE = 4096

#: Words after which a date is where a note's span ends (or the day its work is for).
END_WORDS = (
    "until till til through thru to ends end ending ended before by due for planned "
    "scheduled targeted targeting aiming aims expected launches launch go-live deadline"
)
#: Words after which a date is where something starts, not ends ("from 2025-12-01 to …",
#: "since November 2025"): the nearer of the two kinds of word decides.
START_WORDS = "since from starting started after began begun"
#: Words an end word may stand before its date: "until the new GPU quota arrives in February".
END_WINDOW_WORDS = 6
#: Characters before a date read for its end word (six words and their spaces fit).
LOOK_BACK = 120

_MONTH_NAMES = (
    "january february march april may june july august september october november december"
)
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES.split())}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH = r"(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?:[0-2]?\d|3[01])(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"

#: The date shapes, longest first, each a named alternative of one pattern.
_DATE = re.compile(
    rf"""(?ix)
    \b(?=[0-9qadfjmnos])  # a cheap test first: most places start no date
    (?:(?P<iso>\b(?P<iy>{_YEAR})-(?P<im>[01]\d)-(?P<id>[0-3]\d)\b)
    | (?P<mdd>\b(?P<mdd_m>{_MONTH})\s+{_DAY}\s*[-–]\s*(?P<mdd_d2>{_DAY}),?
        \s+(?P<mdd_y>{_YEAR})\b)
    | (?P<dmy>\b(?P<dmy_d>{_DAY})\s+(?:of\s+)?(?P<dmy_m>{_MONTH}),?\s+(?P<dmy_y>{_YEAR})\b)
    | (?P<mdy>\b(?P<mdy_m>{_MONTH})\s+(?P<mdy_d>{_DAY}),?\s+(?P<mdy_y>{_YEAR})\b)
    | (?P<mmy>\b(?P<mmy_m1>{_MONTH})\s*[-–]\s*(?P<mmy_m2>{_MONTH}),?\s+(?P<mmy_y>{_YEAR})\b)
    | (?P<my>\b(?P<my_m>{_MONTH}),?\s+(?P<my_y>{_YEAR})\b)
    | (?P<q>\bQ(?P<qn>[1-4])(?:\s*(?P<qy>{_YEAR}))?\b)
    | (?P<m>\b(?P<m_m>{_MONTH})\b))
    """
)
_END_WORDS = frozenset(END_WORDS.split())
_START_WORDS = frozenset(START_WORDS.split())
_END_WORD = re.compile(rf"(?i)\b(?:{'|'.join(re.escape(w) for w in END_WORDS.split())})\b")
_CLAUSE = re.compile(r"[.;:!?]\s|\n")
_WORD = re.compile(r"[\w'-]+")
_DASH_BEFORE = re.compile(r"[-–]\s*$")
_WEEK_OF = re.compile(r"(?i)\bweek\s+of\s+$")
_UNTIL_THEN = re.compile(r"(?i)\b(?:until|till)\s+then\b")
_RELATIVE = re.compile(r"(?i)\b(this|next)\s+(week|month|quarter)\b")
_PARENTHESISED = re.compile(r"\([^()]*\)")
#: Month names that may stand alone: capitalised and spelled out, and not "May" (a word too).
_BARE_MONTHS = frozenset(_MONTH_NAMES.split()) - {"may"}


@dataclass(frozen=True)
class Span:
    """The end a note states: ``end`` is the first moment after it; ``phrase`` the words."""

    end: datetime
    phrase: str


def stated_end(text: str, written: datetime) -> Span | None:
    """The latest end ``text`` states (see the module), resolved against ``written``; ``None``
    if it states none. Cached by ``(text, written)``."""
    return _stated_end(text, written)


@lru_cache(maxsize=CACHE_SIZE)
def _stated_end(text: str, written: datetime) -> Span | None:
    ends: list[Span] = []
    dates = list(_dates(text, written))
    for start, stop, end, period in dates:
        before = text[max(0, start - LOOK_BACK) : start]
        clause = _CLAUSE.split(before)[-1]
        if period or (_DASH_BEFORE.search(before) and _follows_date(dates, start)):
            ends.append(Span(end, text[start:stop]))
        elif _ends_here(_WORD.findall(clause)[-END_WINDOW_WORDS - 1 :]):
            ends.append(Span(end, _phrase(text, clause, start, stop)))
    for then in _UNTIL_THEN.finditer(text):
        earlier = [d for d in dates if d[1] <= then.start()]
        if earlier:
            start, stop, end, _ = earlier[-1]
            ends.append(Span(end, f"{text[start:stop]} … {then.group(0)}"))
    for relative in _RELATIVE.finditer(text):
        ends.append(Span(_relative_end(relative.group(1), relative.group(2), written),
                         relative.group(0)))  # fmt: skip
    return max(ends, key=lambda s: s.end) if ends else None


def _ends_here(words: list[str]) -> bool:
    """Whether the words before a date make it an end: an end word nearer to it than any
    start word ("to the end of" after "from 2025-12-01")."""
    for word in reversed(words):
        lowered = word.lower()
        if lowered in _END_WORDS:
            return True
        if lowered in _START_WORDS:
            return False
    return False


def _phrase(text: str, clause: str, start: int, stop: int) -> str:
    """The end word through the date: "until the new GPU quota arrives in February"."""
    words = list(_END_WORD.finditer(clause))
    offset = start - len(clause)
    return text[offset + words[-1].start() : stop] if words else text[start:stop]


def _follows_date(dates: list[tuple[int, int, datetime, bool]], start: int) -> bool:
    """Whether a date ends just before ``start`` (a dash between: a range's second date)."""
    return any(0 < start - stop <= 3 for _, stop, _, _ in dates)


def _dates(text: str, written: datetime) -> list[tuple[int, int, datetime, bool]]:
    """Each date of ``text``: its position, its end, and whether it names a period by itself
    (a range, a quarter, a month in parentheses)."""
    inside = [(m.start(), m.end()) for m in _PARENTHESISED.finditer(text)]
    out: list[tuple[int, int, datetime, bool]] = []
    for match in _DATE.finditer(text):
        end, period = _resolve(match, written)
        if end is None:
            continue
        if not period and match.lastgroup == "my":  # "(January 2026)", "(Rosa, January 2026)"
            period = any(a < match.start() and match.end() + 1 == b for a, b in inside)
        if _WEEK_OF.search(text[max(0, match.start() - LOOK_BACK) : match.start()]):
            end += timedelta(days=6)
        out.append((match.start(), match.end(), end, period))
    return out


def _resolve(match: re.Match[str], written: datetime) -> tuple[datetime | None, bool]:
    """The exclusive end of the date ``match`` names, and whether it is a period by itself."""
    g = match.groupdict()
    kind = match.lastgroup
    if kind == "iso":
        return _day_end(written, int(g["iy"]), int(g["im"]), int(g["id"])), False
    if kind == "mdd":
        return _day_end(written, int(g["mdd_y"]), _month(g["mdd_m"]), _day(g["mdd_d2"])), True
    if kind == "dmy":
        return _day_end(written, int(g["dmy_y"]), _month(g["dmy_m"]), _day(g["dmy_d"])), False
    if kind == "mdy":
        return _day_end(written, int(g["mdy_y"]), _month(g["mdy_m"]), _day(g["mdy_d"])), False
    if kind == "mmy":
        return _month_end(written, int(g["mmy_y"]), _month(g["mmy_m2"])), True
    if kind == "my":
        return _month_end(written, int(g["my_y"]), _month(g["my_m"])), False
    if kind == "q":
        quarter = int(g["qn"])
        year = int(g["qy"]) if g["qy"] else _next_year(written, 3 * quarter)
        return _month_end(written, year, 3 * quarter), True
    name = g["m_m"]
    if name.lower() not in _BARE_MONTHS or not name[0].isupper():
        return None, False  # "may", "mar", "dec": words first; "until February" a month
    month = _MONTHS[name.lower()]
    return _month_end(written, _next_year(written, month), month), False


def _month(name: str) -> int:
    return _MONTHS[name.rstrip(".").lower()]


def _day(text: str) -> int:
    return int(re.sub(r"\D", "", text))


def _next_year(written: datetime, month: int) -> int:
    """The year of ``month``'s next occurrence from the month ``written`` (this one counts)."""
    return written.year if month >= written.month else written.year + 1


def _day_end(written: datetime, year: int, month: int, day: int) -> datetime | None:
    try:
        return written.replace(year=year, month=month, day=day, hour=0, minute=0, second=0,
                               microsecond=0) + timedelta(days=1)  # fmt: skip
    except ValueError:  # "31 February"
        return None


def _month_end(written: datetime, year: int, month: int) -> datetime:
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return written.replace(year=year, month=month, day=1, hour=0, minute=0, second=0,
                           microsecond=0)  # fmt: skip


def _relative_end(which: str, unit: str, written: datetime) -> datetime:
    """The end of this or next week (Monday to Sunday), month or quarter from ``written``."""
    ahead = 1 if which.lower() == "next" else 0
    day = written.replace(hour=0, minute=0, second=0, microsecond=0)
    unit = unit.lower()
    if unit == "week":
        return day + timedelta(days=7 * (1 + ahead) - day.weekday())
    months = 1 if unit == "month" else 3
    first = day.month if unit == "month" else 3 * ((day.month - 1) // 3) + 1
    index = day.year * 12 + first - 1 + months * (1 + ahead)
    return day.replace(year=index // 12, month=index % 12 + 1, day=1)


def span_scale(span: Span | None, now: datetime, written_scale: float, half_life: float) -> float:
    """A note's present scale from the end it states: 1.0 while the end is ahead of ``now``
    (the note says it still holds); once past, ``0.5 ** (days since the end / half_life)``,
    never above ``written_scale`` (a note over is no more current than its age says).
    Without a span, ``written_scale``."""
    if span is None:
        return written_scale
    past = (now - span.end).total_seconds() / 86_400.0
    if past < 0.0:
        return 1.0
    return min(written_scale, float(0.5 ** (past / half_life)))
