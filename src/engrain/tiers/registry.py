"""Which tier a model gets: its context window, from a registry or given by the caller.

The tiered-context table: a window of at most 16K tokens gets tier 1 (the ~480-token DNA
summary), 16K–64K tier 2 (the ~2,500-token field guide), anything larger tier 3 (the gated
pipeline, up to 10K tokens). "K" is 1,024 tokens, the unit model windows are quoted in
(8,192, 16,384, 65,536 …).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import IntEnum

from engrain.errors import UnknownValueError, ValidationError


class Tier(IntEnum):
    """The three density tiers."""

    DNA = 1
    FIELD_GUIDE = 2
    DOSSIER = 3


#: Largest window of each pre-compiled tier (inclusive).
TIER1_MAX_WINDOW = 16 * 1024
TIER2_MAX_WINDOW = 64 * 1024

#: Token budget of each tier: tier 3's is the gating ceiling.
TIER_BUDGETS: Mapping[Tier, int] = {Tier.DNA: 480, Tier.FIELD_GUIDE: 2_500, Tier.DOSSIER: 10_000}

#: Context windows of common models, in tokens. The first six are the document's table
#: (its "Llama 3.1 8B (local)" is the 8K a local runner gives it by default).
MODEL_WINDOWS: Mapping[str, int] = {
    # the tiered-context document
    "llama-3.1-8b": 8_192,
    "mistral-small": 32_768,
    "deepseek-v3": 65_536,
    "claude-3.5-sonnet": 200_000,
    "gpt-4o": 128_000,
    "gemini-1.5-pro": 1_048_576,
    # hosted models in common use
    "gpt-4o-mini": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "claude-3-haiku": 200_000,
    "claude-3-opus": 200_000,
    "claude-3.5-haiku": 200_000,
    "claude-3.7-sonnet": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "deepseek-r1": 65_536,
    "mistral-large": 131_072,
    "mistral-medium": 131_072,
    "codestral": 262_144,
    # open-weight models as local runners serve them (Ollama, llama.cpp, LM Studio)
    "llama-3-8b": 8_192,
    "llama-3.2-1b": 8_192,
    "llama-3.2-3b": 8_192,
    "llama-3.1-70b": 131_072,
    "llama-3.3-70b": 131_072,
    "mistral-7b": 32_768,
    "mixtral-8x7b": 32_768,
    "qwen2.5-7b": 32_768,
    "qwen2.5-coder-7b": 32_768,
    "qwen3-8b": 40_960,
    "phi-3-mini": 4_096,
    "phi-4": 16_384,
    "gemma-2-9b": 8_192,
    "gemma-3-4b": 131_072,
    "gemma-3-12b": 131_072,
    "codellama-13b": 16_384,
}

_PROVIDER = re.compile(r"^(?:[a-z0-9_.-]+/)+")
_DATE_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|latest|preview|instruct|chat)$")


def normalise_model(name: str) -> str:
    """A registry key for a model name as callers spell it: lowercased, provider prefix
    (``openai/``, ``ollama/``) and date or ``latest`` suffixes dropped, Ollama's ``name:tag``
    and spaces turned into dashes, ``llama3.1`` into ``llama-3.1``."""
    key = _PROVIDER.sub("", name.strip().lower())
    key = re.sub(r"[\s:_]+", "-", key)
    key = re.sub(r"^(llama|phi|gemma|qwen)(\d)", r"\1-\2", key)
    key = key.replace("qwen-2", "qwen2").replace("qwen-3", "qwen3")
    while (trimmed := _DATE_SUFFIX.sub("", key)) != key:
        key = trimmed
    return key


def context_window(model: str, custom: Mapping[str, int] | None = None) -> int:
    """The context window of ``model``: the caller's ``custom`` windows first (exact name
    or normalised), then the registry (exact, then the longest registered prefix, so
    ``gpt-4o-2024-08-06`` is ``gpt-4o``). :class:`UnknownValueError` otherwise."""
    if not isinstance(model, str) or not model.strip():
        raise ValidationError("model must be a non-empty string")
    custom = custom or {}
    key = normalise_model(model)
    for table in (custom, {normalise_model(k): v for k, v in custom.items()}, MODEL_WINDOWS):
        if model in table:
            return table[model]
        if key in table:
            return table[key]
    prefixes = [k for k in MODEL_WINDOWS if key.startswith(k + "-")]
    if prefixes:
        return MODEL_WINDOWS[max(prefixes, key=len)]
    raise UnknownValueError(
        f"unknown model {model!r}: pass context_window=N, or add it to the model_windows setting"
    )


def choose_tier(window: int, *, force_tier3: bool = False) -> Tier:
    """The tier for a context window of ``window`` tokens."""
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ValidationError("context_window must be a positive integer")
    if force_tier3 or window > TIER2_MAX_WINDOW:
        return Tier.DOSSIER
    return Tier.DNA if window <= TIER1_MAX_WINDOW else Tier.FIELD_GUIDE
