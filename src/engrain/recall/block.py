"""Assemble: the block fitted to its budget, and the record of everything decided.

:func:`assemble` takes the :class:`~engrain.recall.stages.Call` and its
:class:`~engrain.recall.stages.Selection` and gives the
:class:`~engrain.recall.results.Gated` the engine returns: the rendered block and its
tokens (:func:`_fit`: no block exceeds its budget), the selected memories and, with
``explain``, every ranked candidate with its line's cost, the decisions and the scores'
components (what ``explain()`` shows). Per-call state only.
"""

from __future__ import annotations

from engrain.recall.assemble import Format, block_tokens, render
from engrain.recall.lines import line_tokens, shown_line
from engrain.recall.results import Gated, ScoredMemory
from engrain.recall.select import Ranked
from engrain.recall.stages import Call, Selection


def assemble(call: Call, selection: Selection) -> Gated:
    """The block rendered to fit its budget (:func:`_fit`) and everything decided: with
    ``explain`` every ranked candidate with its line's cost."""
    o, ranking = call.options, selection.ranking
    year, fmt, compact, grouped = call.now.year, o.format, o.compact, o.group_days
    text, tokens, selected = _fit(selection.selected, fmt, ranking.budget.tokens, year, compact,
                                  grouped)  # fmt: skip
    call.clock.lap("assemble")
    costed = (
        [_costed(r, fmt, year, compact, grouped) for r in ranking.ranked]
        if call.explain
        else selected
    )
    pool = ranking.pool
    return Gated(pool.classification, ranking.budget, pool.weights, selected, tokens, text,
                 selection.decisions, costed, ranking.components, call.clock.laps)  # fmt: skip


def _fit(
    selected: list[ScoredMemory],
    fmt: Format,
    budget: int,
    year: int,
    compact: bool = True,
    grouped: bool = False,
) -> tuple[str, int, list[ScoredMemory]]:
    """The rendered block, its tokens and what it holds. Selection counted every line,
    newline, heading and the wrapper; should the tokenizer still merge differently across
    lines, the last memories are dropped until the block fits: no block exceeds its budget.
    The block's tokens are :func:`~engrain.recall.assemble.block_tokens` of the lines
    selection counted, exactly ``count_tokens`` of the block without encoding it again,
    and its text is made of those same lines (each looked up once here, not rendered
    again)."""
    costs = {s.memory.id: shown_line(s.memory, fmt, year, compact, grouped) for s in selected}
    while True:
        memories = [s.memory for s in selected]
        tokens = block_tokens(memories, fmt, year=year, compact=compact, grouped=grouped,
                              line=lambda m: costs[m.id])  # fmt: skip
        if tokens <= budget:
            text = render(memories, fmt, year=year, compact=compact, grouped=grouped,
                          line=lambda m: costs[m.id][0])  # fmt: skip
            return text, tokens, selected
        selected = selected[:-1]


def _costed(
    r: Ranked, fmt: Format, year: int, compact: bool = True, grouped: bool = False
) -> ScoredMemory:
    cost = line_tokens(r.memory, fmt, year, compact, grouped)
    return ScoredMemory(r.memory.built(), r.score, r.similarity, cost)
