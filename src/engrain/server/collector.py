"""The garbage collector in a server's process: what lives as long as the process kept out
of its full passes (issue 18).

A full collection walks every object the collector tracks and every reference they hold. In
a process serving a user with 100,000 memories that is ~61,000 objects and ~443,000
references after 200 calls, ~35 ms of CPU on this machine, and it lands in one call in ~200
(the p99's call). ~50,000 of those objects (~290,000 references, ~29 ms) are what the
process imported (modules, classes, functions, their dicts), alive until it exits; what
calls keep (``store/rows.py``'s kept rows, ``recall/lines.py``'s lines, the working sets)
is the rest (docs/scale.md, "Session 17: … (h10)").

:func:`settle` collects once, then moves every object still alive to the collector's
permanent generation (:func:`gc.freeze`), which its passes skip: a full collection then
walks only what was made after. ``engrain serve`` does it once per process as its app
starts, after the imports, the engine and its store are open and before the first request,
so nothing else runs then. What it costs: an object alive then that later becomes part
of a reference cycle is freed only when the process exits (reference counting still frees
the rest). A library cannot decide that for the application that embeds it, so
:class:`~engrain.Engine` never does; an application that owns its process may call
:func:`settle` (or :func:`gc.freeze`) itself once it has started (docs/scale.md).
"""

from __future__ import annotations

import gc

__all__ = ["settle"]


def settle() -> int:
    """Collect what is garbage now, then keep every object still alive out of the
    collector's passes from now on (:func:`gc.freeze`); how many objects are kept out."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
