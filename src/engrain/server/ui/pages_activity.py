"""Activity: the contexts recently injected for the user viewed, with the feedback given.

``GET /activity`` lists :meth:`Engine.contexts` (newest first: when, the memories each one
injected, the feedback so far); ``POST /activity/feedback`` gives feedback on one context
with :meth:`Engine.feedback` (helpful or not: each memory's usefulness moves toward it)
and comes back to the list.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engrain.errors import ValidationError
from engrain.server.auth import Scope
from engrain.server.models import COMPOSED, ID_RULES
from engrain.server.ui.pages_scope import back, project_for
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep, check_csrf

router = APIRouter()

#: Contexts shown at once.
PAGE = 30
Field = Annotated[str | None, Query(max_length=200)]
ANSWERS = {"yes": True, "no": False}


def verdict(target: float) -> str:
    """A feedback target as words."""
    if target == 1.0:
        return "helpful"
    if target == 0.0:
        return "not helpful"
    return f"score {target:.2f}"


@router.get("/activity", response_class=HTMLResponse)
def activity(
    request: Request, session: SessionDep, project: Field = None, done: Field = None
) -> HTMLResponse:
    """Recent contexts, newest first, each with a feedback form."""
    scope = project_for(request, session, project)
    records = engine_of(request).contexts(session.user_id, project=scope, limit=PAGE)
    return page(request, "activity.html", session, project=scope or "", records=records,
                verdict=verdict, notice="Thanks: feedback recorded." if done else None,
                page_size=PAGE)  # fmt: skip


@router.post("/activity/feedback")
def feedback(
    request: Request,
    session: SessionDep,
    context_id: Annotated[str, Form(**ID_RULES), COMPOSED],
    csrf: Annotated[str | None, Form()] = None,
    helpful: Annotated[str | None, Form(max_length=3)] = None,
    project: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    """Feedback on one context: helpful (``yes``) or not (``no``)."""
    check_csrf(request, session, csrf)
    if helpful not in ANSWERS:
        raise ValidationError("say whether the context was helpful (yes or no)")
    scope = project_for(request, session, project)
    engine = engine_of(request)
    Scope(request.app.state.keys, session.key).check_context(engine, session.user_id, context_id)
    engine.feedback(session.user_id, context_id, helpful=ANSWERS[helpful])
    return RedirectResponse(back(request, "/activity", project=scope, done="1"), status_code=303)
