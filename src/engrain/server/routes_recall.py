"""Reading memory for a message: context, recall, explain; feedback on what was injected;
the compiled tiers. One engine call each."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from engrain import feedback as fb
from engrain import wire
from engrain.server import models as m
from engrain.server.auth import EngineDep, ScopeDep
from engrain.server.responses import errors

router = APIRouter(prefix="/v1", tags=["recall"])

ID = m.ID_RULES


@router.post("/context", response_model=m.ContextOut, responses=errors())
def context(body: m.ContextRequest, s: ScopeDep, engine: EngineDep) -> JSONResponse:
    """The memory block to inject for a message (`Engine.context`): `text` goes into the
    prompt as is, `context_id` into `POST /v1/feedback`; `tokens`, `budget` and the
    `memories` it holds say what it cost and why."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "message"})
    # the hot path of every chat turn: wire's dict is already ContextOut's shape (the
    # schemathesis run checks it), so it is not validated a second time
    return JSONResponse(
        wire.dump_context(engine.context(body.message, user, project=project, **fields))
    )


@router.post("/recall", response_model=m.RecallOut, responses=errors())
def recall(body: m.RecallRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """The spec's recall (`Engine.recall`): the nearest memories, filtered, procedural
    first, within `token_budget` and `top_k`."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "query"})
    return wire.dump_recall(engine.recall(body.query, user, project=project, **fields))


@router.post("/explain", response_model=m.GatedOut, responses=errors())
def explain(body: m.ExplainRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """What `POST /v1/context` would decide for a message, without counting an access
    (`Engine.explain`): classification, budget, weights, and every candidate's score
    components with its verdict."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "message"})
    return wire.dump_gated(engine.explain(body.message, user, project=project, **fields))


@router.post("/feedback", response_model=m.FeedbackOut, responses=errors(404))
def feedback(body: m.FeedbackRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Whether injected memory helped (`Engine.feedback`): for a `context_id` or named
    `memory_ids`, `helpful` true/false or a `score` in [0, 1]. An unknown context id is
    404."""
    user = s.user(body.user_id)
    if body.context_id is not None:
        s.check_context(engine, user, body.context_id)
    ids = None if body.memory_ids is None else s.visible_ids(engine, user, body.memory_ids)
    if body.context_id is None and not ids:  # only memories the key cannot see: as missing
        return wire.dump_feedback(fb.FeedbackResult(fb.feedback_target(body.helpful, body.score)))
    result = engine.feedback(user, body.context_id, ids, helpful=body.helpful,
                             score=body.score)  # fmt: skip
    return wire.dump_feedback(result)


@router.get("/tiers", response_model=m.TiersOut, responses=errors())
def tiers(
    s: ScopeDep,
    engine: EngineDep,
    user_id: Annotated[str | None, Query(description=m.USER_ID, **ID), m.COMPOSED] = None,
    project: Annotated[str | None, Query(**ID), m.COMPOSED] = None,
    rebuild: bool = False,
) -> dict[str, Any]:
    """Tiers 1 (DNA summary) and 2 (field guide) of the user's memories (`Engine.tiers`):
    the cached ones when fresh, else compiled now (or always, with `rebuild`)."""
    user, project = s.resolve(user_id, project)
    return wire.dump_tiers(engine.tiers(user, project, rebuild=rebuild))
