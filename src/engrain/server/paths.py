"""A memory's id in a route's path (``/v1/memories/{id}``, ``/ui/memories/{id}``).

An import takes any id, ``notes/2024`` or ``../x`` included, and clients send it as one
percent-encoded segment (:func:`engrain.wire.path_segment`), which the server decodes
before routing. So a route's id matches ``/`` too: ``{memory_id:path}`` in the routes of
one action (``…/{id}/pin``, whose last segment names the action) and
``{memory_id:memory_id}`` in a memory's own route (``GET``, ``PATCH``, ``DELETE``
``…/{id}``), which takes any id but one ending in an action's segment: ``PATCH
/v1/memories/X/pin`` stays a ``405`` rather than a change of a memory called ``X/pin``.
A memory whose id ends so (``x/pin``) is read through the lists and changed through the
action routes and ``POST /v1/forget``; its own page and ``GET`` are the price.
"""

from __future__ import annotations

from starlette.convertors import PathConvertor, register_url_convertor

#: The last segments of the routes of one memory's actions, on the API and the inspector.
ACTIONS = ("pin", "mute", "relations", "edit", "forget", "correct")


class MemoryIdConvertor(PathConvertor):
    """Any id, ``/`` included, that does not end in ``/`` and an action's name."""

    regex = ".+" + "".join(f"(?<!/{action})" for action in ACTIONS)


register_url_convertor("memory_id", MemoryIdConvertor())
