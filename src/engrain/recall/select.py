"""Selection: the spec's token budget enforcement (2.6) and relevance gating's threshold
greedy fill (step 4), where pins and procedural memories lead only when relevant."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from engrain.model import Kind, Memory, MemoryFields, MemoryType
from engrain.recall.area import AREA_RELEVANCE
from engrain.recall.classify import Intent
from engrain.recall.results import Decision, ScoredMemory
from engrain.recall.score import INTENT_TYPE_MULTIPLIER, PRESENT_KINDS
from engrain.recall.trim import NO_TRIM, Trim, restates


def enforce_budget(
    first: Sequence[ScoredMemory],
    ranked: Sequence[ScoredMemory],
    *,
    token_budget: int,
    top_k: int,
) -> tuple[list[ScoredMemory], int]:
    """Walk ``first`` (procedural memories) then ``ranked``, adding each memory whose
    tokens still fit in ``token_budget``, until ``top_k`` are selected. Returns the
    selection and the tokens it uses. A memory already taken is not taken twice."""
    selected: list[ScoredMemory] = []
    seen: set[str] = set()
    used = 0
    for item in (*first, *ranked):
        if len(selected) >= top_k:
            break
        if item.memory.id in seen:
            continue
        if used + item.tokens <= token_budget:
            selected.append(item)
            seen.add(item.memory.id)
            used += item.tokens
    return selected, used


# -- relevance gating (step 4): thresholds, pins, greedy fill -------------------------------

#: Intent → (general threshold, invariant threshold).
THRESHOLDS: Mapping[Intent, tuple[float, float]] = {
    Intent.DEBUGGING: (0.25, 0.15),
    Intent.CONTINUATION: (0.30, 0.18),
    Intent.QUESTION: (0.35, 0.20),
    Intent.ANALYSIS: (0.35, 0.20),
    Intent.DISCUSSION: (0.35, 0.20),
    Intent.GENERATION: (0.40, 0.20),
    Intent.GREETING: (0.50, 0.30),
}


#: The intent whose general threshold the seed gives every balanced request (a question,
#: an analysis, a discussion): what an intent's threshold above it adds is paid for by the
#: kinds that intent lifts (:func:`unlifted_threshold`).
BALANCED_INTENT = Intent.QUESTION


def threshold_for(kind: Kind, intent: Intent, shift: float = 0.0, *,
                  by_lift: bool = False) -> float:  # fmt: skip
    """The minimum score for an item of ``kind`` under ``intent``, shifted by memory depth
    (+0.10 light, -0.10 rich), never below 0; with ``by_lift``
    (``GateOptions.unlifted_threshold``), :func:`unlifted_threshold`'s."""
    general, invariant = THRESHOLDS[intent]
    base = invariant if kind is Kind.INVARIANT else general
    if by_lift:
        base = unlifted_threshold(kind, intent, base)
    return max(0.0, base + shift)


def unlifted_threshold(kind: Kind, intent: Intent, base: float) -> float:
    """``base``, ``kind``'s threshold under ``intent``, or the balanced intents' general
    threshold when that is lower, ``intent`` lifts some kinds and ``kind`` is not one of
    them (``score.INTENT_TYPE_MULTIPLIER`` above 1).

    The seed asks more of a request for code (0.40) than of a question (0.35), and lifts
    the kinds such a request is made with: a pattern's boost doubles, a golden path's grows
    by half, so a convention at relevance 0.5 scores ~0.55 and clears 0.40 by what the lift
    gave it. A decision, a fact, an antipattern or a correction gets no lift from the
    request, so the +0.05 is a bar only they pay: a decision the code must follow, as
    relevant as a pattern that passes, stays out (score 0.38 against 0.40). Held to the
    balanced threshold, every kind the request does not lift is judged as in any other
    request; the lifted kinds and invariants keep the seed's bar, an intent that lifts
    nothing (a greeting) keeps its own, and no table changes."""
    if kind is Kind.INVARIANT or intent not in _LIFTING:
        return base
    if INTENT_TYPE_MULTIPLIER.get((intent, kind), 1.0) > 1.0:
        return base
    return min(base, THRESHOLDS[BALANCED_INTENT][0])


#: The intents whose multipliers lift some kind (:func:`unlifted_threshold`).
_LIFTING = frozenset(i for (i, _), m in INTENT_TYPE_MULTIPLIER.items() if m > 1.0)


#: A pinned memory leads the block when its relevance is at least this: a pin guarantees a
#: relevant memory its place, it does not inject an off-topic one (an off-topic pin competes
#: like any other memory). By default (``trim.pin_threshold``, ``recall.trim``) it must also
#: clear its kind's test; without that rule it bypasses its threshold.
PIN_MIN_RELEVANCE = 0.25
#: Procedural memories (preferences) are injected when at least this relevant, and together
#: take at most ``PROCEDURAL_SHARE`` of the budget, so they can never crowd a relevant
#: fact out. Within the block they come first, after pinned memories. Relevance and the
#: share are their whole test, not the score threshold: the seed's type boosts give a
#: preference nothing, so against the thresholds of the boosted kinds a preference needed
#: more relevance than any learning (a generation request's convention at relevance 0.5
#: scores ~0.55 as a pattern, ~0.40 as a preference, against 0.40). The floor is 0.2, the
#: value ``recall()`` asks of a procedural memory's cosine (``spec.py``): a preference is one
#: short line, and a short line's cosine with a longer request stays low ("Type-annotate
#: functions in the fc package" against a request for a "typed" helper: 0.21). Tuned on the
#: gating evaluation's tuning half (0.25 → 0.2: +2 must-include, no leak).
PROCEDURAL_MIN_RELEVANCE = 0.2
PROCEDURAL_SHARE = 0.15
#: The relevance a preference needs in a message that asks for no work to be done (any
#: intent but a generation request): the general threshold of a question, an analysis or
#: a discussion. A preference says how the user wants work done ("type-annotate functions
#: in the fc package"), so a request for that work takes one loosely related to it (the
#: short line's low cosine, above); a question, a bug report, a discussion or a follow-up
#: is answered, not built, and a preference only loosely related to it does not change
#: the answer. On the tuning halves, preferences selected at relevance 0.2-0.35 outside
#: generation requests were 190 lines with no labelled one (generation: 85 lines, 3).
ANSWER_PROCEDURAL_MIN_RELEVANCE = 0.35
WORK_INTENTS = frozenset({Intent.GENERATION})


def procedural_min_relevance(intent: Intent) -> float:
    """The relevance a procedural memory needs under ``intent``:
    :data:`PROCEDURAL_MIN_RELEVANCE` for a request for work (:data:`WORK_INTENTS`),
    :data:`ANSWER_PROCEDURAL_MIN_RELEVANCE` otherwise."""
    return PROCEDURAL_MIN_RELEVANCE if intent in WORK_INTENTS else ANSWER_PROCEDURAL_MIN_RELEVANCE


#: Calibrated relevance under which a memory is unrelated to the message (``relevance``: an
#: unrelated memory stays under ~0.2); its relevance says nothing about which such memory
#: matters more.
UNRELATED_RELEVANCE = 0.2
#: The share of the budget the invariants unrelated to the message take together (as
#: preferences take :data:`PROCEDURAL_SHARE`). An invariant passes its threshold on its
#: priors alone (undecayed recency and use), and the writers of the gating evaluation label
#: such invariants as needed ("never random K-fold" for an Optuna search, relevance 0.0), so
#: they keep a place; but 2.5-3.6 of them sat in every block whatever the topic (sensor:
#: 282 tokens a message, quill: 256). They are walked after every other candidate, the
#: best scored first (their use, the project leaning on them, ranks them; their relevance
#: does not), within this share. Tuned on the gating evaluation's tuning halves: 0.15 (the
#: preferences' share) left out a third unrelated invariant a simple question's writer
#: wanted (75 tokens of 500); 0.2 keeps every labelled one.
UNRELATED_INVARIANT_SHARE = 0.2
#: What the unrelated invariants take together at most, whatever the budget: their share
#: of the smallest automatic budget (a simple question's 500 tokens). Unrelated to the
#: message, they are background knowledge whose worth does not grow with its complexity: a
#: larger budget is for more relevant memory (with the share alone, a 5,000-token debugging
#: block carried up to 1,000 tokens of them; on the tuning halves, 600 of the 710 unrelated
#: invariant lines selected shared no domain with the message's area and held 1 labelled
#: memory). Those of the message's area (the domains of its clear matches,
#: :func:`area_of`) go first: an invariant of the part of the project being changed
#: constrains the change ("never random K-fold" for an Optuna search in ``training``,
#: relevance 0.0), so within the background it outranks one of another part.
BACKGROUND_TOKENS = 100
#: The relevance a typed learning needs when more relevant memories fill the whole block:
#: a learning walked when they take ``used`` of ``budget`` tokens needs
#: ``FULL_BLOCK_RELEVANCE × used / budget`` (:func:`needed_relevance`). Tuned on the
#: tuning halves below the boost's "clearly about this" level (0.5), which cost a fact at
#: relevance 0.375 in a 500-token block 76% full; 0.75 cost seven labelled memories.
FULL_BLOCK_RELEVANCE = 0.4


#: Fewer free tokens than this and no line fits: ``context()`` stops walking the ranking.
MIN_LINE_TOKENS = 6


class Ranked(NamedTuple):
    """A scored candidate before its line is costed (costing every candidate's line is
    most of a call's time at 10,000 memories; selection costs only what it considers).
    A named tuple, not a frozen dataclass: every call makes one per candidate (~200), and
    a tuple is built several times faster. ``memory``: its fields, built once selected."""

    memory: MemoryFields
    score: float
    similarity: float
    relevance: float


class _Item(NamedTuple):
    """A candidate considered, with its line's tokens: a
    :class:`~engrain.recall.results.ScoredMemory` whose memory is built only once it is
    selected (or a decision about it is recorded)."""

    memory: MemoryFields
    score: float
    similarity: float
    tokens: int

    def scored(self) -> ScoredMemory:
        """This item with its memory built."""
        return ScoredMemory(self.memory.built(), self.score, self.similarity, self.tokens)


def built_each(fields: Sequence[MemoryFields]) -> list[Memory]:
    """The memory of each of ``fields``, one at a time (:func:`select_gated`'s default;
    the gate passes the store's, which builds rows found together at once)."""
    return [f.built() for f in fields]


@dataclass(frozen=True)
class Layout:
    """What a block costs beyond its lines: the wrapper once, a newline per line and, in
    the ``sections`` format, a heading per section (``section`` gives a memory's section
    and that cost; ``None`` for the flat format)."""

    wrapper: int
    section: Callable[[MemoryFields], tuple[str, int]] | None = None


class _Fill:
    """The block being filled: selected items in three groups, tokens used, decisions."""

    def __init__(self, budget: int, layout: Layout, explain: bool) -> None:
        self.budget = budget
        self.layout = layout
        self.explain = explain
        self.groups: tuple[list[_Item], ...] = ([], [], [])
        self.count = 0
        self.used = 0
        self.procedural_used = 0
        self.unrelated_used = 0
        # the relevance and cost of each line selected out of the fill order (leading pins,
        # conflict partners): the only selected lines that can be less relevant than the
        # candidate being judged
        self.unordered: list[tuple[float, int]] = []
        self.sections: set[str] = set()
        self.decisions: list[Decision] = []

    def cost(self, memory: MemoryFields, tokens: int) -> tuple[int, str | None]:
        """What adding ``memory`` costs: its line, a newline, the wrapper if it is the
        first line and a heading if it opens a section; and its section's title (``None``
        without sections)."""
        extra = 0 if self.count else self.layout.wrapper
        title = None
        if self.layout.section is not None:
            title, heading = self.layout.section(memory)
            extra += 0 if title in self.sections else heading
        return tokens + 1 + extra, title

    def used_above(self, relevance: float) -> int:
        """The tokens taken by selected memories at least ``relevance`` relevant, for a
        candidate walked in the fill order (every line it walked past is at least as
        relevant)."""
        if not self.unordered:
            return self.used
        return self.used - sum(cost for placed, cost in self.unordered if placed < relevance)

    def note(self, item: _Item, selected: bool, reason: str) -> None:
        """Record a decision (only when explaining)."""
        if self.explain:
            self.decisions.append(Decision(item.scored(), selected, reason))

    def add(self, item: _Item, group: int, reason: str, relevance: float, walked: bool) -> bool:
        """Select ``item`` (of ``relevance``) into ``group`` if it fits; record the decision
        either way. ``walked``: it comes in the fill order (no later candidate judged by
        :func:`needed_relevance` is more relevant), not as a leading pin or a partner."""
        cost, title = self.cost(item.memory, item.tokens)
        if self.used + cost > self.budget:
            self.note(item, False, f"{item.tokens} tokens do not fit ({self.used}/{self.budget})")
            return False
        self.groups[group].append(item)
        self.count += 1
        self.used += cost
        if not walked:
            self.unordered.append((relevance, cost))
        if title is not None:
            self.sections.add(title)
        self.note(item, True, reason)
        return True


def fill_order(
    leading: Sequence[Ranked],
    rest: Sequence[Ranked],
    *,
    by_relevance: bool,
    area: frozenset[str] = frozenset(),
) -> list[Ranked]:
    """The order selection walks the candidates: the leading pins, then the rest; each
    group most relevant first when ``by_relevance`` (the automatic selection, where the
    thresholds have judged each candidate on its score), else in the order given (score).

    The score decides whether a memory passes: its type boost, recency and use lift it over
    its intent's threshold. Once a memory has passed, what the budget holds is a question
    of which passing memory this message needs most, its relevance; walking the passing
    memories in score order counted the boost, the recency and the use a second time, and
    on a simple question's 500 tokens invariants at relevance 0.3-0.4 (lifted by up to
    +0.25, undecayed, much used) filled the block before the correction at 0.66 that
    answered it. The seed's selection is "greedy fill within budget (highest relevance
    first)". When the budget holds every passing memory, the order changes nothing.
    Ties keep the order given (the score's). The invariants unrelated to the message
    (:func:`unrelated_invariant`) come last, in the order given (the score's): under the
    unrelated level relevance ranks nothing, and their score is their priors; those sharing
    a domain with the message's ``area`` first (:func:`in_area`)."""
    if not by_relevance:
        return [*leading, *rest]
    related: list[Ranked] = []
    inside: list[Ranked] = []  # the unrelated invariants, by score as given
    outside: list[Ranked] = []
    for r in rest:
        if not unrelated_invariant(r):
            related.append(r)
        elif in_area(r, area):
            inside.append(r)
        else:
            outside.append(r)
    related.sort(key=_less_relevant)
    return [*sorted(leading, key=_less_relevant), *related, *inside, *outside]


def area_of(ranked: Sequence[Ranked]) -> frozenset[str]:
    """The message's area: the domains of the candidates at least
    :data:`~engrain.recall.area.AREA_RELEVANCE` relevant (its clear matches)."""
    return frozenset(d for r in ranked if r.relevance >= AREA_RELEVANCE for d in r.memory.domains)


def in_area(r: Ranked, area: frozenset[str]) -> bool:
    """Whether ``r``'s memory shares a domain with the message's ``area``."""
    return not area.isdisjoint(r.memory.domains)


#: The decimal places of relevance that :func:`fill_order` compares. Relevance comes from
#: float32 cosines, whose seventh digit depends on where a vector sits in the matrix it is
#: searched in (BLAS kernels sum a block's last rows in another order): a store and its
#: exported and imported copy held one pair of conflicting facts at relevance 1.0 and
#: 0.99999995 and filled them in opposite orders. Relevance equal to six places is equal,
#: and ties keep the score's order.
RELEVANCE_PLACES = 6


def _less_relevant(r: Ranked) -> float:
    """The sort key of :func:`fill_order`: most relevant first, to
    :data:`RELEVANCE_PLACES` decimal places."""
    return -round(r.relevance, RELEVANCE_PLACES)


def unrelated_invariant(r: Ranked) -> bool:
    """Whether ``r`` is an invariant under :data:`UNRELATED_RELEVANCE`: it passes on its
    priors and competes within :data:`UNRELATED_INVARIANT_SHARE`."""
    return r.memory.kind is Kind.INVARIANT and r.relevance < UNRELATED_RELEVANCE


def unrelated_learning(r: Ranked) -> bool:
    """Whether ``r`` is a typed learning other than an invariant (not a conversation chunk)
    under :data:`UNRELATED_RELEVANCE`: unrelated to the message, it is not injected,
    whatever its score.

    Under that level relevance says the memory is not about the message (an unrelated
    memory stays under ~0.2, ``recall.relevance``), so a score over the threshold is its
    priors alone: recency (+35% for a bug report), use and a shared domain. The gated score
    is meant to say "this helps with this message"; priors say a memory is current and
    valued, not that it is about this. Invariants keep their place in the background
    (:func:`unrelated_invariant`: they prevent mistakes, and the seed gives them the lowest
    thresholds); a pin gives no exception (a pin counts as relevant only when it is). On
    the gating evaluation's eight tune halves such learnings were 119 lines (6,369 tokens,
    mostly a bug report's decisions and facts at relevance 0.11-0.20) and none labelled
    needed (session 22, h4). An explicit budget (no thresholds) fills as before."""
    return (
        r.relevance < UNRELATED_RELEVANCE
        and r.memory.kind is not Kind.INVARIANT
        and not r.memory.provenance.turn_ids
    )


def present_below(r: Ranked, limit: float) -> bool:
    """Whether ``r`` is a memory about the present (``score.PRESENT_KINDS``: a context
    note) whose relevance is under ``limit``, its intent's threshold: such a note is judged
    on its relevance, which must clear the threshold its score clears.

    A context note says what is going on now ("chasing issue #1432: the rename test is
    flaky on windows-2022"). Its age is already in its relevance (``present_scale``), and
    its recency term (a 14-day half-life, +35% for a bug report) is largest exactly while
    it is current, which says nothing about this message: with use it carried notes at
    relevance 0.15-0.25 over a bug report's threshold of 0.25 (on the tuning halves, 9
    lines of 8 debugging blocks, none labelled needed, 2 labelled misleading: that flaky
    test for other CI failures). The notes labelled needed clear their threshold on
    relevance alone (0.38-1.0)."""
    return r.memory.kind in PRESENT_KINDS and r.relevance < limit


def correction_below(r: Ranked, limit: float) -> bool:
    """Whether ``r`` is a correction whose relevance is under ``limit``, its intent's
    threshold: a correction is judged on its relevance, which must clear the threshold its
    score clears, as a context note's must (:func:`present_below`).

    A correction says how something stands now that an earlier memory said otherwise
    ("Correction: the 2.x MSRV has been Rust 1.78 since 2.3.0, not 1.74"); the memory it
    corrects is superseded and never injected, so the correction is what a message about
    that thing needs, and only such a message. The seed gives it no type boost: beyond its
    relevance its score is its recency (a 365-day half-life: corrections are recent, the
    change being what made them) and its use, which say that it is the current word on its
    subject, not that this message is about that subject. With them corrections at
    relevance 0.09-0.34 passed thresholds of 0.25-0.40: on the tuning halves 34 lines in 22
    blocks, 17 of them bug reports, none labelled needed (the labelled ones are at 0.5 and
    more, or raised to 0.5 as a convention of a request's area, ``recall.area``). The
    same test for facts, whose score has the same terms, cost a labelled fact at 0.28."""
    return r.memory.kind is Kind.CORRECTION and r.relevance < limit


def needed_relevance(used: int, budget: int) -> float:
    """The relevance a typed learning needs to join a block of ``budget`` tokens of which
    more relevant memories take ``used``: ``FULL_BLOCK_RELEVANCE × used / budget``. A block
    without more relevant memories takes any memory that passed its threshold; the more of
    it they fill, the more a memory must be about the message to add to them rather than
    dilute them, up to :data:`FULL_BLOCK_RELEVANCE` for the last tokens. A budget is what a
    message of this complexity may use, not what it must use."""
    if budget <= 0:
        return FULL_BLOCK_RELEVANCE
    return FULL_BLOCK_RELEVANCE * min(1.0, used / budget)


def select_gated(
    ranked: Sequence[Ranked],
    *,
    line_tokens: Callable[[MemoryFields], int],
    token_budget: int,
    line_floor: Callable[[MemoryFields], int] | None = None,
    intent: Intent,
    threshold_shift: float = 0.0,
    apply_threshold: bool = True,
    explain: bool = True,
    top_k: int | None = None,
    layout: Layout = Layout(0),
    partners: Mapping[str, Sequence[Ranked]] | None = None,
    build: Callable[[Sequence[MemoryFields]], list[Memory]] = built_each,
    trim: Trim = NO_TRIM,
    by_lift: bool = False,
) -> tuple[list[ScoredMemory], int, list[Decision]]:
    """Greedy fill of ``ranked`` (best score first) within ``token_budget`` tokens, wrapper
    and headings included, and at most ``top_k`` memories:

    1. pinned memories at least :data:`PIN_MIN_RELEVANCE` relevant lead, past the threshold
       (with ``trim.pin_threshold``, only those that clear it; rule 8);
    2. procedural candidates need :data:`PROCEDURAL_MIN_RELEVANCE` and a place in their
       share (:data:`PROCEDURAL_SHARE`), every other candidate its intent's threshold
       (when ``apply_threshold``);
    3. a selected memory's conflict ``partners`` (read before selection) join it, budget
       permitting, so the model sees both versions;
    4. with thresholds, a typed learning (not a conversation chunk) needs
       :func:`needed_relevance` of the block filled so far, and the invariants unrelated to
       the message (:func:`unrelated_invariant`) come last, those of the message's area
       first, within :data:`UNRELATED_INVARIANT_SHARE` of the budget and at most
       :data:`BACKGROUND_TOKENS`;
    5. with thresholds, a procedural candidate of a message asking for no work needs
       :data:`ANSWER_PROCEDURAL_MIN_RELEVANCE` (:func:`procedural_min_relevance`);
    6. with thresholds, a memory about the present (a context note) or a correction needs
       relevance at least its threshold as well as the score (:func:`present_below`,
       :func:`correction_below`);
    7. with thresholds, a typed learning other than an invariant needs
       :data:`UNRELATED_RELEVANCE` as well as the score (:func:`unrelated_learning`);
    8. with thresholds, the rules of ``trim`` that are on (:mod:`~engrain.recall.trim`):
       a pin leads only past its kind's test, a question asking for no procedure gets no
       unrelated invariant, a line restating one already selected is left out;
    9. with thresholds and ``by_lift`` (``GateOptions.unlifted_threshold``, off), a kind the
       intent does not lift needs no more than the balanced intents' threshold
       (:func:`unlifted_threshold`).

    ``line_tokens`` costs a memory's line; it is called only for memories considered.
    ``line_floor``, a lower bound of it that costs less (``gate.line_floor``), lets a call
    without ``explain`` pass over a memory that cannot fit without costing its line.
    ``build`` gives the memories of the selection (only those are built, and a decision's
    when explaining).
    With thresholds, the candidates are walked most relevant first (:func:`fill_order`).
    Returns the selection (pinned, then procedural, then the rest in the order walked), the
    tokens the block will use, and (with ``explain``) a decision per candidate; without
    ``explain`` the walk stops once no line fits any more."""
    rules = _Rules(
        token_budget, intent, threshold_shift, apply_threshold, explain, top_k, line_tokens,
        line_floor,
        procedural_min_relevance(intent) if apply_threshold else PROCEDURAL_MIN_RELEVANCE,
        int(token_budget * PROCEDURAL_SHARE),
        min(int(token_budget * UNRELATED_INVARIANT_SHARE), BACKGROUND_TOKENS), {},
        trim if apply_threshold else NO_TRIM, by_lift,
    )  # fmt: skip
    fill = _Fill(token_budget, layout, explain)
    partners = partners or {}
    leading = [r for r in ranked if r.memory.pinned and r.relevance >= PIN_MIN_RELEVANCE
               and (not rules.trim.pin_threshold or _passes(rules, r))]  # fmt: skip
    lead_ids = {r.memory.id for r in leading}
    area = area_of(ranked) if apply_threshold else frozenset()
    seen: set[str] = set()
    for r in fill_order(leading, [r for r in ranked if r.memory.id not in lead_ids],
                        by_relevance=apply_threshold, area=area):  # fmt: skip
        if r.memory.id in seen:
            continue
        capped = top_k is not None and fill.count >= top_k
        if not explain and (capped or token_budget - fill.used < MIN_LINE_TOKENS):
            break
        seen.add(r.memory.id)
        if capped:
            fill.note(rules.costed(r), False, f"top_k={top_k} reached")
            continue
        group = _consider(rules, fill, r, r.memory.id in lead_ids)
        if group is not None and (joined := partners.get(r.memory.id)):
            _join_partners(rules, fill, r, group, joined, seen)
    items = [item for group in fill.groups for item in group]
    memories = build([item.memory for item in items])
    selected = [ScoredMemory(memory, item.score, item.similarity, item.tokens)
                for memory, item in zip(memories, items, strict=True)]  # fmt: skip
    return selected, fill.used, fill.decisions


class _Rules(NamedTuple):
    """One selection's rules: the budget, the intent's thresholds (``shift``ed, applied
    when ``thresholds``), the procedural memories' relevance floor and share, the unrelated
    invariants' share, how a line is costed, and ``limits``, each kind's threshold once a
    call."""

    budget: int
    intent: Intent
    shift: float
    thresholds: bool
    explain: bool
    top_k: int | None
    line_tokens: Callable[[MemoryFields], int]
    line_floor: Callable[[MemoryFields], int] | None
    procedural_floor: float
    share: int
    unrelated_share: int
    limits: dict[Kind, float]
    trim: Trim = NO_TRIM
    by_lift: bool = False

    def costed(self, r: Ranked) -> _Item:
        """``r`` with its line's tokens."""
        return _Item(r.memory, r.score, r.similarity, self.line_tokens(r.memory))

    def limit(self, kind: Kind) -> float:
        """:func:`threshold_for` ``kind`` under this selection's intent and shift."""
        limit = self.limits.get(kind)
        if limit is None:
            limit = self.limits[kind] = threshold_for(
                kind, self.intent, self.shift, by_lift=self.by_lift
            )
        return limit


def _consider(rules: _Rules, fill: _Fill, r: Ranked, leading: bool) -> int | None:
    """Select ``r`` if its kind's test, the relevance the block asks of it and its line's
    cost allow (:func:`_place`); the group it joined (0 leading pins, 1 procedural
    memories, 2 the rest), or ``None``. ``leading``: a pin relevant enough to lead. A
    procedural memory is judged on its relevance within its share, not on the score
    threshold; any other on its intent's threshold (:func:`_rejection`). Run once per
    candidate walked, so the tests are written here and the reasons only when explaining."""
    memory = r.memory
    floor = rules.line_floor
    if not rules.explain and floor is not None and fill.used + floor(memory) + 1 > rules.budget:
        # it cannot fit, whatever its exact count and its other tests: without explanations
        # no reason is written, so the cheapest test that rejects it decides (a deep call
        # walks ~150 candidates past a block already full)
        return None
    if leading:
        group, why = 0, "pinned"
    elif memory.memory_type is MemoryType.PROCEDURAL:
        if r.relevance < rules.procedural_floor:
            if rules.explain:
                _rejected(fill, rules, r)
            return None
        group, why = 1, f"procedural, relevance {r.relevance:.3f}"
    else:
        if rules.thresholds:
            limit = rules.limits.get(memory.kind)
            if limit is None:
                limit = rules.limit(memory.kind)
            if (
                r.score < limit
                or unrelated_learning(r)
                or present_below(r, limit)
                or correction_below(r, limit)
            ):
                if rules.explain:
                    _rejected(fill, rules, r)
                return None
        group, why = 2, "selected"
    background = rules.thresholds and group != 0 and unrelated_invariant(r)
    if background and not rules.trim.background:
        if rules.explain:
            fill.note(rules.costed(r), False, "unrelated invariant: a question asking for "
                      "no procedure gets no background")  # fmt: skip
        return None
    if rules.thresholds and group != 0 and not background and not memory.provenance.turn_ids:
        above = fill.used_above(r.relevance)
        need = needed_relevance(above, rules.budget)
        if r.relevance < need:
            if rules.explain:
                fill.note(rules.costed(r), False, f"relevance {r.relevance:.3f} below "
                          f"{need:.2f}: {above}/{rules.budget} tokens taken by more "
                          "relevant memories")  # fmt: skip
            return None
    if rules.trim.restated is not None and group != 0:
        placed = (item.memory for group_items in fill.groups for item in group_items)
        if (same := restates(memory, placed, rules.trim.restated)) is not None:
            if rules.explain:
                fill.note(rules.costed(r), False, f"restates {same}, already in the block")
            return None
    return group if _place(rules, fill, r, group, why, background) else None


def _passes(rules: _Rules, r: Ranked) -> bool:
    """Whether ``r`` clears its kind's test without a pin (``trim.pin_threshold``): a
    procedural memory its relevance floor, any other its intent's threshold and the
    relevance rules :func:`_consider` applies (:func:`unrelated_learning`,
    :func:`present_below`, :func:`correction_below`)."""
    if r.memory.memory_type is MemoryType.PROCEDURAL:
        return r.relevance >= rules.procedural_floor
    limit = rules.limit(r.memory.kind)
    return not (
        r.score < limit
        or unrelated_learning(r)
        or present_below(r, limit)
        or correction_below(r, limit)
    )


def _rejected(fill: _Fill, rules: _Rules, r: Ranked) -> None:
    """Note why ``r``'s kind's test rejected it (:func:`_rejection`; only when explaining:
    the reasons are not written otherwise)."""
    fill.note(rules.costed(r), False, _rejection(rules, r))


def _rejection(rules: _Rules, r: Ranked) -> str:
    """Why ``r``'s kind's test rejects it: a procedural memory under its relevance floor;
    any other's score under its kind's threshold, a typed learning unrelated to the
    message (:func:`unrelated_learning`), a context note or a correction less relevant than
    its threshold (:func:`present_below`, :func:`correction_below`)."""
    memory = r.memory
    if memory.memory_type is MemoryType.PROCEDURAL:
        return f"procedural, relevance {r.relevance:.3f} below {rules.procedural_floor:.2f}"
    limit = rules.limit(memory.kind)
    if r.score < limit:
        return f"score {r.score:.3f} below {limit:.2f}"
    if unrelated_learning(r):
        return (
            f"unrelated to the message, relevance {r.relevance:.3f} below {UNRELATED_RELEVANCE:.2f}"
        )
    what = "a correction" if memory.kind is Kind.CORRECTION else "about the present"
    return f"{what}, relevance {r.relevance:.3f} below {limit:.2f}"


def _place(rules: _Rules, fill: _Fill, r: Ranked, group: int, why: str, background: bool) -> bool:
    """Add ``r`` to ``group`` if its line fits the block and its group's share (the
    procedural memories', the unrelated invariants' when ``background``). Without
    explanations :func:`_consider` has passed over a memory whose cheaper lower bound
    cannot fit, uncosted."""
    item = rules.costed(r)
    if group == 1 and fill.procedural_used + item.tokens > rules.share:
        fill.note(
            item, False, f"procedural share full ({fill.procedural_used}/{rules.share} tokens)"
        )
        return False
    if background and fill.unrelated_used + item.tokens > rules.unrelated_share:
        fill.note(item, False, f"unrelated invariants' share full "
                  f"({fill.unrelated_used}/{rules.unrelated_share} tokens)")  # fmt: skip
        return False
    if not fill.add(item, group, why, r.relevance, walked=group != 0):
        return False
    if group == 1:
        fill.procedural_used += item.tokens
    if background:
        fill.unrelated_used += item.tokens
    return True


def _join_partners(
    rules: _Rules,
    fill: _Fill,
    r: Ranked,
    group: int,
    partners: Sequence[Ranked],
    seen: set[str],
) -> None:
    """``r``'s conflict partners join its group, budget and ``top_k`` permitting, so the
    model sees both versions."""
    for partner in partners:
        if partner.memory.id not in seen and (rules.top_k is None or fill.count < rules.top_k):
            seen.add(partner.memory.id)
            fill.add(rules.costed(partner), group, f"conflicts with {r.memory.id}",
                     partner.relevance, walked=False)  # fmt: skip
