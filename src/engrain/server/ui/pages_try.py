"""Try a message: the block ``context()`` would inject for it and why, without writing.

``GET /try`` shows the form; with a ``message`` it also shows :meth:`Engine.preview`'s
answer: the tier served and the exact block, the classification, how the budget was
derived, and every candidate with its score terms and verdict, the selected ones
highlighted. An optional ``previous``, the conversation's turn before the message, is
passed as :meth:`Engine.preview`'s ``previous``, so a continuation ("and the refresh
ones?") is tried as ``context()`` would answer it; the classification's signals say
whether it leaned on that turn. A GET because nothing changes: the preview counts no use
and records no context, so a person may try as many messages as they like.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from engrain.errors import EngrainError, ValidationError
from engrain.preview import Preview
from engrain.server.ui.pages_scope import blank, project_for
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep

router = APIRouter()

#: Components of a candidate that explain a score term rather than add to the score
#: (``Gated.components``); the page shows them apart from the terms.
FACTORS = (
    "decay", "boost_table", "boost_scale", "cosine", "lexical", "lexical_no_evidence",
    "calibrated_relevance",
)  # fmt: skip
#: Longest message (and turn before) the form takes (the engine has its own limit, larger).
MAX_MESSAGE = 4_000

Text = Annotated[str | None, Query(max_length=MAX_MESSAGE)]
Field = Annotated[str | None, Query(max_length=200)]


def _budget(value: str | None) -> int | None:
    text = blank(value)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):  # "²" and "٣" are digits int() refuses
        raise ValidationError("token budget: a whole number of tokens, or leave it empty")
    return int(text)


def candidates(preview: Preview) -> list[dict[str, Any]]:
    """One row per candidate, best first: the memory, its score, verdict, the score terms
    that added something and the factors behind them."""
    gated = preview.gated
    rows = []
    for rank, decision in enumerate(gated.decisions, start=1):
        item = decision.item
        parts: Mapping[str, float] = gated.components.get(item.memory.id, {})
        rows.append({
            "rank": rank, "memory": item.memory, "score": item.score,
            "similarity": item.similarity, "tokens": item.tokens,
            "selected": decision.selected, "reason": decision.reason,
            "terms": [(k, v) for k, v in parts.items() if k not in FACTORS and v],
            "factors": [(k, parts[k]) for k in FACTORS if k in parts],
        })  # fmt: skip
    return rows


@router.get("/try", response_class=HTMLResponse)
def try_message(
    request: Request,
    session: SessionDep,
    message: Text = None,
    previous: Text = None,
    model: Field = None,
    budget: Field = None,
    project: Field = None,
) -> HTMLResponse:
    """The form, and with a message what the assistant would get for it and why."""
    form = {"message": message or "", "previous": previous or "", "model": model or "",
            "budget": budget or "", "project": project or ""}  # fmt: skip
    shown: Preview | None = None
    error = None
    status = 200
    if blank(message) is not None:
        try:
            scope = project_for(request, session, project)
            shown = engine_of(request).preview(
                message or "", session.user_id, token_budget=_budget(budget), project=scope,
                model=blank(model), previous=blank(previous),
            )  # fmt: skip
        except EngrainError as exc:
            if exc.http_status >= 500:
                raise
            error, status = exc.message, exc.http_status
    return page(request, "try.html", session, status_code=status, form=form, preview=shown,
                rows=candidates(shown) if shown else [], error=error)  # fmt: skip
