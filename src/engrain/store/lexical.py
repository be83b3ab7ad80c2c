"""Lexical relevance: Okapi BM25 over one user's memories, in-process with numpy.

Dense embeddings miss exact names, rare terms and numbers that lexical matching finds (the
LoCoMo baselines show it), so recall draws candidates from both. Document frequencies are
the user's own, so a term's rarity is rarity *for that user*. The SQLite store keeps one
index per user next to its vector matrix; the in-memory store builds one per search.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import count, pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.store import lexical_weights
from engrain.store.lexical_weights import KeptWeights

K1 = 1.5
B = 0.75

#: English stopwords (the common NLTK/sklearn core): words that carry no topic.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "will",
        "just",
        "also",
    ]
)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
#: The letters whose double a stem loses once "-ed" or "-ing" is stripped ("running" →
#: "run", "planned" → "plan": the ending doubled them). Porter's step 1b: a doubled
#: consonant other than l, s and z. Their doubles belong to the word ("killed" → "kill",
#: "passed" → "pass", "buzzed" → "buzz", as "kills", "passes", "buzzes"), and a vowel's
#: or a digit's double is never the ending's ("fleeing" → "flee"). Changing this changes
#: the terms stored on PostgreSQL: a migration re-stems them (``store/postgres/restem.py``).
UNDOUBLED = frozenset("bcdfghjkmnpqrtvwxy")
#: The endings before which "-es" is the plural's or the verb's ending, not "-e" + "s":
#: English spells "-es" after a hissing sound ("classes", "boxes", "buzzes", "matches",
#: "pushes"), and almost no word ends in these letters + "e" ("cache", "niche", "ache":
#: "-che" words, whose "e" goes anyway, :func:`_final_e`). After any other letter, a
#: single "s" or "z" included, the "e" is the word's and only the "s" goes ("notes" →
#: "note", "issues" → "issu" as "issue", "cases" → "case", "sizes" → "size", "agrees" →
#: "agree"): "-se" and "-ze" words far outnumber "-s" and "-z" words that take "-es"
#: ("buses" → "buse", apart from "bus"). "-ies" is taken before (:func:`_ie`). Changing
#: it changes PostgreSQL's stored terms, as ``UNDOUBLED`` does (migration 012,
#: ``store/postgres/restem_final_e.py``).
TAKES_ES = ("sses", "xes", "zzes", "ches", "shes")
#: The endings whose final "s" is the word's, not a plural's or a verb's (Porter2's step
#: 1a): "-ss" ("class", "business") and "-us" after a syllable (:func:`_keeps_s`).
KEEPS_S = ("ss", "us")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """A light suffix stripper (plural and common verb endings), enough to match "paints"
    with "painted" and "painting" without a stemming dependency. A word's final "e" is
    treated alike in every form (:func:`_final_e`), so "note", "notes", "noted", "noting"
    meet at "note" and "create", "creates", "created", "creating" at "creat"; "-ies" and
    "-ied" give back the "-y" (:func:`_ie`: "studied" → "study"); "-ss" and "-us" keep their
    "s" (``KEEPS_S``: "status")."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith(("ies", "ied", "ie")):
        return _ie(word)
    if word.endswith("eed"):
        return _eed(word)
    for suffix, keep in (("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if suffix == "es" and not word.endswith(TAKES_ES):
            continue  # "notes" is "note" + "s": only the "s" is the ending
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and _keeps_s(word):
                return word
            base = word[: -len(suffix)] + keep
            if base.endswith("eed"):
                return _eed(base)
            if suffix in ("ing", "ed"):
                if len(base) > 3 and base[-1] == base[-2] and base[-1] in UNDOUBLED:
                    return base[:-1]
                if _short(base):
                    return base + "e"  # "hoped" → "hope", as "hope"; "hopped" → "hop"
            return _final_e(base)
    return _final_e(word)


def _keeps_s(word: str) -> bool:
    """Whether the final "s" of ``word`` is the word's own (``KEEPS_S``): "-ss", and "-us"
    after a vowel earlier in the word, a Latin or Greek singular ("status", "focus",
    "bonus", "virus", "minus", every "-ous" adjective), so "status" stays apart from
    "statue" and "focus" meets "focused" and "focuses" (whose "-ed" / "-es" leave "focus").
    With only consonants before the "u" the "s" is a plural's: an acronym's ("gpus",
    "cpus", "skus" → "gpu", "cpu", "sku"). The price: a "-u" noun's plural ("menus",
    "gurus") stays apart from its singular. Changing it changes PostgreSQL's stored terms,
    as ``UNDOUBLED`` does (migration 013, ``store/postgres/restem_plural.py``)."""
    if word.endswith("ss"):
        return True
    return word.endswith("us") and any(_vowels(word[:-2]))


def _ie(word: str) -> str:
    """A word ending in "-ies", "-ied" or "-ie", as Porter2's step 1a takes "-ies" / "-ied":
    after two letters or more, the "-y" of the word they come from ("studies", "studied" →
    "study", as "study" and "studying"; "tries", "tried" → "try"), after one the word's own
    "-ie" ("ties", "tied" → "tie"). A bare "-ie" after two letters or more meets its
    plural there too ("movie" → "movy", as "movies"; "untie", "untied", "untying" →
    "unty"): "-ies" spells the plural of both "-y" and "-ie" words, so both forms of the
    word take one stem. Changing it changes PostgreSQL's stored terms, as ``UNDOUBLED``
    does (migration 013, ``store/postgres/restem_plural.py``)."""
    stem = word[:-2] if word.endswith("ie") else word[:-3]
    return stem + ("y" if len(stem) > 1 else "ie")


def _final_e(word: str) -> str:
    """``word`` without a final "e" that only spells the word, as Porter's step 5a drops it:
    kept after a short syllable ("note", "time", "site", "hope", "code": Porter's measure
    m = 1 ending consonant-vowel-consonant, :func:`_short`), whose "e" tells the word from
    another ("not", "tim", "sit", "hop", "cod"), and in "-ee" ("agree", "free") or with no
    vowel followed by a consonant before it (m = 0: "shoe", "blue"); dropped otherwise
    ("create" → "creat", "change" → "chang", "cache" → "cach", "issue" → "issu"), where
    "-ed" and "-ing" leave the stem without it too ("created", "changing", "cached",
    "issued"). Changing it changes PostgreSQL's stored terms, as ``UNDOUBLED`` does."""
    if len(word) < 4 or word[-1] != "e" or word[-2] == "e":
        return word
    stem = word[:-1]
    return stem if _measure(stem) > 0 and not _short(stem) else word


def _vowels(stem: str) -> list[bool]:
    """Which letters of ``stem`` are vowels to Porter: a, e, i, o, u, and "y" after a
    consonant; not the "u" after "q" ("quite": q-u-i-t ends consonant, vowel, consonant,
    one short syllable like "kite", so it keeps its "e" apart from "quit")."""
    vowel = [c in "aeiou" and not (c == "u" and stem[i - 1 : i] == "q")
             for i, c in enumerate(stem)]  # fmt: skip
    for i, c in enumerate(stem):
        if c == "y" and i > 0 and not vowel[i - 1]:
            vowel[i] = True
    return vowel


def _measure(stem: str) -> int:
    """Porter's measure m of ``stem``: how many times a vowel is followed by a consonant
    ("tr" 0, "tree" 0, "trouble" 1, "oats" 1, "troubles" 2)."""
    return sum(v and not w for v, w in pairwise(_vowels(stem)))


def _short(stem: str) -> bool:
    """Whether ``stem`` is one short syllable, Porter's m = 1 and *o: it ends consonant,
    vowel, consonant, the last not "w", "x" or "y" ("hop", "not", "tim"; not "box", "play",
    "cach", "creat"). Such a stem doubles its consonant before "-ed" / "-ing" ("hopped")
    unless the word ends in "e" ("hoped"), so an undoubled one had an "e"."""
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    v = _vowels(stem)
    return not v[-3] and v[-2] and not v[-1] and _measure(stem) == 1


def _eed(word: str) -> str:
    """A word ending in "eed" (or a stem left so: "proceeds" → "proceed"), as Porter's step
    1b takes it. Its "ed" is never the ending "-ed" (a verb in "-e" takes "-d": "agree" →
    "agreed"), so it is either an "-ee" verb's "-d" or the word's own: "-eed" → "-ee" when
    the stem before "eed" has a vowel followed by a consonant (Porter's measure m > 0:
    "agreed" → "agree", "proceed" → "procee" with "proceeds", "proceeded", "proceeding"),
    otherwise left whole ("speed", "need", "feed", "seed": a one-syllable word's own "eed").
    Changing it changes PostgreSQL's stored terms, as ``UNDOUBLED`` does."""
    return word[:-1] if _measure(word[:-3]) > 0 else word


def word(token: str) -> str | None:
    """A raw token (:func:`words`) without its possessive ending; ``None`` for a stopword:
    what the stemmer is given."""
    if token.endswith("'s"):
        token = token[:-2]
    if not token or token in STOPWORDS:
        return None
    return token


@lru_cache(maxsize=65_536)
def term(token: str) -> str | None:
    """The term a raw token (:func:`words`) counts as: without a possessive ending,
    lightly stemmed; ``None`` for a stopword."""
    bare = word(token)
    return None if bare is None else _stem(bare)


def words(text: str) -> list[str]:
    """The raw tokens of ``text``, lowercased, each of which :func:`term` turns into a term
    or drops."""
    return _TOKEN.findall(text.lower())


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stopwords or possessive endings, lightly stemmed."""
    out = []
    for token in words(text):
        found = term(token)
        if found is not None:
            out.append(found)
    return out


#: A term's postings as held: its documents (:func:`_packed_docs`: uint16 gaps, or int32
#: documents) and their term frequencies (:func:`_packed_tfs`: the narrowest unsigned type).
Postings = tuple[npt.NDArray[Any], npt.NDArray[Any]]


class LexicalIndex:
    """A BM25 index over a list of documents. Immutable: :meth:`extended` returns a new
    index with documents appended (what a new memory needs), sharing the postings it does
    not touch, so a write does not rebuild a user's whole index (327 ms at 10,000
    memories, on every ``context()`` after a ``remember()``).

    **Compact postings** (issue 18): a term's documents are held as the gaps between them
    in uint16 when every gap fits (the first document counts as a gap from 0), else as
    int32 documents, and term frequencies as uint8 (uint16 or uint32 only if a count needs
    it): 3 bytes a posting instead of 8 (the 3,000,000 postings of 100,000 memories: 24 →
    9 MB). A query decodes its terms' lists (a cumulative sum) and widens the frequencies
    to float32 first, so every score is computed as before, bit for bit."""

    def __init__(self, documents: Sequence[str]) -> None:
        built = _postings(documents, 0)
        self._postings: dict[str, Postings] = built.by_term()
        self._set_lengths(built.lengths)

    def _set_lengths(self, lengths: npt.NDArray[np.float32]) -> None:
        self.size = len(lengths)
        self._lengths = lengths
        average = float(lengths.mean()) if self.size else 0.0
        self._norm = K1 * (1.0 - B + B * lengths / max(average, 1e-9))
        # the long lists' weights depend on the size and mean length: every new index
        # (each constructor and change sets its lengths here) starts with none kept
        self._weights = KeptWeights()

    def extended(self, documents: Sequence[str]) -> LexicalIndex:
        """A new index over these documents followed by ``documents``; the same scores as
        ``LexicalIndex(all documents)``. This one is left as it was."""
        built = _postings(documents, self.size)
        out = LexicalIndex.__new__(LexicalIndex)
        out._postings = dict(self._postings)
        for term, (new_docs, new_tfs) in built.by_term().items():
            old = out._postings.get(term)
            if old is not None:
                new_docs = _appended(old[0], _unpacked_docs(new_docs))
                new_tfs = _packed_tfs(np.concatenate([old[1], new_tfs]))
            out._postings[term] = (new_docs, new_tfs)
        out._set_lengths(np.concatenate([self._lengths, built.lengths]))
        return out

    def without(self, keep: npt.NDArray[np.bool_]) -> LexicalIndex:
        """A new index of the documents where ``keep`` is true, numbered in order from 0
        (what a deletion leaves in a user's rows); the same scores as an index built over
        those documents (document frequencies, lengths and their mean are recounted). Every
        posting is renumbered, with numpy: ~0.1 s per million postings, where building
        anew tokenizes every text again."""
        if len(keep) != self.size:
            raise ValueError("keep must have one flag per document")
        arrays = self.to_arrays()
        docs, tfs, offsets = arrays["docs"], arrays["tfs"], arrays["offsets"]
        term_of = np.repeat(np.arange(len(arrays["terms"]), dtype=np.int64), np.diff(offsets))
        kept = keep[docs]
        number = np.cumsum(keep, dtype=np.int64) - 1
        term_of = term_of[kept]
        counts = np.bincount(term_of, minlength=len(arrays["terms"]))
        live = counts > 0
        bounds = np.zeros(int(live.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[live], out=bounds[1:])
        return LexicalIndex.from_arrays({
            "terms": arrays["terms"][live],
            "offsets": bounds,
            "docs": number[docs[kept]].astype(np.int32),
            "tfs": tfs[kept],
            "lengths": self._lengths[keep],
        })  # fmt: skip

    def replaced(self, texts: Mapping[int, tuple[str, str]]) -> LexicalIndex:
        """A new index with document ``row`` changed from ``old`` to ``new`` for each
        ``row: (old, new)`` (a merge rewrites a memory's text); the same scores as an index
        built over the changed documents. Only the terms of those texts are touched."""
        out = LexicalIndex.__new__(LexicalIndex)
        out._postings = dict(self._postings)
        lengths = self._lengths.copy()
        rows = np.asarray(sorted(texts), dtype=np.int32)
        for term in {t for old, _ in texts.values() for t in tokenize(old)}:
            stored, tfs = out._postings[term]
            docs = _unpacked_docs(stored)
            keep = ~np.isin(docs, rows)
            if keep.all():
                continue
            if keep.any():
                out._postings[term] = (_packed_docs(docs[keep]), tfs[keep])
            else:
                del out._postings[term]
        for row, (_, new) in sorted(texts.items()):
            counts = Counter(tokenize(new))
            lengths[row] = sum(counts.values())
            for term, tf in counts.items():
                entry = out._postings.get(term)
                docs = np.asarray([row], dtype=np.int32)
                tfs = np.asarray([tf], dtype=np.int64)
                if entry is not None:
                    known = _unpacked_docs(entry[0])
                    order = np.searchsorted(known, row)
                    docs = np.insert(known, order, row)
                    tfs = np.insert(entry[1].astype(np.int64), order, tf)
                out._postings[term] = (_packed_docs(docs), _packed_tfs(tfs))
        out._set_lengths(lengths)
        return out

    def to_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The index as plain arrays, for a file (``numpy.savez``, no pickle): the terms,
        each one's slice of ``docs``/``tfs`` as ``offsets``, and the document lengths."""
        terms = list(self._postings)
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum([len(self._postings[t][0]) for t in terms], out=offsets[1:])
        docs = [_unpacked_docs(self._postings[t][0]) for t in terms]
        tfs = [self._postings[t][1] for t in terms]
        return {
            "terms": np.array(terms, dtype=str),
            "offsets": offsets,
            "docs": np.concatenate(docs) if docs else np.zeros(0, dtype=np.int32),
            "tfs": _packed_tfs(np.concatenate(tfs)) if tfs else np.zeros(0, dtype=np.uint8),
            "lengths": self._lengths,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.NDArray[Any]]) -> LexicalIndex:
        """The index :meth:`to_arrays` described (the same scores)."""
        terms = [str(t) for t in arrays["terms"].tolist()]
        offsets = np.asarray(arrays["offsets"], dtype=np.int64)
        docs = np.asarray(arrays["docs"], dtype=np.int32)
        counts = np.asarray(arrays["tfs"])
        lengths = np.asarray(arrays["lengths"], dtype=np.float32)
        if len(offsets) != len(terms) + 1 or len(docs) != len(counts) or offsets[-1] != len(docs):
            raise ValueError("inconsistent lexical index arrays")
        if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= len(lengths)):
            raise ValueError("lexical index arrays name documents it does not have")
        if (np.diff(offsets) <= 0).any():
            raise ValueError("lexical index arrays hold a term without documents")
        whole = counts.dtype.kind in "iu" or np.array_equal(counts, np.rint(counts))
        if len(counts) and (not whole or int(counts.min()) < 1):
            raise ValueError("lexical index arrays hold a term frequency that is not a count")
        out = cls.__new__(cls)
        out._postings = _by_term(terms, offsets, docs, counts)
        out._set_lengths(lengths)
        return out

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """The BM25 score of every document for ``query`` (0 where no term matches)."""
        return self._scored(query)[0]

    def top(
        self, query: str, k: int, mask: npt.NDArray[np.bool_] | None = None
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """The ``k`` best documents for ``query`` among those ``mask`` keeps (every one
        without it) that share a term with it, best first, and their scores: the scores of
        :meth:`scores`, bit for bit, ties broken by document order (the lower first, at
        the k-th place too).

        Only the documents scoring at least a lower bound of the k-th best score are
        ranked: the k-th best score among the kept documents of one query term's list
        (the shortest holding k of them; its documents are distinct, so at least k kept
        documents score that much). At a million memories a query's terms match ~700,000
        documents, which the ranking no longer gathers, partitions and sorts; the top k
        is exact (``tests/test_lexical_top.py``)."""
        if k <= 0:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float32)
        scores, lists = self._scored(query)
        floor = 0.0
        for docs in sorted(lists, key=len):
            kept = docs if mask is None else docs[mask[docs]]
            if len(kept) >= k:
                floor = float(np.partition(scores[kept], len(kept) - k)[len(kept) - k])
                break
        rows = np.flatnonzero(scores >= floor) if floor > 0.0 else np.flatnonzero(scores > 0.0)
        if mask is not None:
            rows = rows[mask[rows]]
        return _best(rows, scores[rows], k)

    def _scored(self, query: str) -> tuple[npt.NDArray[np.float32], list[npt.NDArray[np.intp]]]:
        """:meth:`scores` and the documents of each query term found (decoded)."""
        out = np.zeros(self.size, dtype=np.float32)
        lists = []
        # summed in the terms' order: the same floats in every process (a set's order
        # depends on the process's string hashing: scores differed in the last bit)
        for term in sorted(set(tokenize(query))):
            entry = self._postings.get(term)
            if entry is None:
                continue
            docs = _query_docs(entry[0])
            # unbuffered: a term's documents are distinct, so this is ``out[docs] += …``
            # bit for bit, without gathering ``out[docs]`` into a temporary first (a
            # term in 280,000 of a million memories: 0.35-0.5 against 0.93 ms)
            np.add.at(out, docs, self._term_weights(term, docs, entry[1]))
            lists.append(docs)
        return out, lists

    def _term_weights(
        self, term: str, docs: npt.NDArray[np.intp], counts: npt.NDArray[Any]
    ) -> npt.NDArray[np.float32]:
        """The BM25 weight of ``term`` in each of its documents ``docs`` (``counts``: its
        frequencies there); a long list's are kept once computed
        (``store/lexical_weights.py``)."""
        long = len(docs) >= lexical_weights.MIN_POSTINGS
        kept = self._weights.get(term) if long else None
        if kept is not None:
            return kept
        tfs = counts.astype(np.float32)
        df = len(docs)
        idf = math.log(1.0 + (self.size - df + 0.5) / (df + 0.5))
        weights = (idf * tfs * (K1 + 1.0) / (tfs + self._norm[docs])).astype(np.float32, copy=False)
        if long:
            self._weights.keep(term, weights)
        return weights


def _query_docs(stored: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The documents of a term's list as :func:`_packed_docs` holds it, as numpy's index
    type: a gather or scatter-add with int32 indices converts them first (280,000 of them:
    0.8 / 1.8 ms against 0.35 / 0.9 with intp)."""
    if stored.dtype == np.uint16:
        return np.cumsum(stored, dtype=np.intp)
    return stored.astype(np.intp)


def _best(
    rows: npt.NDArray[np.intp], scores: npt.NDArray[np.float32], k: int
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """The ``k`` best of ``rows`` (ascending) by ``scores``, best first, ties in row order
    (the lower rows at the k-th place too)."""
    if len(rows) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)[: k - len(above)]
        picked = np.concatenate([above, tied])
        rows, scores = rows[picked], scores[picked]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


#: The largest gap between two documents of a term held as uint16 (:func:`_packed_docs`).
_GAP_MAX = int(np.iinfo(np.uint16).max)


def _packed_docs(docs: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A term's documents (ascending) as held: their gaps (the first document's from 0)
    in uint16 if every one fits, else the documents as int32 (a copy: never a view of a
    larger array)."""
    gaps = np.diff(docs, prepend=0)
    if len(gaps) and int(gaps.max()) <= _GAP_MAX:
        return gaps.astype(np.uint16)
    return np.array(docs, dtype=np.int32)


def _unpacked_docs(stored: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    """The documents of a term's list as :func:`_packed_docs` holds it."""
    if stored.dtype == np.uint16:
        return np.cumsum(stored, dtype=np.int32)
    return stored


def _appended(stored: npt.NDArray[Any], docs: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A term's held documents followed by ``docs`` (ascending, after all of them), held
    the same way; gaps are extended without decoding the list when the new ones fit."""
    if stored.dtype == np.uint16 and len(docs):
        gaps = np.diff(docs, prepend=int(stored.sum(dtype=np.int64)))
        if int(gaps.max()) <= _GAP_MAX:
            return np.concatenate([stored, gaps.astype(np.uint16)])
    return _packed_docs(np.concatenate([_unpacked_docs(stored), docs]))


def _packed_tfs(counts: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Term frequencies (whole counts) in the narrowest unsigned type holding them all."""
    top = int(counts.max()) if len(counts) else 0
    dtype = np.uint8 if top <= 0xFF else np.uint16 if top <= 0xFFFF else np.uint32
    return counts if counts.dtype == dtype else counts.astype(dtype)


def _by_term(
    terms: list[str], offsets: npt.NDArray[np.int64], docs: npt.NDArray[Any],
    tfs: npt.NDArray[Any],
) -> dict[str, Postings]:  # fmt: skip
    """Term → its postings as held, from flat arrays (sorted by term, then document; each
    term's slice given by ``offsets``, none empty): the gaps of all of them computed at
    once and held in one uint16 array and the frequencies in one uint8 array (each term
    views of them); a term whose gaps or counts do not all fit gets copies of its own
    (int32 documents, wider counts), so one long document does not widen every list."""
    if not terms:
        return {}
    starts = offsets[:-1]
    gaps = np.diff(docs, prepend=np.int32(0))  # int32: documents are numbered below 2**31
    gaps[starts] = docs[starts]  # a term's first document counts from 0
    gaps_fit = (np.maximum.reduceat(gaps, starts) <= _GAP_MAX).tolist()
    counts_fit = (np.maximum.reduceat(tfs, starts) <= 0xFF).tolist()
    narrow, small = gaps.astype(np.uint16), tfs.astype(np.uint8)
    del gaps
    bounds = offsets.tolist()
    out: dict[str, Postings] = {}
    for i, term in enumerate(terms):
        at = slice(bounds[i], bounds[i + 1])
        out[term] = (narrow[at] if gaps_fit[i] else np.array(docs[at], dtype=np.int32),
                     small[at] if counts_fit[i] else _packed_tfs(np.array(tfs[at])))  # fmt: skip
    return out


#: Documents tokenized at a time by :func:`_postings`: their tokens are Python strings
#: (~50 a memory), turned into numbers before the next documents are read.
SCAN_DOCUMENTS = 16_384


class _Built:
    """Postings of a run of documents as flat arrays, sorted by term, then document: made
    from per-chunk parts (each sorted by term, then document), which are emptied as they
    are joined so that at a million memories no more than one copy is held at a time."""

    def __init__(
        self,
        terms: list[str],
        term_parts: list[npt.NDArray[np.int32]],
        doc_parts: list[npt.NDArray[np.int32]],
        tf_parts: list[npt.NDArray[np.uint32]],
        lengths: npt.NDArray[np.float32],
    ) -> None:
        term_of = _joined(term_parts, np.int32)
        order = np.argsort(term_of, kind="stable")  # documents stay ascending per term
        self.offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_of, minlength=len(terms)), out=self.offsets[1:])
        del term_of
        self.terms = terms
        self.docs: npt.NDArray[np.int32] = _joined(doc_parts, np.int32)[order]
        self.tfs: npt.NDArray[np.uint32] = _joined(tf_parts, np.uint32)[order]
        self.lengths = lengths

    def by_term(self) -> dict[str, Postings]:
        """Term → (its documents, their term frequencies), held compactly
        (:func:`_by_term`)."""
        return _by_term(self.terms, self.offsets, self.docs, self.tfs)


#: A byte of UTF-8 text → itself if a token may hold it (``[a-z0-9']``), else a space;
#: NUL, which separates documents while they are read, → ``|``.
_RUN_BYTES = bytes(
    b if b in b"abcdefghijklmnopqrstuvwxyz0123456789'" else (0x7C if b == 0 else 0x20)
    for b in range(256)
)
#: The only characters whose lowercase holds ASCII letters or digits (İ → i̇, Kelvin → k):
#: without them, lowercasing the UTF-8 bytes' ASCII finds the same tokens as ``str.lower``.
_LOWER_TO_ASCII = ("\u0130", "\u212a")
_RUN_TOKEN = re.compile(rb"[a-z0-9]+(?:'[a-z]+)?")
_SEPARATOR = b"|"


def _runs(part: Sequence[str]) -> list[bytes]:
    """The runs of token bytes (``[a-z0-9']``, lowercased) of these documents in order,
    a ``|`` between two documents: every token :data:`_TOKEN` finds is a run, or inside
    one with an apostrophe (:func:`_run_terms`)."""
    joined = " \x00 ".join(part)
    if joined.count("\x00") != len(part) - 1:  # a NUL in a text: not a token, a space
        joined = " \x00 ".join(text.replace("\x00", " ") for text in part)
    if any(c in joined for c in _LOWER_TO_ASCII):
        joined = joined.lower()
    return joined.encode("utf-8", "surrogatepass").lower().translate(_RUN_BYTES).split()


class _Vocabulary:
    """Numbers for the distinct runs of token bytes and for the terms they hold."""

    def __init__(self) -> None:
        self.runs: defaultdict[bytes, int] = defaultdict(count().__next__)
        self.runs[_SEPARATOR]  # number 0
        self.terms: list[str] = []
        self._numbers: dict[str, int] = {}
        #: per run: its first term's number (-1: none), and whether it holds more
        self.first = np.zeros(0, dtype=np.int64)
        self.more = np.zeros(0, dtype=bool)
        self.rest: dict[int, list[int]] = {}  # run → the numbers of its other terms

    def numbered(self, runs: list[bytes]) -> npt.NDArray[np.int64]:
        """The number of each run (new runs' terms found once: :func:`term`)."""
        out = np.fromiter(map(self.runs.__getitem__, runs), dtype=np.int64, count=len(runs))
        if len(self.runs) > len(self.first):
            known = len(self.first)
            new = [[] if run == _SEPARATOR else self._run_terms(run)
                   for run in list(self.runs)[known:]]  # fmt: skip
            self.first = np.concatenate(
                [self.first, np.asarray([t[0] if t else -1 for t in new], dtype=np.int64)]
            )
            self.more = np.concatenate(
                [self.more, np.asarray([len(t) > 1 for t in new], dtype=bool)]
            )
            self.rest.update({known + i: t[1:] for i, t in enumerate(new) if len(t) > 1})
        return out

    def _run_terms(self, run: bytes) -> list[int]:
        tokens = [run] if b"'" not in run else _RUN_TOKEN.findall(run)
        out = []
        for token in tokens:
            found = term(token.decode("ascii"))
            if found is not None:
                number = self._numbers.setdefault(found, len(self._numbers))
                if number == len(self.terms):
                    self.terms.append(found)
                out.append(number)
        return out


def _postings(documents: Sequence[str], first: int) -> _Built:
    """The postings of ``documents`` (numbered from ``first``) and their lengths, counted
    with numpy: each document's text is reduced to runs of token bytes in one pass per
    :data:`SCAN_DOCUMENTS` documents (lowercase, translate, split), each distinct run is
    normalised once (:func:`term`), every occurrence becomes a term number, and a
    document's term frequencies are the counts of its (term, document) pairs. The same
    postings as counting each document's :func:`tokenize` (``tests/test_lexical.py``)."""
    vocabulary = _Vocabulary()
    term_parts: list[npt.NDArray[np.int32]] = []
    doc_parts: list[npt.NDArray[np.int32]] = []
    tf_parts: list[npt.NDArray[np.uint32]] = []
    length_parts: list[npt.NDArray[np.float32]] = []
    for start in range(0, len(documents), SCAN_DOCUMENTS):
        part = documents[start : start + SCAN_DOCUMENTS]
        raw = vocabulary.numbered(_runs(part))
        doc = np.cumsum(raw == 0)  # the separators before each run
        term_of = vocabulary.first[raw]
        several = np.flatnonzero(vocabulary.more[raw])
        if several.size:  # runs such as "rock'n'roll": a term per token
            extra = [(t, int(doc[i])) for i in several.tolist()
                     for t in vocabulary.rest[int(raw[i])]]  # fmt: skip
            term_of = np.concatenate([term_of, np.asarray([t for t, _ in extra], np.int64)])
            doc = np.concatenate([doc, np.asarray([d for _, d in extra], np.int64)])
        counted = term_of >= 0
        term_of, doc = term_of[counted], doc[counted]
        length_parts.append(np.bincount(doc, minlength=len(part)).astype(np.float32))
        pairs, tfs = np.unique(term_of * len(part) + doc, return_counts=True)
        term_parts.append((pairs // len(part)).astype(np.int32))
        doc_parts.append((pairs % len(part) + (first + start)).astype(np.int32))
        tf_parts.append(tfs.astype(np.uint32))
    return _Built(
        vocabulary.terms, term_parts, doc_parts, tf_parts, _joined(length_parts, np.float32)
    )


def _joined(parts: list[npt.NDArray[Any]], dtype: type[np.generic]) -> npt.NDArray[Any]:
    """The parts end to end (``dtype`` if there are none); ``parts`` is emptied."""
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return out
