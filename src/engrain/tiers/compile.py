"""The tier 1 and tier 2 compilers: rule-based by default, an LLM optional.

Both take the ranked, deduplicated, decay-filtered items of :func:`prepare.eligible` and
produce text within their budget, counted with the real tokenizer. Without an LLM the rules
alone must give readable output: tier 1 is one paragraph of whole sentences (the top
invariants, then the dominant patterns); tier 2 is the document's field guide, sections in
a fixed order, patterns and decisions clustered by domain. With an LLM (``summarize``, a
function from prompt to text), tier 1's prose and tier 2's large clusters are written by
it; a reply that is empty, too long or an error falls back to the rules.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engrain.model import Kind, Memory
from engrain.tiers.registry import TIER_BUDGETS, Tier
from engrain.tokens import count_tokens, decode, encode

log = logging.getLogger(__name__)

#: A prompt in, text out (an LLM call); ``None`` means rules only.
Summarize = Callable[[str], str]

#: Tier 1: how many invariants and patterns the DNA summary draws on.
DNA_INVARIANTS = 5
DNA_PATTERNS = 2
#: Tier 1 reaches for decisions and preferences only when it has fewer items than this.
DNA_MIN_ITEMS = 3
#: Tier 2: the document's "top 5–8 patterns/decisions" and "top 3 golden paths", and
#: engrain's caps on the sections the document leaves open.
GUIDE_PATTERNS_AND_DECISIONS = 8
GUIDE_GOLDEN_PATHS = 3
GUIDE_PREFERENCES = 5
GUIDE_ANTIPATTERNS = 3
GUIDE_FACTS = 5
#: A domain cluster with more items than this is summarised by the LLM when there is one.
LARGE_CLUSTER = 3

DNA_PROMPT = """Compress these project rules and patterns into ONE dense paragraph of flowing \
prose, at most {words} words. Keep every concrete name, number and constraint; no lists, no \
headings, no preamble; every word must carry information.

{items}"""

CLUSTER_PROMPT = """Summarise these {domain} conventions of one codebase in ONE line of at \
most {words} words, keeping every concrete name and number; no preamble.

{items}"""

DOMAIN_TITLES = {
    "api": "API", "devops": "Deployment", "deployment": "Deployment", "ui": "UI",
    "database": "Database", "errors": "Error Handling", "auth": "Auth",
}  # fmt: skip


@dataclass(frozen=True)
class CompiledTier:
    """One compiled tier: its text, token count and the items it holds."""

    tier: Tier
    text: str
    tokens: int
    memory_ids: tuple[str, ...]
    compiled_by: str  # "rules" or "llm"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the cache stores)."""
        return {
            "tier": int(self.tier), "text": self.text, "tokens": self.tokens,
            "memory_ids": list(self.memory_ids), "compiled_by": self.compiled_by,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompiledTier:
        """Inverse of :meth:`to_dict`."""
        return cls(Tier(int(data["tier"])), str(data["text"]), int(data["tokens"]),
                   tuple(data["memory_ids"]), str(data["compiled_by"]))  # fmt: skip


def sentence(text: str) -> str:
    """``text`` as one clean sentence: whitespace folded, first letter capitalised, ending
    in a full stop unless it already ends in punctuation."""
    text = " ".join(text.split()).strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def fit_tokens(text: str, budget: int) -> str:
    """``text`` cut at a word boundary to at most ``budget`` tokens (with an ellipsis)."""
    if count_tokens(text) <= budget:
        return text
    cut = decode(encode(text)[: max(0, budget - 1)])
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return cut.rstrip(" ,;:") + "…"


def _of(items: Sequence[Memory], *kinds: Kind) -> list[Memory]:
    return [m for m in items if m.kind in kinds]


# -- tier 1 -----------------------------------------------------------------------------------


def compile_dna(
    items: Sequence[Memory],
    *,
    budget: int = TIER_BUDGETS[Tier.DNA],
    summarize: Summarize | None = None,
) -> CompiledTier:
    """Tier 1, the DNA summary: one dense paragraph of the top invariants (by use) and the
    dominant patterns, nothing else; decisions and preferences only fill a nearly empty
    project. ``items`` come ranked (promoted first, then by use)."""
    chosen = _of(items, Kind.INVARIANT)[:DNA_INVARIANTS] + _of(items, Kind.PATTERN)[:DNA_PATTERNS]
    if len(chosen) < DNA_MIN_ITEMS:
        extra = _of(items, Kind.DECISION, Kind.PREFERENCE)
        chosen += extra[: DNA_INVARIANTS + DNA_PATTERNS - len(chosen)]
    if not chosen:
        return CompiledTier(Tier.DNA, "", 0, (), "rules")
    if summarize is not None:
        words = int(budget * 0.6)  # ~0.75 words per token, with room to spare
        prompt = DNA_PROMPT.format(
            words=words, items="\n".join(f"- {sentence(m.content)}" for m in chosen)
        )
        text = _ask(summarize, prompt, budget)
        if text is not None:
            text = " ".join(text.split())
            return CompiledTier(Tier.DNA, text, count_tokens(text),
                                tuple(m.id for m in chosen), "llm")  # fmt: skip
    kept = list(chosen)
    text = " ".join(sentence(m.content) for m in kept)
    while len(kept) > 1 and count_tokens(text) > budget:
        kept.pop()  # the lowest-ranked item goes first
        text = " ".join(sentence(m.content) for m in kept)
    text = fit_tokens(text, budget)
    return CompiledTier(Tier.DNA, text, count_tokens(text), tuple(m.id for m in kept), "rules")


# -- tier 2 -----------------------------------------------------------------------------------


def domain_title(memory: Memory) -> str:
    """The cluster a pattern or decision is listed under: its first domain, titled."""
    if not memory.domains:
        return "General"
    domain = memory.domains[0]
    return DOMAIN_TITLES.get(domain, domain.replace("_", " ").replace("-", " ").title())


@dataclass
class _Guide:
    rules: list[Memory]
    preferences: list[Memory]
    clusters: dict[str, list[Memory]]
    recipes: list[Memory]
    pitfalls: list[Memory]
    facts: list[Memory]
    cluster_text: dict[str, str]

    def render(self) -> str:
        blocks: list[str] = []
        if self.rules:
            blocks.append(_section("Rules (Never Violate)", self.rules))
        if self.preferences:
            blocks.append(_section("Preferences", self.preferences))
        if any(self.clusters.values()):
            lines = [
                f"**{title}:** "
                + self.cluster_text.get(title, " ".join(sentence(m.content) for m in members))
                for title, members in self.clusters.items()
                if members
            ]
            blocks.append("## Patterns & Decisions\n" + "\n".join(lines))
        if self.recipes:
            blocks.append(_section("Recipes", self.recipes))
        if self.pitfalls:
            blocks.append(_section("Pitfalls (Avoid)", self.pitfalls))
        if self.facts:
            blocks.append(_section("Key Facts", self.facts))
        return "\n\n".join(blocks)

    def ids(self) -> tuple[str, ...]:
        members = [m for ms in self.clusters.values() for m in ms]
        everything = (*self.rules, *self.preferences, *members, *self.recipes,
                      *self.pitfalls, *self.facts)  # fmt: skip
        return tuple(m.id for m in everything)


def _section(title: str, items: Sequence[Memory]) -> str:
    return f"## {title}\n" + "\n".join(f"- {sentence(m.content)}" for m in items)


def compile_field_guide(
    items: Sequence[Memory],
    *,
    budget: int = TIER_BUDGETS[Tier.FIELD_GUIDE],
    summarize: Summarize | None = None,
) -> CompiledTier:
    """Tier 2, the field guide: every invariant, the top patterns and decisions clustered by
    domain, the top golden paths, then preferences, recent pitfalls and key facts while the
    budget lasts. Items are added in priority order and one that does not fit is skipped,
    so the guide never exceeds ``budget`` tokens."""
    patterns = _of(items, Kind.PATTERN, Kind.DECISION)[:GUIDE_PATTERNS_AND_DECISIONS]
    cluster_order: dict[str, None] = {domain_title(m): None for m in patterns}
    guide = _Guide([], [], {t: [] for t in cluster_order}, [], [], [], {})
    plan: list[tuple[list[Memory], Memory]] = [(guide.rules, m) for m in _of(items, Kind.INVARIANT)]
    plan += [(guide.clusters[domain_title(m)], m) for m in patterns]
    plan += [(guide.recipes, m) for m in _of(items, Kind.GOLDEN_PATH)[:GUIDE_GOLDEN_PATHS]]
    plan += [(guide.preferences, m) for m in _of(items, Kind.PREFERENCE)[:GUIDE_PREFERENCES]]
    plan += [(guide.pitfalls, m) for m in _of(items, Kind.ANTIPATTERN)[:GUIDE_ANTIPATTERNS]]
    plan += [(guide.facts, m) for m in _of(items, Kind.FACT)[:GUIDE_FACTS]]
    compiled_by = "rules"
    if summarize is not None:
        for title in cluster_order:
            members = [m for m in patterns if domain_title(m) == title]
            if len(members) > LARGE_CLUSTER:
                prompt = CLUSTER_PROMPT.format(
                    domain=title, words=40,
                    items="\n".join(f"- {sentence(m.content)}" for m in members),
                )  # fmt: skip
                line = _ask(summarize, prompt, budget // 4)
                if line is not None:
                    guide.cluster_text[title] = " ".join(line.split())
                    compiled_by = "llm"
    for bucket, memory in plan:
        bucket.append(memory)
        if count_tokens(guide.render()) > budget:
            bucket.pop()
    text = guide.render()
    return CompiledTier(Tier.FIELD_GUIDE, text, count_tokens(text), guide.ids(), compiled_by)


def _ask(summarize: Summarize, prompt: str, budget: int) -> str | None:
    """The LLM's reply if it is usable (non-empty, within ``budget`` tokens), else ``None``
    with a logged warning: the caller falls back to the rules."""
    try:
        reply = summarize(prompt)
    except Exception as exc:  # any LLM failure falls back to the rules
        log.warning("tier compilation: LLM call failed (%s); using the rule-based compiler", exc)
        return None
    reply = re.sub(r"\s+", " ", reply or "").strip()
    if not reply:
        log.warning("tier compilation: empty LLM reply; using the rule-based compiler")
        return None
    if count_tokens(reply) > budget:
        log.warning("tier compilation: LLM reply over %d tokens; using the rules", budget)
        return None
    return reply
