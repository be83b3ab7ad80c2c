"""BM25's top-k on PostgreSQL with dynamic pruning, measured on a kept corpus: what it would
save in the postings the database reads and in the scoring the process does.

The store reads a question's whole posting lists (``bm25.STATISTICS``) and scores every
posting (``bm25.scores``). This measures, for each question (``common.make_queries``, two
seeds: nothing here is tuned, both are reported), on the rows of that statement:

- **What the database must read at least**: for blocks of 256 postings (the store's), 64 and
  16, the share of the question's postings that lie in a block holding one of the ``n``
  best memories. Any exact top-k reading whole blocks (block-max WAND, MaxScore over
  blocks) must read those (it must score each of the best exactly): a floor on its reads.
- **Pruning the scoring of the fetched lists**: :func:`pruned` (MaxScore, exact: the same
  seqs, float32 scores and order as ``bm25.scores(…).best(n)``, checked for every question
  and by ``tests/test_bm25_pruning_bench.py`` on random corpora) against the store's full
  scoring, alternating on the same rows, by the calling thread's CPU; and the share of
  postings whose term score it computed.
- With ``--server``: the database backend's CPU for the statement as the store runs it,
  returning ``length(data)`` instead of the blocks (read, not sent) and ``first_seq`` only.

    python bench/bm25_pruning.py --url 'postgresql://postgres:@/big?host=/tmp/h2-pg100k' \\
        --server --out bench/results/bm25-pruning-100k-s26-h2.json
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from engrain.store.lexical import (
    K1,
    B,
    tokenize,
)
from engrain.store.postgres import bm25
from engrain.store.postgres.postings import Postings

#: The relative margin :func:`pruned` gives its bounds for float32's rounding: a float32
#: sum of at most :data:`PRUNE_MAX_TERMS` terms, each term's score a few float32
#: operations, is within ~1e-4 of the real sum (each operation within 2**-24).
SLACK = 1e-3
#: Queries of more terms are scored fully (the rounding bound above holds up to here).
PRUNE_MAX_TERMS = 1_000
#: Pruning is tried when ``n`` is below this share of the query's postings: else nearly
#: every match is in the answer and there is nothing to skip.
PRUNE_BELOW_SHARE = 0.25

Seqs = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]


def _ranked(seqs: Seqs, scores: Floats, n: int) -> dict[int, float]:
    """The ``n`` best of ``seqs`` by ``scores`` and every tie of the ``n``-th, in the order
    given: what ``bm25.scores(…).best(n)`` returns over every match."""
    if len(scores) > n:
        cut = np.partition(scores, len(scores) - n)[len(scores) - n]
        picked = np.flatnonzero(scores >= cut)
    else:
        picked = np.arange(len(scores))
    return dict(zip(seqs[picked].tolist(), scores[picked].tolist(), strict=True))


def weights(postings: Postings, idf: float, average: np.float32) -> Floats:
    """Each posting's term score, in :meth:`LexicalIndex.scores`' float32 arithmetic (the
    same operations in the same order: the same bits for the same posting, however many
    are computed at once)."""
    tfs = postings.tfs.astype(np.float32)
    norm = K1 * (1.0 - B + B * postings.lengths.astype(np.float32) / average)
    out: Floats = idf * tfs * (K1 + 1.0) / (tfs + norm)
    return out


@dataclass
class Lists:
    """A query's posting lists as :data:`STATISTICS` returned them, decoded: the lists of
    the terms found, in the query's order, with what scoring them needs (each list's seqs
    and weights computed once, when first asked for)."""

    #: The terms found, in ``terms`` order, and each one's postings (sorted by seq)
    terms: list[str]
    postings: list[Postings]
    idfs: list[float]
    average: np.float32
    _seqs: dict[int, Seqs]
    _weights: dict[int, Floats]
    #: What the lists were read from (the full scoring's input)
    _query: tuple[Sequence[str], Sequence[Sequence[Any]]]

    @classmethod
    def of(cls, terms: Sequence[str], rows: Sequence[Sequence[Any]]) -> Lists:
        """The lists in the rows of :data:`STATISTICS` for ``terms``."""
        if not rows:
            return cls([], [], [], np.float32(0), {}, {}, (terms, rows))
        documents, total = int(rows[0][0]), int(rows[0][1])
        parts: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        frequency: dict[str, int] = {}
        for row in rows:
            parts[row[2]].append((int(row[4]), row[5]))
            frequency[row[2]] = int(row[3])
        found = [t for t in terms if t in parts]
        for t in found:  # in seq order whatever order the statement returned them in
            parts[t].sort()
        idfs = [
            math.log(1.0 + (documents - frequency[t] + 0.5) / (frequency[t] + 0.5)) for t in found
        ]
        postings = [
            bm25.postings.unpack([f for f, _ in parts[t]], [d for _, d in parts[t]]) for t in found
        ]
        average = np.float32(total) / np.float32(documents)
        return cls(found, postings, idfs, average, {}, {}, (terms, rows))

    @property
    def seqs(self) -> list[Seqs]:
        """Each list's seqs."""
        return [self.seq(i) for i in range(len(self.terms))]

    def seq(self, i: int) -> Seqs:
        """The seqs of list ``i``."""
        if i not in self._seqs:
            self._seqs[i] = self.postings[i].seqs
        return self._seqs[i]

    def weights(self, i: int) -> Floats:
        """The term scores of list ``i``'s postings (:func:`weights`)."""
        if i not in self._weights:
            self._weights[i] = weights(self.postings[i], self.idfs[i], self.average)
        return self._weights[i]

    def bound(self, i: int) -> float:
        """More than any posting of list ``i`` scores: the term score of its largest term
        frequency in its shortest memory (the score grows with the one, falls with the
        other), in float64, raised by :data:`SLACK` for float32's rounding."""
        postings = self.postings[i]
        tf, length = float(postings.tfs.max()), float(postings.lengths.min())
        norm = K1 * (1.0 - B + B * length / float(self.average))
        return self.idfs[i] * tf * (K1 + 1.0) / (tf + norm) * (1.0 + SLACK)

    def best(self, n: int) -> tuple[dict[int, float], bool]:
        """``scores(…).best(n)`` (the same seqs, scores and order) and whether every match
        is in it, scoring fully only the lists needed to find the ``n`` best
        (:func:`pruned`) when that can skip any."""
        found = None if n >= PRUNE_BELOW_SHARE * self.size else pruned(self, n)
        if found is not None:
            return found.best, False
        full = bm25.scores(*self._query)
        best = full.best(n)
        return best, len(best) >= len(full)

    @property
    def size(self) -> int:
        """The postings of every list."""
        return sum(len(p) for p in self.postings)


@dataclass(frozen=True)
class Pruned:
    """The ``n`` best of a query found by :func:`pruned`."""

    #: seq → score, as ``bm25.scores(…).best`` gives them
    best: dict[int, float]
    #: The postings whose term score was computed (of :attr:`Lists.size`)
    weighed: int


def pruned(lists: Lists, n: int) -> Pruned | None:
    """``bm25.scores(…).best`` of ``n`` over the lists, exactly, without computing every
    posting's term score (MaxScore, Turtle and Flood 1995), or ``None`` where it would skip
    nothing.

    The lists are summed from the shortest until a floor of the ``n``-th best score is above
    what the other lists could add together (each list's :meth:`Lists.bound`): a memory in
    none of the summed lists then scores below the floor, so it is not among the best. The
    floor is the ``n``-th best partial sum among one summed list's memories (they are
    distinct, and a partial sum is at most the whole one). The memories of the summed
    lists whose partial sum plus the other lists' bounds reaches the floor are then scored
    exactly, every term in query order as :func:`scores` sums them, the others' postings
    found by binary search: the same float32 operations on the same postings, the same
    bits. Every memory scoring at least the ``n``-th best score reaches the floor, so the
    ``n`` best (and their ties) are among them."""
    count = len(lists.terms)
    if n <= 0 or count < 2 or count > PRUNE_MAX_TERMS:
        return None
    if not all(len(s) and bool(np.all(s[1:] > s[:-1])) for s in lists.seqs):
        return None  # binary search needs each list's seqs increasing: scored fully
    low = min(int(s[0]) for s in lists.seqs)
    high = max(int(s[-1]) for s in lists.seqs)
    if high - low >= max(bm25.DENSE_SPAN, 4 * lists.size):
        return None  # a sparse user in a large table: scored fully (few postings)
    bounds = [lists.bound(i) for i in range(count)]
    order = sorted(range(count), key=lambda i: len(lists.postings[i]))
    partial = np.zeros(high - low + 1, dtype=np.float64)
    summed: dict[int, Seqs] = {}
    floor = rest = 0.0
    for step, i in enumerate(order[:-1]):
        docs = lists.seq(i) - low
        partial[docs] += lists.weights(i)
        summed[i] = docs
        for mine in summed.values():
            if len(mine) >= n:
                nth = float(np.partition(partial[mine], len(mine) - n)[len(mine) - n])
                floor = max(floor, nth * (1.0 - SLACK))
        rest = sum(bounds[j] for j in order[step + 1 :])
        if rest < floor:
            break
    else:
        return None  # every list is needed
    keep = np.zeros(len(partial), dtype=bool)
    for docs in summed.values():
        keep[docs[partial[docs] * (1.0 + SLACK) + rest >= floor]] = True
    found = np.flatnonzero(keep) + low
    out = np.zeros(len(found), dtype=np.float32)
    weighed = sum(len(docs) for docs in summed.values())
    for i in range(count):
        seqs = lists.seq(i)
        at = np.minimum(np.searchsorted(seqs, found), len(seqs) - 1)
        hit = seqs[at] == found
        if i in summed:
            out[hit] += lists.weights(i)[at[hit]]
        else:
            out[hit] += weights(lists.postings[i][at[hit]], lists.idfs[i], lists.average)
            weighed += int(hit.sum())
    return Pruned(_ranked(found, out, n), weighed)


def _same(a: dict[int, float], b: dict[int, float]) -> bool:
    """The same seqs in the same order with the same float32 bits."""
    bits = [np.asarray(list(x.values()), dtype=np.float32).view(np.int32) for x in (a, b)]
    return list(a) == list(b) and np.array_equal(*bits)


def block_reads(lists: Lists, n: int, block: int) -> float:
    """The share of the lists' postings that MaxScore over blocks of ``block`` postings
    reads, each block bounded by its largest term frequency in its shortest memory (what a
    migration would keep per block): the shortest lists read whole until a floor of the
    ``n``-th best is above what the others could add, then list by list (shortest first)
    only the blocks covering a memory still able to reach the floor, counting each
    remaining list's block bound at that memory; the floor rises as the sums grow."""
    count = len(lists.terms)
    if count == 0 or lists.size == 0:
        return 0.0
    seqs = lists.seqs
    low = min(int(s.min()) for s in seqs)
    high = max(int(s.max()) for s in seqs)
    average = float(lists.average)
    spans: list[tuple[Seqs, Seqs, npt.NDArray[np.float64]]] = []
    for i in range(count):
        postings, starts = lists.postings[i], np.arange(0, len(seqs[i]), block)
        tf = np.maximum.reduceat(postings.tfs.astype(np.float64), starts)
        length = np.minimum.reduceat(postings.lengths.astype(np.float64), starts)
        norm = K1 * (1.0 - B + B * length / average)
        bound = lists.idfs[i] * tf * (K1 + 1.0) / (tf + norm) * (1.0 + SLACK)
        ends = seqs[i][np.minimum(starts + block, len(seqs[i])) - 1]
        spans.append((seqs[i][starts], ends, bound))
    order = sorted(range(count), key=lambda i: len(seqs[i]))
    partial = np.zeros(high - low + 1, dtype=np.float64)
    floor, read, step = 0.0, 0, 0
    summed: list[int] = []
    while step < count:
        i = order[step]
        partial[seqs[i] - low] += lists.weights(i)
        summed.append(i)
        read += len(seqs[i])
        step += 1
        for j in summed:
            mine = partial[seqs[j] - low]
            if len(mine) >= n:
                floor = max(floor, float(np.partition(mine, len(mine) - n)[len(mine) - n]))
        if sum(float(spans[j][2].max()) for j in order[step:]) < floor * (1.0 - SLACK):
            break
    keep = np.zeros(len(partial), dtype=bool)
    for j in summed:
        keep[seqs[j] - low] = True
    found = np.flatnonzero(keep) + low
    sums = partial[found - low]
    for at in range(step, count):
        rest = order[at:]
        reach = sums.copy()
        covering: dict[int, npt.NDArray[np.intp]] = {}
        for j in rest:
            firsts, ends, bound = spans[j]
            k = np.maximum(np.searchsorted(firsts, found, side="right") - 1, 0)
            inside = (found >= firsts[k]) & (found <= ends[k])
            reach += np.where(inside, bound[k], 0.0)
            covering[j] = np.where(inside, k, -1)
        alive = reach >= floor * (1.0 - SLACK)
        found, sums = found[alive], sums[alive]
        j = order[at]
        blocks = np.unique(covering[j][alive])
        blocks = blocks[blocks >= 0]
        read += int(sum(min(block, len(seqs[j]) - b * block) for b in blocks.tolist()))
        position = np.minimum(np.searchsorted(seqs[j], found), len(seqs[j]) - 1)
        hit = seqs[j][position] == found
        sums = sums + np.where(hit, lists.weights(j)[position].astype(np.float64), 0.0)
        if len(sums) >= n:
            floor = max(floor, float(np.partition(sums, len(sums) - n)[len(sums) - n]))
    return read / lists.size


def _floor_share(rows: list[Any], best: dict[int, float], block: int) -> float:
    """The share of the rows' postings in a block of ``block`` postings (each term's list
    cut into blocks in seq order) that holds one of ``best``."""
    lists: dict[str, list[tuple[int, bytes]]] = {}
    for row in rows:
        lists.setdefault(row[2], []).append((int(row[4]), bytes(row[5])))
    wanted = np.asarray(sorted(best), dtype=np.int64)
    read = total = 0
    for parts in lists.values():
        parts.sort()
        seqs = bm25.postings.unpack([f for f, _ in parts], [d for _, d in parts]).seqs
        at = np.searchsorted(seqs, wanted)
        hit = at[(at < len(seqs)) & (seqs[np.minimum(at, len(seqs) - 1)] == wanted)]
        blocks = np.unique(hit // block)
        read += int(sum(min(block, len(seqs) - b * block) for b in blocks.tolist()))
        total += len(seqs)
    return read / total if total else 0.0


def _full_best(terms: list[str], rows: list[Any], n: int) -> dict[int, float]:
    """The store's answer: every posting scored (``bm25.scores``)."""
    return bm25.scores(terms, rows).best(n)


def _pruned_best(terms: list[str], rows: list[Any], n: int) -> dict[int, float]:
    """:meth:`Lists.best` (pruned where it can skip any posting)."""
    return Lists.of(terms, rows).best(n)[0]


def _cpu(function: Any, *args: Any) -> tuple[Any, float]:
    start = time.thread_time()
    out = function(*args)
    return out, (time.thread_time() - start) * 1e3


def measure(url: str, user: str, seed: int, questions: int, n: int,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    """One question set's numbers."""
    with psycopg.connect(url, autocommit=True) as db, db.cursor(binary=True) as cur:
        fetched = []
        for text in common.make_queries(questions, seed=seed):
            terms = sorted(set(tokenize(text)))
            cur.execute(bm25.STATISTICS, (terms, user))
            fetched.append((terms, cur.fetchall()))
    full_ms: list[float] = []
    pruned_ms: list[float] = []
    postings: list[int] = []
    weighed: list[int] = []
    floors: dict[int, list[float]] = {256: [], 64: [], 16: []}
    bounded: dict[int, list[float]] = {256: [], 64: [], 16: []}
    identical = tried = 0
    for i, (terms, rows) in enumerate(fetched):
        times: dict[str, list[float]] = {"full": [], "pruned": []}
        answers: dict[str, dict[int, float]] = {}
        for r in range(repeats):
            for side in ("full", "pruned") if (i + r) % 2 == 0 else ("pruned", "full"):
                if side == "full":
                    answers[side], ms = _cpu(_full_best, terms, rows, n)
                else:
                    answers[side], ms = _cpu(_pruned_best, terms, rows, n)
                times[side].append(ms)
        full_ms.append(statistics.median(times["full"]))
        pruned_ms.append(statistics.median(times["pruned"]))
        identical += _same(answers["full"], answers["pruned"])
        lists = Lists.of(terms, rows)
        postings.append(lists.size)
        found = pruned(lists, n) if n < PRUNE_BELOW_SHARE * lists.size else None
        tried += found is not None
        weighed.append(lists.size if found is None else found.weighed)
        for block, shares in bounded.items():
            shares.append(block_reads(Lists.of(terms, rows), n, block))
        for block, shares in floors.items():
            shares.append(_floor_share(rows, answers["full"], block))
    share = [w / p for w, p in zip(weighed, postings, strict=True) if p]
    return {
        "seed": seed, "questions": len(fetched), "n": n,
        "identical": identical, "pruned": tried,
        "postings_read_median": statistics.median(postings),
        "postings_weighed_share_median": statistics.median(share),
        "postings_weighed_share_total": sum(weighed) / max(sum(postings), 1),
        "scoring_cpu_ms_median": {"full": statistics.median(full_ms),
                                  "pruned": statistics.median(pruned_ms)},
        "scoring_cpu_ms_total": {"full": sum(full_ms), "pruned": sum(pruned_ms)},
        "pruned_over_full_total": sum(pruned_ms) / sum(full_ms),
        "block_read_floor_share_median": {str(b): statistics.median(s) for b, s in floors.items()},
        "block_max_maxscore_read_share_median": {
            str(b): statistics.median(s) for b, s in bounded.items()},
        "block_max_maxscore_read_share_total": {
            str(b): sum(x * p for x, p in zip(s, postings, strict=True)) / max(sum(postings), 1)
            for b, s in bounded.items()},
    }  # fmt: skip


def _baseline(src: Path) -> Any:
    """The ``bm25`` module of the tree at ``src``, loaded under another name (its own
    imports are this tree's: ``lexical``'s constants, which it only reads)."""
    spec = importlib.util.spec_from_file_location(
        "bm25_before", src / "engrain" / "store" / "postgres" / "bm25.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def against(url: str, user: str, seed: int, questions: int, n: int, before: Any,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    """The store's scoring and best (``bm25.scores(…).best(n)`` and the match count) of
    the tree ``before`` and of this one, alternating on the same rows, by the calling
    thread's CPU; their answers compared seq by seq and bit by bit."""
    with psycopg.connect(url, autocommit=True) as db, db.cursor(binary=True) as cur:
        fetched = []
        for text in common.make_queries(questions, seed=seed):
            terms = sorted(set(tokenize(text)))
            cur.execute(bm25.STATISTICS, (terms, user))
            fetched.append((terms, cur.fetchall()))
    spent: dict[str, list[float]] = {"base": [], "new": []}
    identical = 0
    for i, (terms, rows) in enumerate(fetched):
        times: dict[str, list[float]] = {"base": [], "new": []}
        answers: dict[str, tuple[dict[int, float], int]] = {}
        for r in range(repeats):
            for side in ("base", "new") if (i + r) % 2 == 0 else ("new", "base"):
                module = before if side == "base" else bm25
                start = time.thread_time()
                scored = module.scores(terms, rows)
                answers[side] = (scored.best(n), len(scored))
                times[side].append((time.thread_time() - start) * 1e3)
        for side in spent:
            spent[side].append(statistics.median(times[side]))
        (a, count_a), (b, count_b) = answers["base"], answers["new"]
        identical += _same(a, b) and count_a == count_b
    return {
        "seed": seed, "questions": len(fetched), "n": n, "identical": identical,
        "cpu_ms_median": {side: statistics.median(v) for side, v in spent.items()},
        "cpu_ms_p95": {side: float(np.percentile(v, 95)) for side, v in spent.items()},
        "new_over_base_total": sum(spent["new"]) / sum(spent["base"]),
        "new_over_base_median_of_ratios": statistics.median(
            x / y for x, y in zip(spent["new"], spent["base"], strict=True) if y > 0),
    }  # fmt: skip


#: The statement as the store runs it, then without sending the blocks, then without
#: reading them (the key's columns only).
SERVER_FORMS = {
    "data": bm25.STATISTICS,
    "length": bm25.STATISTICS.replace("b.data", "length(b.data)"),
    "first_seq": bm25.STATISTICS.replace(", b.data", ""),
}


def server(url: str, user: str, seed: int, questions: int, repeats: int) -> dict[str, Any]:
    """The backend's CPU a question (``/proc/<pid>/stat``, the server on this machine) for
    each of :data:`SERVER_FORMS`, alternating, and the client's."""
    texts = [sorted(set(tokenize(t))) for t in common.make_queries(questions, seed=seed)]
    tick = os.sysconf("SC_CLK_TCK")
    with psycopg.connect(url, autocommit=True) as db, db.cursor(binary=True) as cur:
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        stat = Path(f"/proc/{row[0]}/stat")

        def backend() -> float:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        spent: dict[str, list[float]] = {form: [] for form in SERVER_FORMS}
        client: dict[str, list[float]] = {form: [] for form in SERVER_FORMS}
        for r in range(repeats):
            forms = list(SERVER_FORMS) if r % 2 == 0 else list(reversed(SERVER_FORMS))
            for form in forms:
                before, start = backend(), time.thread_time()
                for terms in texts:
                    cur.execute(SERVER_FORMS[form], (terms, user))
                    cur.fetchall()
                spent[form].append((backend() - before) / len(texts) * 1e3)
                client[form].append((time.thread_time() - start) / len(texts) * 1e3)
    return {
        "seed": seed, "questions": len(texts), "repeats": repeats,
        "server_cpu_ms_median": {f: statistics.median(v) for f, v in spent.items()},
        "client_cpu_ms_median": {f: statistics.median(v) for f, v in client.items()},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="big-user")
    parser.add_argument("--seeds", default="7,99")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--n", type=int, default=100, help="the depth asked: 2 × the pool (50)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server", action="store_true", help="also the statement's server CPU")
    parser.add_argument(
        "--baseline-src", type=Path,
        help="also the store's scoring of the tree at this src against this tree's",
    )  # fmt: skip
    parser.add_argument(
        "--only-baseline", action="store_true", help="with --baseline-src: only that"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    seeds = [int(s) for s in args.seeds.split(",")]
    report: dict[str, Any] = {"url": args.url.split("?")[0]}
    if args.baseline_src is not None:
        before = _baseline(args.baseline_src)
        report["store_scoring"] = [
            against(args.url, args.user, s, args.questions, args.n, before, args.repeats)
            for s in seeds
        ]
        for one in report["store_scoring"]:
            cpu = one["cpu_ms_median"]
            print(f"seed {one['seed']}: the store's scoring, {one['identical']}/"
                  f"{one['questions']} identical; CPU a question base {cpu['base']:.2f}, new "
                  f"{cpu['new']:.2f} ms (totals {one['new_over_base_total']:.2f}x)")  # fmt: skip
    sets = [] if args.only_baseline else [
        measure(args.url, args.user, s, args.questions, args.n, args.repeats) for s in seeds
    ]  # fmt: skip
    for one in sets:
        cpu = one["scoring_cpu_ms_median"]
        print(f"seed {one['seed']}: {one['identical']}/{one['questions']} identical, "
              f"{one['pruned']} pruned; postings a question {one['postings_read_median']:,.0f}, "
              f"weighed {one['postings_weighed_share_median']:.2f}; scoring CPU full "
              f"{cpu['full']:.2f}, pruned {cpu['pruned']:.2f} ms "
              f"(totals {one['pruned_over_full_total']:.2f}x); block-read floor "
              f"{one['block_read_floor_share_median']}; MaxScore over blocks reads "
              f"{one['block_max_maxscore_read_share_median']}")  # fmt: skip
    report["sets"] = sets
    if args.server:
        report["server"] = [server(args.url, args.user, s, args.questions, args.repeats)
                            for s in seeds]  # fmt: skip
        for one in report["server"]:
            print(
                f"seed {one['seed']}: server CPU a question {one['server_cpu_ms_median']}, "
                f"client {one['client_cpu_ms_median']}"
            )
    report["load"] = [load, os.getloadavg()[0]]
    common.write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
