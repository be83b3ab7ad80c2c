"""Settings: explicit argument > config file > ``ENGRAIN_*`` environment > defaults.

The config file is TOML, ``config.toml`` in the data directory (or the path in
``ENGRAIN_CONFIG``), with the same keys as :class:`Settings`. Tests pass ``environ=`` instead
of mutating ``os.environ``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from engrain.errors import ConfigError

ENV_PREFIX = "ENGRAIN_"


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$ENGRAIN_DATA_DIR``, else ``$XDG_DATA_HOME/engrain``, else ``~/.local/share/engrain``."""
    env = os.environ if environ is None else environ
    if env.get("ENGRAIN_DATA_DIR"):
        return Path(env["ENGRAIN_DATA_DIR"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "engrain"


class Settings(BaseModel):
    """Every tunable of the engine. Unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(
        default=None,
        description="Store URL: sqlite:///path, postgresql://user:pass@host/db (needs the "
        "postgres extra), memory://, or a dotted path to a Store class. "
        "Default: sqlite file engrain.db in the data directory.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    embedder: str = Field(
        default="minilm",
        description="'minilm' (all-MiniLM-L6-v2, int8 ONNX) or 'hash' (deterministic, tests).",
    )
    onnx_threads: int = Field(default=0, ge=0, description="0 = one per core.")
    max_text_chars: int = Field(default=200_000, gt=0, description="Largest text one call takes.")
    max_chunk_tokens: int = Field(default=300, gt=0)
    min_chunk_tokens: int = Field(default=50, ge=0)
    importance_threshold: float = Field(default=0.3, ge=0, le=1)
    conversation_discard: bool = Field(
        default=False,
        description="Apply the importance discard to conversation turns too. Off: a turn is "
        "the record of what was said, kept (with its low importance) rather than lost.",
    )
    recall_min_importance: float = Field(default=0.2, ge=0, le=1)
    dedup_threshold: float = Field(default=0.80, gt=0, le=1)
    dedup_window: int = Field(default=200, ge=0, description="Recent memories checked for dedup.")
    candidate_multiplier: int = Field(default=4, ge=1)
    top_k: int = Field(default=5, ge=1)
    token_budget: int = Field(default=2000, ge=0)
    reranker_enabled: bool = False
    profile: Literal["gated", "composite", "static"] = Field(
        default="gated", description="Scoring profile of context(): gated, composite, static."
    )
    prompt_format: Literal["tagged", "sections"] = Field(
        default="tagged",
        description="How context() renders: the spec's tagged lines or titled sections.",
    )
    depth: Literal["light", "normal", "rich"] = Field(
        default="normal",
        description="Memory depth: 0.7x / 1x / 1.3x budget, +0.10 / 0 / -0.10 thresholds.",
    )
    prioritize_speed: bool = Field(default=False, description="Halve every automatic budget.")
    focus_areas: tuple[str, ...] = Field(default=(), description="Domains given +0.05.")
    model: str | None = Field(
        default=None,
        description="The target model (e.g. 'gpt-4o', 'llama3.1:8b'): its context window picks "
        "the tier of context(). None: tier 3 unless a call names a model or window.",
    )
    context_window: int | None = Field(
        default=None, gt=0, description="The target model's context window, in tokens."
    )
    model_windows: dict[str, int] = Field(
        default_factory=dict, description="Context windows of models the registry lacks."
    )
    force_tier3: bool = Field(
        default=False, description="Always use the full relevance pipeline (tier 3)."
    )
    llm_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL (e.g. http://localhost:11434/v1 for Ollama). "
        "None: no LLM; tier 1 prose and session summaries are rule-based.",
    )
    llm_model: str | None = Field(default=None, description="Model name the endpoint serves.")
    llm_api_key: str | None = Field(default=None, repr=False, description="Bearer key, if any.")
    llm_timeout: float = Field(default=30.0, gt=0, description="Seconds per LLM request.")
    llm_retries: int = Field(default=2, ge=0, description="Retries of a failed LLM request.")
    compression_threshold: int = Field(
        default=50, ge=1, description="Compress when a user has more uncompressed sessions."
    )
    sessions_to_compress: int | None = Field(
        default=None, ge=1, description="Oldest sessions compressed at once (threshold / 2)."
    )
    auto_compress: bool = Field(
        default=True, description="Check for compression in the background after ingestion."
    )
    feedback_rate: float = Field(
        default=0.2, gt=0, le=1, description="How far one feedback moves usefulness."
    )
    correction_similarity: float = Field(
        default=0.6, ge=0, le=1,
        description="A correction without `corrects` supersedes its nearest memory this close.",
    )  # fmt: skip
    conflict_similarity: float = Field(
        default=0.8, ge=0, le=1, description="Memories this close that disagree are flagged."
    )
    context_retention_days: int = Field(
        default=30, ge=1, description="Days a context id stays valid for feedback."
    )
    hybrid: bool = Field(default=True, description="Lexical (BM25) candidates beside dense ones.")
    lexical_weight: float = Field(default=0.35, ge=0, le=1)
    candidate_pool: int = Field(default=50, ge=1, description="Dense and lexical pool sizes.")

    @property
    def store_url(self) -> str:
        """The store URL, defaulting to the SQLite file in the data directory."""
        return self.url or f"sqlite:///{self.data_dir / 'engrain.db'}"


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Settings from ``overrides`` > config file > ``ENGRAIN_*`` environment > defaults."""
    env = os.environ if environ is None else environ
    fields = set(Settings.model_fields)
    merged: dict[str, Any] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower()
            if key in fields:
                merged[key] = value
    explicit = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "data_dir" in explicit:
        merged["data_dir"] = explicit["data_dir"]
    elif "data_dir" not in merged:
        merged["data_dir"] = default_data_dir(env)
    path = config_file or (Path(env["ENGRAIN_CONFIG"]) if env.get("ENGRAIN_CONFIG") else None)
    if path is None:
        candidate = Path(merged["data_dir"]) / "config.toml"
        path = candidate if candidate.is_file() else None
    if path is not None:
        try:
            merged.update(tomllib.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    merged.update(explicit)
    try:
        return Settings(**merged)
    except PydanticValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc
