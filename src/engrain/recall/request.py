"""A ``context()`` or ``explain()`` call, validated, and what serves it: the tier its model
calls for, and the :class:`~engrain.recall.results.Context` built from a compiled tier or
from the gating pipeline's decisions."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from engrain import validate
from engrain.config import Settings
from engrain.errors import ValidationError
from engrain.model import Memory, MemoryType, utcnow
from engrain.recall.gate import GateOptions
from engrain.recall.results import Context, Gated, RecallResult
from engrain.tiers import TIER_BUDGETS, Tier, choose_tier, context_window


@dataclass(frozen=True)
class Request:
    """The validated arguments ``context``, ``explain`` and ``preview`` share (``top_k``,
    ``model`` and ``window``, the context window, only ``context`` and ``preview`` take)."""

    message: str
    user_id: str
    token_budget: int | None
    memory_types: list[MemoryType] | None
    project: str | None
    include_compressed: bool
    turn: int
    options: GateOptions
    now: datetime
    previous: str | None = None
    top_k: int | None = None
    model: str | None = None
    window: int | None = None

    @classmethod
    def checked(
        cls,
        message: object,
        user_id: object,
        token_budget: object = None,
        memory_types: object = None,
        project: object = None,
        include_compressed: object = False,
        turn: object = 0,
        options: object = None,
        now: object = None,
        *,
        defaults: GateOptions,
        max_chars: int,
        previous: object = None,
        top_k: object = None,
        model: object = None,
        context_window: object = None,
    ) -> Request:
        """A request from values as a caller sent them, each validated (``options``:
        ``None`` means ``defaults``, the settings'; ``previous``, the conversation's turn
        before the message, is checked like the message)."""
        if options is not None and not isinstance(options, GateOptions):
            raise ValidationError(f"options must be GateOptions, not {type(options).__name__}")
        return cls(
            message=validate.text(message, "message", max_chars=max_chars),
            user_id=validate.user_id(user_id),
            token_budget=validate.optional_integer(token_budget, "token_budget"),
            memory_types=validate.memory_types(memory_types),
            project=validate.optional_identifier(project, "project"),
            include_compressed=validate.flag(include_compressed, "include_compressed"),
            turn=validate.integer(turn, "turn"),
            options=options or defaults,
            now=validate.moment(now, "now") or utcnow(),
            previous=None
            if previous is None
            else validate.text(previous, "previous", max_chars=max_chars),
            top_k=validate.optional_integer(top_k, "top_k", minimum=1),
            model=validate.optional_identifier(model, "model"),
            window=validate.optional_integer(context_window, "context_window", minimum=1),
        )


def tier_for(
    settings: Settings, model: str | None, window: int | None, token_budget: int | None
) -> Tier:
    """The tier for a call: an explicit token budget or ``force_tier3`` means tier 3; else
    the call's window or model, else the settings' (none at all: tier 3)."""
    if token_budget is not None or settings.force_tier3:
        return Tier.DOSSIER
    if window is None and model is not None:
        window = context_window(model, settings.model_windows)
    if window is None:
        window = settings.context_window
    if window is None and settings.model is not None:
        window = context_window(settings.model, settings.model_windows)
    return Tier.DOSSIER if window is None else choose_tier(window)


def tier_context(
    text: str,
    tier: Tier,
    memories: list[Memory],
    start: float,
    tokens: int = 0,
    context_id: str = "",
) -> Context:
    """A context served from a compiled tier (or the empty one of a trivial message)."""
    budget = TIER_BUDGETS[tier]
    result = RecallResult(memories=memories, total_tokens=tokens,
                          budget_used=tokens / budget if budget else 0.0)  # fmt: skip
    elapsed = (time.perf_counter() - start) * 1000.0
    return Context(id=context_id, text=text, recall=result, tokens=tokens, elapsed_ms=elapsed,
                   tier=int(tier))  # fmt: skip


def gated_context(
    gated: Gated, context_id: str, start: float, *, fallback: bool = False
) -> Context:
    """The context of the gating pipeline's decisions."""
    budget = gated.budget.tokens
    result = RecallResult(
        memories=[s.memory for s in gated.selected],
        total_tokens=gated.tokens_used,
        budget_used=gated.tokens_used / budget if budget else 0.0,
        scored=gated.selected,
    )
    return Context(
        id=context_id,
        text=gated.text,
        recall=result,
        tokens=gated.tokens_used,
        elapsed_ms=(time.perf_counter() - start) * 1000.0,
        gated=gated,
        fallback=fallback,
    )
