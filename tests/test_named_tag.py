"""A learning whose own tag the message names scores more (issue 12, session 28, h6):
``GateOptions.named_tag``, off by default; ``explain()`` shows it as the ``tag`` term."""

from __future__ import annotations

from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory
from engrain.embed.hashing import HashEmbedder
from engrain.errors import ValidationError
from engrain.model import Provenance
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.score import Query, gated_weights, score_gated, tag_term
from engrain.recall.score_batch import gated_totals
from engrain.recall.tags import message_terms, names_a_tag
from engrain.store import MemoryStore

from .conftest import NOW, make_settings


def _memory(domains: tuple[str, ...], turns: tuple[str, ...] = ()) -> Memory:
    return Memory(id="m", user_id="u", content="Testing is split by layer.",
                  memory_type=Kind.DECISION.default_memory_type, kind=Kind.DECISION,
                  created_at=NOW, updated_at=NOW, domains=domains,
                  provenance=Provenance(turns))  # fmt: skip


def test_a_tag_is_named_by_all_its_words_as_the_lexical_index_counts_them() -> None:
    terms = message_terms("Write a GX expectation suite for the Plugins' change management")
    assert names_a_tag(("gx",), terms)
    assert names_a_tag(("plugin",), terms)  # stemmed alike: "Plugins'" and "plugin"
    assert names_a_tag(("change-management",), terms)  # every word of the tag, any separator
    assert names_a_tag(("cost", "change_management"), terms)  # any one of the tags
    assert not names_a_tag(("change-control",), terms)  # one word of two is not the tag
    assert not names_a_tag(("the",), terms)  # a tag of stopwords only is never named
    assert not names_a_tag((), terms)


def test_the_term_is_added_only_when_on_and_only_to_a_memory_the_message_names() -> None:
    c = Classification(complexity=Complexity.MODERATE, intent=Intent.GENERATION, domains=(),
                       turn=0, has_code=False, references_history=False, signals=())  # fmt: skip
    weights = gated_weights(c)
    terms = message_terms("Write a GX expectation suite")
    named, unnamed = _memory(("gx", "testing")), _memory(("dbt",))
    off = score_gated(named, 0.3, c, weights, NOW, terms=terms)
    on = score_gated(named, 0.3, c, weights, NOW, named_tag=0.05, terms=terms)
    assert "tag" not in off.components  # off: the score and its terms as before
    assert on.components["tag"] == 0.05
    assert on.total == pytest.approx(off.total + 0.05)
    other = score_gated(unnamed, 0.3, c, weights, NOW, named_tag=0.05, terms=terms)
    assert other.components["tag"] == 0.0
    assert other.total == score_gated(unnamed, 0.3, c, weights, NOW, terms=terms).total


def test_the_cut_takes_from_a_memory_only_when_the_message_names_another_tag() -> None:
    c = Classification(complexity=Complexity.MODERATE, intent=Intent.QUESTION, domains=(),
                       turn=0, has_code=False, references_history=False, signals=())  # fmt: skip
    weights = gated_weights(c)
    terms = message_terms("Where do the GX suites run?")
    elsewhere = _memory(("kafka",))
    plain = score_gated(elsewhere, 0.5, c, weights, NOW, terms=terms).total
    cut = score_gated(elsewhere, 0.5, c, weights, NOW, named_tag=0.05, unnamed_tag=0.02,
                      terms=terms, names_tags=True)  # fmt: skip
    assert cut.components["tag"] == -0.02 and cut.total == pytest.approx(plain - 0.02)
    # the message names no candidate's tag: nothing to compare the memory's tags with
    quiet = score_gated(elsewhere, 0.5, c, weights, NOW, named_tag=0.05, unnamed_tag=0.02,
                        terms=terms, names_tags=False)  # fmt: skip
    assert quiet.components["tag"] == 0.0 and quiet.total == plain
    assert tag_term(("gx",), terms, 0.05, 0.02, True) == 0.05
    assert tag_term((), terms, 0.05, 0.02, True) == -0.02  # untagged: filed under none


def test_a_conversation_chunk_gets_no_tag_term() -> None:
    """A chunk's tags are the keyword table's reading of its words: no term, either way, in
    ``score_gated`` and in the batch columns alike."""
    c = Classification(complexity=Complexity.SIMPLE, intent=Intent.QUESTION, domains=(),
                       turn=0, has_code=False, references_history=False, signals=())  # fmt: skip
    weights = gated_weights(c)
    terms = message_terms("how is the testing going?")
    query = Query(c, weights, NOW, named_tag=0.05, unnamed_tag=0.02, terms=terms,
                  names_tags=True)  # fmt: skip
    for tags in (("testing",), ("travel",)):
        chunk = _memory(tags, turns=("t1", "t2"))
        scored = score_gated(chunk, 0.4, c, weights, NOW, named_tag=0.05, unnamed_tag=0.02,
                             terms=terms, names_tags=True)  # fmt: skip
        assert scored.components["tag"] == 0.0
        assert scored.total == score_gated(chunk, 0.4, c, weights, NOW).total
        assert gated_totals([(chunk, 0.4, 0.0)], query) == [scored.total]
    written = _memory(("testing",))
    assert gated_totals([(written, 0.4, 0.0)], query) == [
        score_gated(written, 0.4, c, weights, NOW).total + 0.05
    ]


def test_named_tag_is_off_by_default_and_checked() -> None:
    assert GateOptions().named_tag == 0.0 and GateOptions().unnamed_tag == 0.0
    for name in ("named_tag", "unnamed_tag"):
        for bad in (-0.01, 1.5, float("nan")):
            with pytest.raises(ValidationError):
                GateOptions(**{name: bad})


def test_context_and_explain_inject_a_learning_its_tag_names(tmp_path: Path) -> None:
    """A decision tagged "gx" whose words share little with a request for a GX suite: under
    the threshold without the option, injected with it, by ``context()`` as by
    ``explain()``, which shows the term."""
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    engine.remember("Row counts and freshness of raw tables are checked outside the dbt project, "
                    "after each load.", "dev", kind=Kind.DECISION,
                    domains=["gx", "quality"], now=NOW)  # fmt: skip
    for i, topic in enumerate(("billing exports", "the deploy pipeline", "on-call rota")):
        engine.remember(f"Note {i} about {topic}.", "dev", kind=Kind.FACT, domains=["ops"],
                        now=NOW)  # fmt: skip
    message = "Write a GX expectation suite for the orders table"
    found = {}
    for weight in (0.0, 0.05):
        options = GateOptions(named_tag=weight)
        gated = engine.explain(message, "dev", options=options, now=NOW)
        block = engine.context(message, "dev", options=options, now=NOW)
        tagged = next(d for d in gated.decisions if "freshness" in d.item.memory.content)
        assert [m.id for m in block.memories] == [m.id for m in gated.memories]
        found[weight] = (tagged.selected, gated.components[tagged.item.memory.id].get("tag"))
    assert found == {0.0: (False, None), 0.05: (True, 0.05)}


def test_the_cut_reaches_the_lines_filed_under_other_tags(tmp_path: Path) -> None:
    """The message names "gx", one candidate's tag: with the cut on, each candidate tagged
    otherwise shows ``tag`` -cut in ``explain()`` and scores that much less; without any
    candidate tagged "gx" the message names no tag, and nothing is cut."""
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=HashEmbedder())  # fmt: skip
    engine.remember("Note about the deploy pipeline.", "dev", kind=Kind.FACT, domains=["ops"],
                    now=NOW)  # fmt: skip
    message = "Write a GX expectation suite for the orders table"
    options = GateOptions(named_tag=0.05, unnamed_tag=0.02)
    alone = engine.explain(message, "dev", options=options, now=NOW)
    assert [alone.components[d.item.memory.id]["tag"] for d in alone.decisions] == [0.0]
    engine.remember("Row counts are checked after each load.", "dev", kind=Kind.DECISION,
                    domains=["gx"], now=NOW)  # fmt: skip
    gated = engine.explain(message, "dev", options=options, now=NOW)
    plain = engine.explain(message, "dev", now=NOW)
    before = {d.item.memory.id: d.item.score for d in plain.decisions}
    for d in gated.decisions:
        mid = d.item.memory.id
        want = 0.05 if "Row counts" in d.item.memory.content else -0.02
        assert gated.components[mid]["tag"] == want
        assert d.item.score == pytest.approx(min(1.0, max(0.0, before[mid] + want)))
