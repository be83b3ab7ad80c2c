"""Compiled tiers per user and project: stored, checked for staleness, rebuilt off-thread.

A compiled tier set is a state document (namespace ``tiers``, key = the project or ``*``)
that records the store :meth:`~engrain.store.Store.revision` it was compiled from. Any add,
edit or delete of the user's memories changes the revision, so the cache is stale from that
moment without anyone having to remember to invalidate it. A reader that finds the cache
fresh gets it from an in-process copy (one revision lookup); one that finds it stale or
missing gets ``None``, schedules a rebuild on a background thread and falls back to tier 3,
so no request waits on compilation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engrain.background import Worker
from engrain.model import Memory, as_utc, utcnow
from engrain.store.base import MemoryFilter, Patch, State, Store
from engrain.tiers.compile import CompiledTier, Summarize, compile_dna, compile_field_guide
from engrain.tiers.prepare import eligible, promote_high_usage
from engrain.tiers.registry import TIER_BUDGETS, Tier
from engrain.tokens import count_tokens

#: Tokens of the ``<memory>`` wrapper a tier is injected in (kept out of its budget).
WRAPPER_TOKENS = count_tokens("<memory>\n\n</memory>")


def wrap(text: str) -> str:
    """A compiled tier as injected: in the spec's ``<memory>`` block (empty stays empty)."""
    return f"<memory>\n{text}\n</memory>" if text else ""


NAMESPACE = "tiers"
ALL_PROJECTS = "*"
#: Compiled tier sets kept in process (least recently served dropped first): as many users
#: as the SQLite store keeps working sets. A set holds its memories, so an unbounded map
#: grew with every user a long-lived process ever served (``bench/attacks/many_users.py``).
HELD_SETS = 64


@dataclass(frozen=True)
class TierSet:
    """Tiers 1 and 2 of one user and project, and what they were compiled from."""

    user_id: str
    project: str | None
    revision: int
    compiled_at: datetime
    tiers: dict[Tier, CompiledTier]
    stats: dict[str, int] = field(default_factory=dict)
    memories: dict[str, Memory] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the cache document)."""
        return {
            "revision": self.revision,
            "compiled_at": self.compiled_at.isoformat(),
            "tiers": {str(int(t)): c.to_dict() for t, c in self.tiers.items()},
            "stats": dict(self.stats),
        }

    @classmethod
    def from_dict(cls, user_id: str, project: str | None, data: dict[str, Any]) -> TierSet:
        """Inverse of :meth:`to_dict`."""
        return cls(
            user_id, project, int(data["revision"]),
            as_utc(datetime.fromisoformat(data["compiled_at"])),
            {Tier(int(k)): CompiledTier.from_dict(v) for k, v in data["tiers"].items()},
            {k: int(v) for k, v in data.get("stats", {}).items()},
        )  # fmt: skip


class TierCache:
    """Compiles, stores and serves tiers 1 and 2 for the users of one store."""

    def __init__(
        self, store: Store, summarize: Summarize | None = None, worker: Worker | None = None
    ) -> None:
        self.store = store
        self.summarize = summarize
        self.worker = worker or Worker()
        self._fresh: OrderedDict[tuple[str, str], TierSet] = OrderedDict()
        self._fresh_lock = threading.Lock()

    # -- reads ------------------------------------------------------------------------------

    def fresh(self, user_id: str, project: str | None) -> TierSet | None:
        """The compiled tiers if they match the user's memories as they are now, else
        ``None``. Costs one revision lookup when this process has them already."""
        key = (user_id, project or ALL_PROJECTS)
        revision = self.store.revision(user_id)
        with self._fresh_lock:
            found = self._fresh.get(key)
            if found is not None:
                self._fresh.move_to_end(key)
        if found is not None and found.revision == revision:
            return found
        stored = self.stored(user_id, project)
        if stored is None or stored.revision != revision:
            return None
        loaded = self._with_memories(stored)
        self._hold(key, loaded)
        return loaded

    def _hold(self, key: tuple[str, str], tiers: TierSet) -> None:
        """Keep ``tiers`` in process, the least recently served set dropped past
        :data:`HELD_SETS` (a dropped set is read from the store again when next served)."""
        with self._fresh_lock:
            self._fresh[key] = tiers
            self._fresh.move_to_end(key)
            while len(self._fresh) > HELD_SETS:
                self._fresh.popitem(last=False)

    def stored(self, user_id: str, project: str | None) -> TierSet | None:
        """The last compiled tiers, fresh or not (``None`` if never compiled)."""
        data = self.store.get_state(user_id, NAMESPACE, project or ALL_PROJECTS)
        return None if data is None else TierSet.from_dict(user_id, project, data)

    def is_fresh(self, tiers: TierSet) -> bool:
        """Whether ``tiers`` still match the user's memories."""
        return tiers.revision == self.store.revision(tiers.user_id)

    # -- compilation ------------------------------------------------------------------------

    def compile(self, user_id: str, project: str | None, now: datetime | None = None) -> TierSet:
        """Compile tiers 1 and 2 now and store them: promotion first, then semantic dedup,
        the decay filter and the two compilers."""
        now = as_utc(now or utcnow())
        flt = MemoryFilter(project=project, include_muted=False, include_compressed=False,
                           include_superseded=False)  # fmt: skip
        # the revision before the read the tiers are compiled from: a write that lands after
        # it (a forget on another thread or process) makes this set stale, never fresh
        revision = self.store.revision(user_id)
        memories = self.store.query(user_id, flt)
        promoted = promote_high_usage(memories, now)
        if promoted:
            # patches, not whole rows: a memory forgotten or changed since the read stays so
            self.store.write(patches=[Patch(user_id, m.id, {"promoted_at": m.promoted_at})
                                      for m in promoted])  # fmt: skip
            revision = self.store.revision(user_id)
            memories = self.store.query(user_id, flt)
        items, stats = eligible(memories, now)
        tiers = {
            Tier.DNA: compile_dna(
                items, budget=TIER_BUDGETS[Tier.DNA] - WRAPPER_TOKENS, summarize=self.summarize
            ),
            Tier.FIELD_GUIDE: compile_field_guide(
                items,
                budget=TIER_BUDGETS[Tier.FIELD_GUIDE] - WRAPPER_TOKENS,
                summarize=self.summarize,
            ),
        }
        stats["promoted"] = len(promoted)
        result = TierSet(user_id, project, revision, now, tiers, stats,
                         {m.id: m for m in items})  # fmt: skip
        key = project or ALL_PROJECTS
        self.store.write(state=[State(user_id, NAMESPACE, key, result.to_dict())])
        if self.store.revision(user_id) != revision:
            self._drop_if_forgotten(result, key)
        else:
            self._hold((user_id, key), result)
        return result

    def _drop_if_forgotten(self, result: TierSet, key: str) -> None:
        """Delete the set just stored if a memory it holds was forgotten after it was read
        (a forget that committed before this write could not see it: ``forgotten.py``),
        unless the stored set is another compile's by then."""
        held = sorted({i for part in result.tiers.values() for i in part.memory_ids})
        if len(self.store.get(result.user_id, held)) == len(held):
            return
        stamp = result.to_dict()["compiled_at"], result.revision

        def change(current: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
            mine = current is not None and (current.get("compiled_at"), current.get("revision"))
            return None if mine == stamp else current

        self.store.write(state=[State(result.user_id, NAMESPACE, key, None, change=change)])

    def schedule(
        self, user_id: str, project: str | None, now: datetime | None = None
    ) -> Future[TierSet]:
        """Compile in the background (once per user and project at a time) as of ``now``,
        the time of the request that asked for it (a replayed history compiles with its own
        time, not the wall clock's; default: the wall clock when the compile runs)."""
        key = ("tiers", user_id, project or ALL_PROJECTS)
        return self.worker.submit(key, lambda: self.compile(user_id, project, now))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the scheduled background work is done (tests, CLI, shutdown), at
        most ``timeout`` seconds; whether it is."""
        return self.worker.wait(timeout)

    def close(self) -> None:
        """Finish the work under way and stop the worker thread."""
        self.worker.close()

    def _with_memories(self, tiers: TierSet) -> TierSet:
        ids = list(dict.fromkeys(i for c in tiers.tiers.values() for i in c.memory_ids))
        found = {m.id: m for m in self.store.get(tiers.user_id, ids)}
        return TierSet(tiers.user_id, tiers.project, tiers.revision, tiers.compiled_at,
                       tiers.tiers, tiers.stats, found)  # fmt: skip
