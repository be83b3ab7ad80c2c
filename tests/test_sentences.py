"""A typed learning found by its best sentence or step (recall.sentences, issue 12)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.model import Kind, Memory, MemoryType, Vector, content_hash
from engrain.recall import sentences
from engrain.recall.gate import GateOptions
from engrain.recall.sentences import lifted, on_cosine_scale, pieces, with_sentences
from engrain.store.memory import MemoryStore

from .conftest import NOW, make_settings
from .test_turns import WordEmbedder

WORDS = ("release", "tag", "deploy", "annotation", "cache", "resume", "partition", "gpu",
         "lint", "python")  # fmt: skip


def _learning(content: str, embedder: WordEmbedder, kind: Kind = Kind.GOLDEN_PATH) -> Memory:
    vector: Vector = embedder.embed([content])[0]
    return Memory.new("u", content, MemoryType.PROCEDURAL, kind, now=NOW, embedding=vector)


def test_a_learning_divides_at_sentences_clauses_and_steps_under_its_heading() -> None:
    assert pieces("Releasing: 1) open the PR and wait for green; 2) bump the version and "
                  "the changelog; 3) push a signed tag") == (
        "Releasing: open the PR and wait for green",
        "Releasing: bump the version and the changelog",
        "Releasing: push a signed tag",
    )  # fmt: skip
    assert pieces("A new run: the LIMS marks it complete -> intake pulls the sheet -> "
                  "we start the demux job") == (
        "A new run: the LIMS marks it complete", "A new run: intake pulls the sheet",
        "A new run: we start the demux job",
    )  # fmt: skip
    # no heading: sentences as they are; a piece under four words joins the one before
    assert pieces("Never cat FASTQs from two lanes together. Duplicates are marked per "
                  "library. Really.") == (
        "Never cat FASTQs from two lanes together.", "Duplicates are marked per library.; Really.",
    )  # fmt: skip
    # one piece: the memory's own vector is its best piece, nothing to index
    assert pieces("Use fixed-width integer types for data fields.") == ()
    assert pieces("Python style: ruff, pytest, uv.") == ()


#: Learnings of two pieces each, none about releases: the pieces a close one is measured
#: against.
OTHERS = ("The annotation cache lives here. Resume with the same cache please.",
          "Lint runs on every python change. The gpu partition is for big jobs.",
          "Deploy only from the cache host. Resume jobs keep their partition there.",
          "The gpu jobs need the python module. Lint failures block the deploy job.")  # fmt: skip


def _index_of(
    contents: tuple[str, ...], embedder: WordEmbedder
) -> tuple[MemoryStore, list[Memory]]:
    store = MemoryStore()
    memories = [_learning(c, embedder) for c in contents]
    store.write(memories)
    return store, memories


def _quantile(values: list[float], value: float) -> float:
    """The mid-rank share, written out: below, and half of the equal ones."""
    below = sum(v < value for v in values)
    equal = sum(v == value for v in values)
    return (below + 0.5 * equal) / len(values)


def test_the_best_piece_counts_by_its_chance_among_the_pieces() -> None:
    embedder = WordEmbedder(WORDS)
    path = ("Releasing: run the lint job and the python tests; push the release tag; deploy it "
            "to the gpu partition")  # fmt: skip
    store, memories = _index_of((path, *OTHERS), embedder)
    index = sentences.indexes(store).of(store, "u", embedder.embed)
    assert set(index.ids) == {m.id for m in memories}
    query = embedder.embed_query("release tag")
    found = [(m, float(np.dot(m.embedding, query))) for m in memories]
    raised = lifted(index, query, found, 1.0)
    own = [sim for _, sim in found]
    pieces_cosines = [float(np.dot(v, query)) for v in index.matrix]
    long = memories[0]
    # "Releasing: push the release tag" is the query: the closest piece of all
    chance = _quantile(pieces_cosines, max(pieces_cosines)) ** 3
    assert raised[long.id] == pytest.approx(max(_quantile(own, found[0][1]), chance))
    # the others share nothing with the query: their own mid-rank, their pieces no higher
    for memory, sim in found[1:]:
        assert raised[memory.id] == pytest.approx(_quantile(own, sim))
    # off: the own quantiles
    assert lifted(index, query, found, 0.0) == {m.id: _quantile(own, s) for m, s in found}


def test_a_long_learning_needs_a_closer_piece_than_a_short_one() -> None:
    embedder = WordEmbedder(WORDS)
    long = ("Resume: the cache and annotation hold; deploy the tag from main; lint the "
            "python module first; release the gpu partition after")  # fmt: skip
    short = "The cache and annotation hold. Partition the tag before a release."
    store, memories = _index_of((long, short, *OTHERS), embedder)
    index = sentences.indexes(store).of(store, "u", embedder.embed)
    query = embedder.embed_query("cache annotation")
    found = [(m, 0.0) for m in memories]
    raised = lifted(index, query, found, 1.0)
    # both hold the piece "cache and annotation hold"; four pieces against two
    assert raised[memories[1].id] > raised[memories[0].id]


def test_the_cosines_stay_the_ones_the_thresholds_were_set_on() -> None:
    own = {"a": 0.5, "b": 0.3, "c": 0.1}
    scaled = on_cosine_scale(own, {"a": 0.2, "b": 0.9, "c": 0.1})
    assert scaled == {"b": 0.5, "a": 0.3, "c": 0.1}
    assert sorted(scaled.values()) == sorted(own.values())
    assert on_cosine_scale(own, own) == own


def test_an_edited_learning_keeps_its_own_cosine_until_it_is_indexed_again() -> None:
    embedder = WordEmbedder(WORDS)
    text = "Resume: find the failing task now; resubmit with resume and the cache"
    store, (first, *_) = _index_of((text, *OTHERS), embedder)
    index = sentences.indexes(store).of(store, "u", embedder.embed)
    changed = "Resume: find the failing task now; ask about the gpu partition"
    edited = first.evolve(content=changed, content_hash=content_hash(changed))
    query = embedder.embed_query("cache")
    assert lifted(index, query, [(edited, 0.25)], 1.0) == {edited.id: 0.5}  # its own G
    store.write([edited])
    again = sentences.indexes(store).of(store, "u", embedder.embed)
    assert again.hashes[edited.id] == edited.content_hash


def test_with_sentences_reorders_the_lists_on_their_own_values() -> None:
    embedder = WordEmbedder(WORDS)
    path = ("Releasing: run the lint job and the python tests; push the release tag; deploy it "
            "to the gpu partition")  # fmt: skip
    top = "Push the release tag."
    notes = "Release notes live in the changelog."
    store, (long, *unrelated) = _index_of((path, *OTHERS), embedder)
    first, other = _learning(top, embedder, Kind.PATTERN), _learning(notes, embedder, Kind.PATTERN)
    store.write([first, other])
    index = sentences.indexes(store).of(store, "u", embedder.embed)
    query = embedder.embed_query("release tag")
    cos = {m.id: float(np.dot(m.embedding, query)) for m in (long, first, other)}
    assert cos[first.id] > cos[other.id] > cos[long.id]  # the whole path is diluted
    cos.update({m.id: float(np.dot(m.embedding, query)) for m in unrelated})
    listed = [(m, cos[m.id]) for m in (first, other, long, *unrelated)]
    dense, learnings = with_sentences(index, query, [[(other, cos[other.id])], listed], 1.0)
    # the path's step is the query: it moves above the changelog note, on the same values
    assert dict((m.id, s) for m, s in learnings) == {
        first.id: cos[first.id], long.id: cos[other.id], other.id: cos[long.id],
        **{m.id: 0.0 for m in unrelated},
    }  # fmt: skip
    assert dense == [(other, cos[long.id])]
    unchanged = with_sentences(index, query, [[(other, cos[other.id])]], 0.0)
    assert unchanged == [[(other, cos[other.id])]]


def test_explain_shows_the_option_and_off_by_default_no_index_is_built(tmp_path: Path) -> None:
    assert GateOptions().sentence_weight == 0.0
    inner = WordEmbedder(WORDS)
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=inner)
    path = engine.remember("Releasing: run the lint job and the python tests; push the "
                           "release tag; deploy it to the gpu partition", "u",
                           kind="golden_path", now=NOW)  # fmt: skip
    engine.remember("Release notes live in the changelog, written by hand.", "u",
                    kind="pattern", now=NOW)  # fmt: skip
    mid = path.memory_id
    assert mid is not None
    inner.embedded.clear()
    off = engine.explain("how do I push the release tag.", "u", now=NOW)
    assert not any(":" in text and "Releasing" in text for text in inner.embedded)
    assert "sentences" not in off.timings_ms
    on = engine.explain("how do I push the release tag.", "u", now=NOW,
                        options=engine.options.update(sentence_weight=1.0))  # fmt: skip
    assert "sentences" in on.timings_ms
    assert "Releasing: push the release tag" in inner.embedded
    assert "best_sentence" not in off.components[mid]
    # its step is the question's words: the best sentence's cosine is 1 (the engine's
    # vectors of the words), shown beside the cosine the gate gave the path
    assert on.components[mid]["best_sentence"] == pytest.approx(1.0)
    assert on.components[mid]["cosine"] >= off.components[mid]["cosine"]
