"""Select: the greedy fill of a ranking within its budget.

:func:`select` takes the :class:`~engrain.recall.stages.Call` and its
:class:`~engrain.recall.stages.Ranking` and gives the
:class:`~engrain.recall.stages.Selection`: the memories
:func:`~engrain.recall.select.select_gated` selects, with the block's layout
(:func:`_layout`) and the intent's thresholds where they apply (:func:`_thresholds_apply`),
and with ``explain`` a decision per candidate. Per-call state only (a layout's section
costs, made per call).
"""

from __future__ import annotations

from engrain.model import MemoryFields
from engrain.recall.assemble import (
    Format,
    group_of,
    header_tokens,
    section_of,
    section_tokens,
    wrapper_tokens,
)
from engrain.recall.budget import DEPTH_EFFECT
from engrain.recall.lines import line_floor, line_tokens
from engrain.recall.options import GateOptions
from engrain.recall.score import Profile
from engrain.recall.select import Layout, select_gated
from engrain.recall.stages import Call, Ranking, Selection
from engrain.store.found import built_all


def select(call: Call, ranking: Ranking) -> Selection:
    """The greedy fill of the ranking within its budget (:func:`~engrain.recall.select.
    select_gated`): the intent's thresholds, shifted by depth, apply to the automatic
    budget of the gated profile (:func:`_thresholds_apply`) unless the lead set it."""
    o, classification = call.options, ranking.pool.classification
    year, fmt, compact, grouped = call.now.year, o.format, o.compact, o.group_days
    selected, _, decisions = select_gated(
        ranking.ranked, line_tokens=lambda m: line_tokens(m, fmt, year, compact, grouped),
        line_floor=lambda m: line_floor(m, fmt, year, compact, grouped),
        token_budget=ranking.budget.tokens, intent=classification.intent,
        threshold_shift=DEPTH_EFFECT[o.depth][1] + classification.threshold_shift,
        apply_threshold=_thresholds_apply(o, call.token_budget) and not ranking.by_lead,
        explain=call.explain, top_k=call.top_k,
        layout=_layout(fmt, compact, grouped), partners=ranking.partners, build=built_all,
        trim=o.trim.for_message(classification), by_lift=o.unlifted_threshold,
    )  # fmt: skip
    call.clock.lap("select")
    return Selection(ranking, selected, decisions)


def _layout(fmt: Format, compact: bool = True, grouped: bool = False) -> Layout:
    """What a block in ``fmt`` costs beyond its lines (``grouped`` tagged: a day's header
    once, like a section's heading)."""
    if fmt is Format.TAGGED and grouped:

        def day(memory: MemoryFields) -> tuple[str, int]:
            header = group_of(memory, compact)
            return header, header_tokens(header) if header else 0

        return Layout(wrapper_tokens(), day)
    if fmt is Format.TAGGED:
        return Layout(wrapper_tokens())
    titles: dict[str, int] = {}

    def section(memory: MemoryFields) -> tuple[str, int]:
        title = section_of(memory)
        if title not in titles:
            titles[title] = section_tokens(title)
        return title, titles[title]

    return Layout(wrapper_tokens(), section)


def _thresholds_apply(options: GateOptions, explicit_budget: int | None) -> bool:
    """Intent thresholds gate the gated profile's automatic selection. An explicit budget
    is the caller deciding how much memory to inject (the spec's recall): it is filled in
    score order unless ``thresholds="always"``."""
    if options.profile is not Profile.GATED or options.thresholds == "never":
        return False
    return options.thresholds == "always" or explicit_budget is None
