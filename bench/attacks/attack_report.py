"""How every attack script ends: the JSON summary printed (and written with ``--json``),
exit 0 only when ``summary["ok"]`` — the contract of ``../shared/reliability``'s scripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn


def finish(summary: dict[str, Any], path: Path | None) -> NoReturn:
    """Print ``summary`` as JSON, write it to ``path`` if given, and exit 0 if it is ok."""
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)
    if path:
        path.write_text(text + "\n", encoding="utf-8")
    sys.exit(0 if summary["ok"] else 1)
