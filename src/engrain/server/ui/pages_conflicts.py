"""Conflicts and duplicates: the review queue of the user viewed, and its resolution.

``GET /conflicts`` lists :meth:`Engine.review`'s pairs (memories flagged as contradicting
each other, then near-duplicates); ``POST /conflicts/resolve`` applies a person's choice
for one pair with :meth:`Engine.resolve` (one transaction: keep one and forget the other,
mark one as correcting the other, or keep both) and comes back to the queue.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engrain.errors import ValidationError
from engrain.review import Resolution
from engrain.server.models import COMPOSED, ID_RULES
from engrain.server.ui.pages_scope import back, memories_of, project_for
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep, check_csrf

router = APIRouter()

#: Pairs shown at once (the queue is worked from the top).
PAGE = 50
Field = Annotated[str | None, Query(max_length=200)]
MemoryId = Annotated[str, Form(**ID_RULES), COMPOSED]
#: The form's choices: (value, resolution, whether the second memory is the one kept).
CHOICES = {
    "keep-first": (Resolution.KEEP, False),
    "keep-second": (Resolution.KEEP, True),
    "first-corrects": (Resolution.CORRECT, False),
    "second-corrects": (Resolution.CORRECT, True),
    "both": (Resolution.BOTH, False),
}
DONE = {"keep": "Kept one, forgot the other.", "correct": "Marked as a correction.",
        "both": "Kept both."}  # fmt: skip


@router.get("/conflicts", response_class=HTMLResponse)
def conflicts(
    request: Request, session: SessionDep, project: Field = None, done: Field = None
) -> HTMLResponse:
    """The pairs to review, conflicts first."""
    scope = project_for(request, session, project)
    pairs = engine_of(request).review(session.user_id, project=scope, limit=PAGE)
    return page(request, "conflicts.html", session, project=scope or "", pairs=pairs,
                notice=DONE.get(done or ""), page_size=PAGE)  # fmt: skip


@router.post("/conflicts/resolve")
def resolve(
    request: Request,
    session: SessionDep,
    first: MemoryId,
    second: MemoryId,
    csrf: Annotated[str | None, Form()] = None,
    choice: Annotated[str | None, Form(max_length=40)] = None,
    project: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    """Resolve one pair as chosen, in one transaction."""
    check_csrf(request, session, csrf)
    if choice not in CHOICES:
        raise ValidationError("choose how to resolve the pair")
    resolution, swap = CHOICES[choice]
    scope = project_for(request, session, project)
    engine = engine_of(request)
    memories_of(engine, session, [first, second])  # 404 for one the key may not see
    kept, other = (second, first) if swap else (first, second)
    engine.resolve(kept, other, session.user_id, resolution)
    target = back(request, "/conflicts", project=scope, done=resolution.value)
    return RedirectResponse(target, status_code=303)
