"""Each query parameter once. No route of the API takes a list in its query, and FastAPI
keeps the last of a parameter given twice without a word: ``DELETE
/v1/memories/m?user_id=ada&user_id=bob`` acted for bob. A parameter given more than once
is a 422 ``invalid_input`` instead, as ``engrain`` refuses an option given twice."""

from __future__ import annotations

from collections import Counter

from fastapi import Request

from engrain.server.errors import RequestValidationFailed

#: The longest parameter name a refusal repeats (the rest is cut, as error paths are).
SHOWN_NAME = 80


def single_values(request: Request) -> None:
    """Refuse a request whose query names a parameter more than once."""
    counts = Counter(name for name, _ in request.query_params.multi_items())
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        name = "".join(c if c.isprintable() else "?" for c in repeated[0])
        name = name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "…"
        raise RequestValidationFailed(
            f"query.{name}: given {counts[repeated[0]]} times; give it once"
        )
