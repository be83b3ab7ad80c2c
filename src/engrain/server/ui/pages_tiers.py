"""Tiers: the compiled tier 1 (DNA summary) and tier 2 (field guide) of the user viewed.

``GET /tiers`` shows the last compiled tiers as they are stored, with their budget use,
when they were compiled and whether they are stale (the memories changed since), without
compiling anything; ``POST /tiers/rebuild`` compiles them now (:meth:`Engine.tiers` with
``rebuild=True``) and comes back to the page.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engrain.server.ui.pages_scope import back, project_for
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep, check_csrf
from engrain.tiers import TIER_BUDGETS, Tier
from engrain.tiers.cache import WRAPPER_TOKENS

router = APIRouter()

Field = Annotated[str | None, Query(max_length=200)]
TITLES = {Tier.DNA: "Tier 1 · DNA summary", Tier.FIELD_GUIDE: "Tier 2 · Field guide"}
USES = {Tier.DNA: "models with windows up to 16K tokens",
        Tier.FIELD_GUIDE: "models with windows up to 64K tokens"}  # fmt: skip


@router.get("/tiers", response_class=HTMLResponse)
def tiers(
    request: Request, session: SessionDep, project: Field = None, rebuilt: Field = None
) -> HTMLResponse:
    """The stored tiers (fresh or stale), read without compiling."""
    scope = project_for(request, session, project)
    cache = engine_of(request).tier_cache
    stored = cache.stored(session.user_id, scope)
    parts = []
    if stored is not None:
        for tier in (Tier.DNA, Tier.FIELD_GUIDE):
            part = stored.tiers.get(tier)
            if part is not None:
                budget = TIER_BUDGETS[tier] - WRAPPER_TOKENS
                parts.append({"tier": int(tier), "title": TITLES[tier], "use": USES[tier],
                              "part": part, "budget": budget,
                              "share": part.tokens / budget if budget else 0.0})  # fmt: skip
    return page(request, "tiers.html", session, project=scope or "", stored=stored,
                fresh=stored is not None and cache.is_fresh(stored), parts=parts,
                rebuilt=bool(rebuilt))  # fmt: skip


@router.post("/tiers/rebuild")
def rebuild(
    request: Request,
    session: SessionDep,
    csrf: Annotated[str | None, Form()] = None,
    project: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    """Compile tiers 1 and 2 now, then show them."""
    check_csrf(request, session, csrf)
    scope = project_for(request, session, project)
    engine_of(request).tiers(session.user_id, scope, rebuild=True)
    return RedirectResponse(back(request, "/tiers", project=scope, rebuilt="1"), status_code=303)
