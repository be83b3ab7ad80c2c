"""Rendering the inspector's pages: one Jinja2 environment over ``templates/`` with
autoescaping on for every template (a memory's text is shown, never interpreted), and
:func:`page`, which every route ends with.

Templates extend ``base.html`` and fill ``{% block title %}`` and ``{% block content %}``.
Each gets ``request``, ``session`` (``None`` when signed out), ``csrf``, ``ui`` (the path
the UI is mounted at: links are written ``{{ ui }}/memories``), ``nav`` (the active item of
the navigation), ``here`` (this page's path, for forms that come back to it), ``users``
(the users the header's picker offers) and the route's own context.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from engrain.engine import Engine
from engrain.server.ui.session import UiSession, full_path, local_path, root
from engrain.wire import path_segment

TEMPLATES = Path(__file__).parent / "templates"

#: The navigation: (item, path under the UI, label).
NAV = (
    ("memories", "/memories", "Memories"),
    ("try", "/try", "Try a message"),
    ("tiers", "/tiers", "Tiers"),
    ("conflicts", "/conflicts", "Conflicts"),
    ("activity", "/activity", "Activity"),
)
#: How many users the admin's picker lists (the rest are reached by typing an id).
MAX_PICKER_USERS = 200


def when(value: datetime | None) -> str:
    """A time as the pages show it: UTC, to the minute (empty for ``None``)."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def number(value: float | None, digits: int = 2) -> str:
    """A score as the pages show it."""
    return "" if value is None else f"{value:.{digits}f}"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["number"] = number
    env.filters["segment"] = path_segment  # an id in a link or a form's action
    return env


ENV = _environment()


def engine_of(request: Request) -> Engine:
    """The app's engine."""
    engine: Engine = request.app.state.engine
    return engine


def picker_users(request: Request, session: UiSession) -> list[str]:
    """The users the header offers: a key's own; for an admin key, users with memories
    (the first :data:`MAX_PICKER_USERS`) and the one viewed."""
    if not session.key.admin:
        return list(session.key.users)
    known = engine_of(request).store.users()[:MAX_PICKER_USERS]
    return known if session.user_id in known else [session.user_id, *known]


def nav_item(request: Request) -> str:
    """The navigation item of this request's page (its first path segment in the UI)."""
    parts = [p for p in local_path(request).split("/") if p]
    return parts[0] if parts else ""


def page(
    request: Request,
    template: str,
    session: UiSession | None,
    /,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """``templates/<template>`` rendered for this request, as an HTML response."""
    values: dict[str, Any] = {
        "request": request,
        "session": session,
        "csrf": session.csrf if session is not None else "",
        "ui": root(request),
        "nav": nav_item(request),
        "here": full_path(request),
        "nav_items": NAV,
        "users": picker_users(request, session) if session is not None else [],
    }
    values.update(context)
    html = ENV.get_template(template).render(values)
    return HTMLResponse(html, status_code=status_code)
