"""Migration 011: every stored posting's term as the stemmer of session 21 gives it.

PostgreSQL keeps each memory's BM25 terms (``posting_blocks``, ``term_stats``) as the
tokenizer of the tree that wrote the row made them, and reads them with the tokenizer of
the tree that asks: a query's "kill" finds only postings stored under "kill". Until
session 21 the stemmer undoubled any doubled letter after "-ed" / "-ing", so "killed",
"passed", "filled" were stored as "kil", "pas", "fil"; it now undoubles a consonant other
than l, s, z only (``lexical.UNDOUBLED``). It also stripped "-ed" from words in "-eed"
("agreed" → "agre", "speed" → "spe" while "speeds" → "speed") and "-es" from words in
"-ees" ("agrees" → "agre"); it now takes "-eed" as Porter's step 1b does and strips only
the "s" of "-ees" (``lexical._eed``). Both changes are re-stemmed here at once, from the
terms every database before session 21 holds (:func:`stem_before`) to the final ones.
Without this migration a row written before it would stay unfindable by the new stems
(and a later edit or delete of it, which takes its postings out under the new stems, would
leave the old ones behind).

**What it does.** Every memory's content is read (a server-side cursor, :data:`BATCH` rows
at a time) and its tokens whose term the earlier stemmer (:func:`stem_before`, kept here as
it was) made differently are found (~5 in 100 rows of conversation text). For such a row,
each term either stemmer gives those tokens is set to what the current tokenizer counts in
the row (its term frequency, with the row's stored ``doc_length``, which stemming does not
change) or taken out (``writes.rewrite_blocks``, the writes' own block code), and the
document frequency of every term touched is counted again from its blocks. It sets terms
to what they must be rather than moving them from old to new, so running it on rows already
re-stemmed (or twice) changes nothing.

**Safe to interrupt, one migrator at a time.** It runs in the migration's one transaction,
like every migration, under the migrator's advisory lock: a second process opening the
database meanwhile waits at that lock and then finds 011 applied; a migrator killed halfway
(``kill -9``, a lost connection) commits nothing, so the next open finds every posting as
it was and runs it again. It first takes ``revisions`` in ``EXCLUSIVE`` mode: a writer's
transaction starts by bumping its users' revision rows (``writes.write_body``), so writers
of an older tree still running wait there, holding nothing, until the commit; readers go on
reading the old terms until then. (A process of an older tree keeps its stemmer: it must
be stopped before an upgrade, as for 008–010, which it would also not follow.)

**Later stemmer changes** re-stem the same way from their own frozen earlier stemmer
(:func:`restem_from`; migration 012, ``restem_final_e.py``: session 21's stemmer). 011
re-stems to the *current* terms, so a database from before session 21 holds them after 011
and 012 then finds its terms already set (it sets, it does not move).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from functools import lru_cache
from typing import Final

from engrain.store import lexical
from engrain.store.postgres import postings
from engrain.store.postgres.bm25 import Changes
from engrain.store.postgres.codec import Conn
from engrain.store.postgres.sql import chunks
from engrain.store.postgres.writes import rewrite_blocks

#: The migration's name.
MIGRATION: Final = "011_restem"
#: Rows read per round trip of the cursor.
BATCH: Final = 5_000
#: Rows whose postings change, gathered before their blocks are rewritten at once.
REWRITE_ROWS: Final = 2_000


@lru_cache(maxsize=65_536)
def stem_before(word: str) -> str:
    """The stemmer before session 21 (``lexical._stem`` as it was, terms stored by
    every tree before migration 011): any doubled letter left after "-ed" / "-ing" is
    undoubled ("killed" → "kil"), "-ed" and "-es" stripped after an "e" too ("agreed",
    "agrees" → "agre")."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)] + keep
            if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2]:
                base = base[:-1]
            if suffix == "s" and word.endswith("ss"):
                return word
            return base
    return word


#: A stemmer as it was when some tree stored its terms (:func:`stem_before`,
#: ``restem_final_e.stem_before``).
Stemmer = Callable[[str], str]


@lru_cache(maxsize=65_536)
def restemmed(token: str, before: Stemmer = stem_before) -> tuple[str, str] | None:
    """The term the earlier stemmer ``before`` made of a raw token (``lexical.words``) and
    the term the current one makes, if they differ; ``None`` if they are the same (or it is
    a stopword, which neither keeps)."""
    bare = lexical.word(token)
    if bare is None:
        return None
    old, new = before(bare), lexical.term(token)
    return None if old == new else (old, str(new))


def row_changes(
    content: str, length: int, before: Stemmer = stem_before
) -> dict[str, tuple[int, int] | None]:
    """The postings of a row holding ``content`` (``length``: its stored ``doc_length``)
    that re-stemming from ``before`` sets, by term: its (term frequency, length) under the
    current tokenizer, or ``None`` to take it out; empty when no term of the row changes."""
    touched = {t for token in set(lexical.words(content))
               if (pair := restemmed(token, before)) for t in pair}  # fmt: skip
    if not touched:
        return {}
    counts = Counter(lexical.tokenize(content))
    return {t: (counts[t], length) if t in counts else None for t in sorted(touched)}


def migrate(db: Conn) -> None:
    """Migration 011, in the migrator's transaction: re-stem every stored row's terms."""
    restem_from(db, stem_before)


def restem_from(db: Conn, before: Stemmer) -> None:
    """In the migrator's transaction: every stored row's terms, stored by a tree whose
    stemmer was ``before``, as the current tokenizer makes them (what 011 and 012 do)."""
    db.execute("LOCK TABLE revisions IN EXCLUSIVE MODE")
    pending: Changes = defaultdict(dict)
    rows = 0
    with db.cursor(name="restem") as rows_cursor:
        rows_cursor.itersize = BATCH
        rows_cursor.execute("SELECT user_id, seq, content, doc_length FROM memories")
        for user_id, seq, content, length in rows_cursor:
            changed = row_changes(content, int(length), before)
            if not changed:
                continue
            for found, value in changed.items():
                pending[(user_id, found)][int(seq)] = value
            rows += 1
            if rows % REWRITE_ROWS == 0:
                _apply(db, pending)
                pending = defaultdict(dict)
    _apply(db, pending)


#: For each ``(user_id, term)`` given, its document frequency counted from its blocks
#: (bytes / ``postings.LEGACY_RECORD`` size: 011–013 run before migration 014 packs the
#: blocks), with a new stamp; terms without blocks skipped.
RECOUNT = f"""INSERT INTO term_stats (user_id, term, df)
    SELECT b.user_id, b.term, sum(length(b.data)) / {postings.LEGACY_RECORD.itemsize}
    FROM posting_blocks b JOIN unnest(%s::text[], %s::text[]) AS k(u, t)
        ON b.user_id = k.u AND b.term = k.t
    GROUP BY b.user_id, b.term ORDER BY 1, 2
    ON CONFLICT (user_id, term) DO UPDATE SET df = EXCLUDED.df, stamp = EXCLUDED.stamp"""
#: ... and the terms of those no block holds any more lose their row.
DROP_EMPTY = """DELETE FROM term_stats s USING unnest(%s::text[], %s::text[]) AS k(u, t)
    WHERE s.user_id = k.u AND s.term = k.t AND NOT EXISTS (
        SELECT 1 FROM posting_blocks b WHERE b.user_id = k.u AND b.term = k.t)"""


def _apply(db: Conn, changes: Changes) -> None:
    """Rewrite the blocks ``changes`` touch and count those terms' documents again."""
    if not changes:
        return
    with db.cursor() as cur:
        rewrite_blocks(cur, changes, postings.LEGACY)
        for part in chunks(sorted(changes)):
            users, terms = [u for u, _ in part], [t for _, t in part]
            cur.execute(RECOUNT, (users, terms))
            cur.execute(DROP_EMPTY, (users, terms))
