"""``bench/wal_header_sync.py``: the syncs between its markers, read from a trace."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import wal_header_sync  # noqa: E402

TRACE = """\
[pid 10] fdatasync(4)                            = 0
write(2, "=== appending commit 1\\n", 23=== appending commit 1
) = 23
write(2, "=== restart\\n", 12=== restart
) = 12
[pid 10] fdatasync(7)                            = 0
fsync(8)                                = 0
write(2, "=== commit 1 after the restart\\n", 31=== commit 1 after the restart
) = 31
fdatasync(4)                            = 0
write(2, "=== end\\n", 8=== end
) = 8
fdatasync(4)                            = 0
"""


def test_count_reads_the_syncs_after_each_marker() -> None:
    # the syncs before the first marker (opening the file) and after "end" (closing) are not counted
    assert wal_header_sync.count(TRACE) == {
        "appending commit 1": 0, "restart": 2, "commit 1 after the restart": 1,
    }  # fmt: skip
