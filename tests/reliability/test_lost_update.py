"""Lost updates between processes: two processes change the same memories at once.

``pin`` racing ``mute`` over the same memories must leave each one pinned AND muted (issue
11: both read the row and wrote the whole row back, so one flag was lost); ``forget``
racing ``pin`` must leave no memory whose forget returned 1 (on PostgreSQL 492 of 500
forgotten memories came back: a privacy failure)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import helpers, workers
from tests.reliability.processes import results, run_together
from tests.reliability.scale import scales

USER = "ada"


def _seed(url: str, data_dir: Path, name: str, count: int) -> list[str]:
    rng = random.Random(count)
    records = [{"type": "memory", "id": f"{name}-{i}", "user_id": USER, "kind": "fact",
                "memory_type": "semantic", "content": helpers.sentence(rng, name),
                "created_at": "2025-01-01T00:00:00+00:00"} for i in range(count)]  # fmt: skip
    engine = helpers.open_engine(url, data_dir, auto_compress=False)
    try:
        engine.import_records(records)
    finally:
        engine.close()
    return [r["id"] for r in records]


def _race(url: str, data_dir: Path, tmp_path: Path, ids: list[str],
          actions: tuple[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    outs = [tmp_path / f"{a}.json" for a in actions]
    jobs = [(workers.flip, (a, url, str(data_dir), USER, ids, str(o)))
            for a, o in zip(actions, outs, strict=True)]  # fmt: skip
    codes = run_together(jobs, timeout=300)
    assert codes == [0, 0]
    sides = results(outs)
    engine = helpers.open_engine(url, data_dir, auto_compress=False)
    try:
        final = {m.id: m for m in engine.store.get(USER, ids)}
    finally:
        engine.close()
    return sides, final


@pytest.mark.parametrize("count", scales(80, 500))
def test_pin_and_mute_at_once_lose_nothing(
    url: str, data_dir: Path, tmp_path: Path, count: int
) -> None:
    """Process A pins every memory while process B mutes every one, in the same order."""
    ids = _seed(url, data_dir, "pm", count)
    sides, final = _race(url, data_dir, tmp_path, ids, ("pin", "mute"))
    lost_pins = [i for i in ids if i in final and not final[i].pinned]
    lost_mutes = [i for i in ids if i in final and not final[i].muted]
    summary = {"memories": count, "pins": len(sides[0]["done"]), "mutes": len(sides[1]["done"]),
               "errors": [s["errors"] for s in sides], "rows": len(final),
               "lost_pins": len(lost_pins), "lost_mutes": len(lost_mutes)}  # fmt: skip
    print(f"\npin+mute: {json.dumps(summary)}")
    assert not any(s["errors"] for s in sides), [s["examples"] for s in sides]
    assert len(final) == count
    assert not lost_pins, lost_pins[:5]
    assert not lost_mutes, lost_mutes[:5]


@pytest.mark.parametrize("count", scales(80, 500))
def test_forget_wins_over_a_concurrent_pin(
    url: str, data_dir: Path, tmp_path: Path, count: int
) -> None:
    """Process A forgets every memory while process B pins them: nothing forgotten returns."""
    ids = _seed(url, data_dir, "fp", count)
    sides, final = _race(url, data_dir, tmp_path, ids, ("forget", "pin"))
    forgotten = sides[0]["done"]
    back = [i for i in forgotten if i in final]
    summary = {"memories": count, "forget_returned_1": len(forgotten),
               "pins": len(sides[1]["done"]), "pins_not_found": sides[1]["not_found"],
               "errors": [s["errors"] for s in sides], "left": len(final),
               "resurrected": len(back)}  # fmt: skip
    print(f"\nforget+pin: {json.dumps(summary)}")
    assert not any(s["errors"] for s in sides), [s["examples"] for s in sides]
    assert len(forgotten) == count  # nobody else deletes: each forget finds its memory
    assert not back, back[:5]
    assert not final
