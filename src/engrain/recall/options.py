"""The gating pipeline's per-call options (:class:`GateOptions`).

A frozen dataclass: :meth:`GateOptions.update` gives a changed copy and
:meth:`GateOptions.from_settings` the options a store's settings configure. Shared freely
between threads (nothing in it changes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engrain.errors import ValidationError
from engrain.recall.asked_turns import ASKED_TURNS_WEIGHT
from engrain.recall.assemble import Format
from engrain.recall.budget import Depth
from engrain.recall.chunk_rank import CHUNK_POOL, CHUNK_RANK
from engrain.recall.classify import Vocabulary
from engrain.recall.excerpt import EXCERPT, ExcerptRule
from engrain.recall.previous import PREVIOUS_WEIGHT
from engrain.recall.relevance import LEXICAL_WEIGHT
from engrain.recall.score import Profile
from engrain.recall.second_round import SECOND_ROUND_WEIGHT
from engrain.recall.sentences import SENTENCE_WEIGHT
from engrain.recall.soft_terms import SOFT_TERMS_DEFAULT
from engrain.recall.speakers import SHORT_ANSWER, SPEAKER_LINES, SPEAKER_WEIGHT
from engrain.recall.summaries import SESSION_SUMMARIES
from engrain.recall.trim import DEFAULT_TRIM, Trim
from engrain.recall.turns import TURN_WEIGHT
from engrain.recall.unnamed import UNNAMED_WEIGHT
from engrain.recall.when import TIME_WEIGHT

if TYPE_CHECKING:  # config.py takes its recall defaults from GateOptions: no runtime import
    from engrain.config import Settings


@dataclass(frozen=True)
class GateOptions:
    """Per-call options of the gating pipeline; :meth:`update` gives a changed copy."""

    profile: Profile = Profile.GATED
    format: Format = Format.TAGGED
    depth: Depth = Depth.NORMAL
    prioritize_speed: bool = False
    focus_areas: tuple[str, ...] = ()
    hybrid: bool = True
    lexical_weight: float = LEXICAL_WEIGHT
    pool: int = 50
    min_importance: float = 0.2
    thresholds: str = "auto"
    fusion: str = "blend"
    compact: bool = True  # conversation chunks rendered without filler (recall.compact)
    group_days: bool = True  # tagged: a day's conversation chunks under one header (assemble)
    speaker_weight: float = SPEAKER_WEIGHT  # who is asked about (recall.speakers)
    speaker_lines: bool = SPEAKER_LINES  # chunks as the asked speakers' lines (speakers)
    short_answer: int = SHORT_ANSWER  # ...a line this short with its question (speakers)
    time_weight: float = TIME_WEIGHT  # when it is asked about (recall.when)
    history_evidence: bool = True  # auto budget +50% when a conversation chunk leads (budget)
    lead_budget: bool = True  # ...or from how clearly the best candidate leads (budget)
    turn_weight: float = TURN_WEIGHT  # a conversation chunk found by its best turn (turns)
    excerpt: ExcerptRule = EXCERPT  # conversation chunks as their best lines (excerpt)
    session_summaries: int = SESSION_SUMMARIES  # summaries joining the pool (summaries)
    chunk_rank: bool = CHUNK_RANK  # conversation chunks re-ranked by features (chunk_rank)
    chunk_pool: int = CHUNK_POOL  # the pool's depth when a conversation chunk leads (chunk_rank)
    soft_terms: float | None = SOFT_TERMS_DEFAULT  # chunks by words near the question's
    unnamed: float = UNNAMED_WEIGHT  # a transcript question searched without names (unnamed)
    second_round: float = SECOND_ROUND_WEIGHT  # chunks ranked again by the best's (off)
    asked_turns: float = ASKED_TURNS_WEIGHT  # the tail by the asked speaker's turns (asked_turns)
    work: bool = True  # preferences for the kind of work asked raised (recall.work)
    fragments: bool = True  # pieces of different numbers are no lexical evidence (relevance)
    names: bool = False  # a name the message writes is no lexical evidence (relevance; off)
    language: bool = False  # preferences about a code request's language raised (off)
    present_use: bool = False  # a note about the present current by its last use (score; off)
    stated_span: bool = False  # ...current until the end its own text states (recall.spans)
    sentence_weight: float = SENTENCE_WEIGHT  # a learning found by its best sentence (off)
    previous_weight: float = PREVIOUS_WEIGHT  # the turn before's share of a follow-up's query
    vocabulary: Vocabulary | None = None  # the user's domains → keywords, for classify
    trim: Trim = DEFAULT_TRIM  # lines no message asks for left out (recall.trim)
    unlifted_threshold: bool = False  # a kind its intent does not lift: balanced bar (off)
    named_tag: float = 0.0  # added to a learning whose own tag the message names (recall.tags)
    unnamed_tag: float = 0.0  # ...taken from one whose tags it does not name (recall.tags)

    def __post_init__(self) -> None:
        if not 0.0 <= self.previous_weight <= 1.0:  # more would outvote the message itself
            raise ValidationError(
                f"previous_weight must be within [0, 1], not {self.previous_weight}"
            )
        for name in ("named_tag", "unnamed_tag"):  # a score's whole range at most
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValidationError(f"{name} must be within [0, 1], not {value}")

    def update(self, **changes: Any) -> GateOptions:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @classmethod
    def from_settings(cls, settings: Settings) -> GateOptions:
        """The options ``settings`` configure: what ``context()`` uses unless a call passes
        its own. ``thresholds`` and ``fusion`` are per-call only and keep their defaults."""
        return cls(
            profile=settings.profile, format=settings.prompt_format, depth=settings.depth,
            prioritize_speed=settings.prioritize_speed, focus_areas=settings.focus_areas,
            hybrid=settings.hybrid, lexical_weight=settings.lexical_weight,
            pool=settings.candidate_pool, min_importance=settings.recall_min_importance,
            vocabulary=settings.domain_vocabulary or None,
        )  # fmt: skip
