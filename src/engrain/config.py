"""Settings: explicit argument > config file > ``ENGRAIN_*`` environment > defaults.

The config file is TOML, ``config.toml`` in the data directory (or the path in
``ENGRAIN_CONFIG``), with the same keys as :class:`Settings`. In the environment, a list
(``focus_areas``) is comma-separated and a mapping (``model_windows``) is a JSON object. Tests
pass ``environ=`` instead of mutating ``os.environ``.

A setting has one default, held by the stage it tunes (:class:`GateOptions` for recall,
:mod:`engrain.feedback`, :mod:`engrain.ingest`); :class:`Settings` refers to it. A bad value
raises :class:`~engrain.errors.ConfigError` with one line per problem naming the setting and
where it came from.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import typing
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    StringConstraints,
    ValidationInfo,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from engrain import envvars
from engrain.errors import ConfigError
from engrain.feedback import FEEDBACK_RATE
from engrain.ingest.dedup import DICE_THRESHOLD
from engrain.ingest.importance import DISCARD_BELOW
from engrain.recall.assemble import Format
from engrain.recall.budget import Depth
from engrain.recall.options import GateOptions
from engrain.recall.score import Profile
from engrain.store import sqlite_url

#: Where the proxy puts the memory block in a chat-completions request.
ProxyInject = Literal["system", "append"]
#: A user domain's name: not blank once stripped.
DomainName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
ENV_PREFIX = "ENGRAIN_"
#: The ``ENGRAIN_*`` variables read outside :class:`Settings` (the README's "Other
#: variables", with those only the project's tests read). Any other ``ENGRAIN_*`` name that
#: is not a setting, nor a benchmark's (:data:`BENCH_PREFIX`), is most likely a typo: it
#: draws a :class:`ConfigWarning` naming the closest known one, and is otherwise ignored.
OTHER_VARIABLES = frozenset({
    "ENGRAIN_CONFIG", "ENGRAIN_USER", "ENGRAIN_UI_SECRET", "ENGRAIN_ANN_MIN_VECTORS",
    "ENGRAIN_PG_LEARNINGS_MB", "ENGRAIN_PG_PROJECTED_MB", "ENGRAIN_PG_POOL_INDEX",
    "ENGRAIN_PG_WORKING_SET", "ENGRAIN_PG_GRAPH_DIR", "ENGRAIN_DEFER_USES",
    "ENGRAIN_SCHEMA_EXAMPLES", "ENGRAIN_MODEL_PACKAGES",
})  # fmt: skip
#: The benchmarks' own variables (``bench/``), never warned about.
BENCH_PREFIX = "ENGRAIN_BENCH_"


class ConfigWarning(UserWarning):
    """An ``ENGRAIN_*`` environment variable engrain does not read (a misspelt setting)."""


#: Where recall settings take their defaults from: the pipeline's own.
_GATE = GateOptions()
#: The ``validation context`` key naming where each key of the input came from.
SOURCES = "sources"
_ARGUMENT = "given as an argument"


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
        "postgres extra), memory://, or a scheme a package registers in the "
        "engrain.stores entry point group. "
        "Default: sqlite file engrain.db in the data directory.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    embedder: Literal["minilm", "hash"] = Field(
        default="minilm",
        description="'minilm' (all-MiniLM-L6-v2, int8 ONNX) or 'hash' (deterministic, tests).",
    )
    onnx_threads: int = Field(
        default=0,
        ge=0,
        description="onnxruntime's intra-op threads: 0 = one per core (ignored with onnx_split).",
    )
    onnx_spinning: bool | None = Field(
        default=None,
        description="Let onnxruntime's intra-op threads spin between a call's operators "
        "and runs (at most 1 ms once idle): the lowest latency for one caller. Unset: on, "
        "except over a store that reads in threads of its own (PostgreSQL), whose reads the "
        "spinning threads would slow (100,000 memories: process CPU per context() 39-44 -> "
        "19 ms, p50 / p95 x0.94 / x0.88). `engrain serve` turns it off unless set (many "
        "concurrent calls: +21% context requests/s on 2 cores, about +1 ms a call).",
    )
    onnx_int8: bool | None = Field(
        default=None,
        description="Run the model's GEMMs in int8 (each token's activations on their own "
        "scale, the widest input channels in float): ~0.64x the model's CPU, LoCoMo ingest "
        "315 instead of 228 turns/s and a query's embedding 2.3 instead of 3.3 ms (p50) on an "
        "idle 2-core machine; vectors at cosine ~0.9999 to the float graph's, similarities "
        "within ~0.004 (docs/ingest.md). None (default): on when the CPU has an exact int8 "
        "dot product (AVX-512 VNNI or AVX-VNNI), else the float graph; False: always the "
        "float graph. Stored vectors of either graph work with the other.",
    )
    overlap_reads: bool = Field(
        default=True,
        description="Run a context()'s reads that need no query vector (BM25's best "
        "matches and their rows, the pinned memories) on a shared "
        "pool thread while the calling thread embeds the query, on a store that otherwise "
        "reads in the calling thread (SQLite, memory); a read no pool thread has begun when "
        "it is needed runs in the calling thread. The same blocks either way. False: every "
        "read in the calling thread.",
    )
    overlap_walks: bool = Field(
        default=False,
        description="Walk a large user's typed learnings' index on a shared pool thread "
        "with the read of its candidates' rows, while the calling thread walks and reads "
        "the pool's (usearch releases the GIL), on SQLite; a walk no pool thread has begun "
        "when it is needed runs in the calling thread. Off by default: on an idle machine "
        "it costs wall time and process CPU (docs/scale.md); it wins when both cores are "
        "busy. False: both searches in the calling thread, in turn.",
    )
    onnx_split: bool = Field(
        default=False,
        description="Single-threaded model runs: a multi-text call (an ingest) split over the "
        "cores, concurrent calls side by side. ~30-40% less CPU per ingest on 2 cores, about "
        "+1.5 ms per query (docs/ingest.md): for processes that mostly ingest.",
    )
    max_text_chars: int = Field(default=200_000, gt=0, description="Largest text one call takes.")
    max_chunk_tokens: int = Field(default=300, gt=0)
    min_chunk_tokens: int = Field(default=50, ge=0)
    importance_threshold: float = Field(default=DISCARD_BELOW, ge=0, le=1)
    conversation_discard: bool = Field(
        default=False,
        description="Apply the importance discard to conversation turns too. Off: a turn is "
        "the record of what was said, kept (with its low importance) rather than lost.",
    )
    recall_min_importance: float = Field(default=_GATE.min_importance, ge=0, le=1)
    dedup_threshold: float = Field(default=DICE_THRESHOLD, gt=0, le=1)
    dedup_window: int = Field(default=200, ge=0, description="Recent memories checked for dedup.")
    candidate_multiplier: int = Field(default=4, ge=1)
    top_k: int = Field(default=5, ge=1)
    token_budget: int = Field(default=2000, ge=0)
    reranker_enabled: bool = False
    profile: Profile = Field(
        default=_GATE.profile, description="Scoring profile of context(): gated, composite, static."
    )
    prompt_format: Format = Field(
        default=_GATE.format,
        description="How context() renders: the spec's tagged lines or titled sections.",
    )
    depth: Depth = Field(
        default=_GATE.depth,
        description="Memory depth: 0.7x / 1x / 1.3x budget, +0.10 / 0 / -0.10 thresholds.",
    )
    prioritize_speed: bool = Field(
        default=_GATE.prioritize_speed, description="Halve every automatic budget."
    )
    focus_areas: tuple[str, ...] = Field(
        default=_GATE.focus_areas, description="Domains given +0.05."
    )
    domain_vocabulary: dict[DomainName, list[str]] = Field(
        default_factory=dict,
        description="Your own domains and their keywords, e.g. "
        '{"payments": ["stripe", "refund"]}: a message naming a domain (singular or plural) '
        "or one of its keywords is tagged with it, beside the built-in domains. "
        "Environment: a JSON object.",
    )
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
    forget_summaries: bool = Field(
        default=False,
        description="forget() also deletes a session summary written from a forgotten memory "
        "(and un-compresses the session's other memories, so the next compression "
        "summarises them anew): the forgotten words leave every summary. Off by default: a "
        "summary is a memory of its own, which a forget of another memory leaves in place "
        "(the shared reliability scripts' contract); stored tier sets naming a forgotten "
        "memory are dropped either way.",
    )
    auto_compress: bool = Field(
        default=True, description="Check for compression in the background after ingestion."
    )
    feedback_rate: float = Field(
        default=FEEDBACK_RATE, gt=0, le=1, description="How far one feedback moves usefulness."
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
    hybrid: bool = Field(
        default=_GATE.hybrid, description="Lexical (BM25) candidates beside dense ones."
    )
    lexical_weight: float = Field(default=_GATE.lexical_weight, ge=0, le=1)
    candidate_pool: int = Field(
        default=_GATE.pool, ge=1, description="Dense and lexical pool sizes."
    )
    proxy_upstream: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL the proxy forwards chat completions to "
        "(e.g. https://api.openai.com/v1, http://localhost:11434/v1). None: no proxy routes.",
    )
    proxy_upstream_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the upstream's API key (the "
        "key itself is never a setting). None: requests go upstream without a key, unless "
        "the caller sends its own (X-Engrain-Key mode).",
    )
    proxy_timeout: float = Field(
        default=120.0, gt=0,
        description="Seconds the proxy waits to connect upstream, for the reply to start, "
        "and between two chunks of a streamed reply; past it the caller gets 504.",
    )  # fmt: skip
    proxy_inject: ProxyInject = Field(
        default="system",
        description="Where the proxy puts the memory block: 'system' adds a system message "
        "after the request's own system messages, 'append' appends it to the first one.",
    )
    proxy_record: bool = Field(
        default=True,
        description="Record each exchange through the proxy (user message and answer) as "
        "a conversation turn, in the background. A request can opt out with "
        "X-Engrain-Record: false.",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _in_the_error_tree(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        """Turn pydantic's report into a :class:`ConfigError`, one line per problem, however
        the settings were built (``load_settings`` passes where each key came from)."""
        try:
            return handler(data)
        except PydanticValidationError as exc:
            context = info.context or {}
            raise ConfigError(_describe(exc, context.get(SOURCES) or {})) from exc

    @property
    def store_url(self) -> str:
        """The store URL, defaulting to the SQLite file in the data directory."""
        return self.url or sqlite_url(self.data_dir / "engrain.db")


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Settings from ``overrides`` > config file > ``ENGRAIN_*`` environment > defaults.

    Raises :class:`ConfigError` listing every bad value, each with the environment variable,
    config file or argument it came from."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    unreadable: dict[str, str] = {}  # environment values that are not even text of a type
    for name, value in env.items():
        key = name[len(ENV_PREFIX) :].lower()
        if name.startswith(ENV_PREFIX) and key not in Settings.model_fields:
            if name not in OTHER_VARIABLES and not name.startswith(BENCH_PREFIX):
                warnings.warn(unknown_variable(name), ConfigWarning, stacklevel=2)
        elif name.startswith(ENV_PREFIX):
            try:
                merged[key] = _from_env(key, value)
            except ValueError as exc:
                unreadable[key] = f"invalid {key} from environment variable {name}: {exc}"
            sources[key] = f"from environment variable {name}"
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
            from_file = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        merged.update(from_file)
        sources.update(dict.fromkeys(from_file, f"in config file {path}"))
    merged.update(explicit)
    sources.update(dict.fromkeys(explicit, _ARGUMENT))
    for key in (*(from_file if path is not None else ()), *explicit):
        unreadable.pop(key, None)  # overridden: the environment's value does not matter
    unreadable.update(envvars.problems(env))
    try:
        settings = Settings.model_validate(merged, context={SOURCES: sources})
    except ConfigError as exc:
        raise ConfigError("\n".join([*unreadable.values(), exc.message])) from exc.__cause__
    if unreadable:
        raise ConfigError("\n".join(unreadable.values()))
    return settings


def unknown_variable(name: str) -> str:
    """What a :class:`ConfigWarning` says of ``name``: ignored, and the known variable
    closest to it."""
    known = [field.upper() for field in Settings.model_fields]
    known += [other.removeprefix(ENV_PREFIX) for other in sorted(OTHER_VARIABLES)]
    near = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), known, n=1)
    hint = f" (did you mean {ENV_PREFIX}{near[0]}?)" if near else ""
    return f"{name} is neither a setting nor a variable engrain reads: ignored{hint}"


def _from_env(key: str, raw: str) -> Any:
    """An environment variable's text as the value its setting takes: a comma-separated
    list for a tuple, a JSON object for a mapping, the text itself otherwise."""
    origin = typing.get_origin(Settings.model_fields[key].annotation)
    if origin is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if origin is dict:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object ({exc.msg}, got {raw[:40]!r})") from exc
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object (got {raw[:40]!r})")
        return value
    return raw


def _describe(exc: PydanticValidationError, sources: Mapping[str, str]) -> str:
    """One line per problem: the setting, where its value came from, what is wrong. Values
    of settings hidden from ``repr`` (the API key) are not echoed."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        key = loc[0] if loc else "settings"
        source = sources.get(key, _ARGUMENT)
        if error["type"] == "extra_forbidden":
            near = difflib.get_close_matches(key, Settings.model_fields, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            lines.append(f"unknown setting {key!r} {source}{hint}")
            continue
        field = Settings.model_fields.get(key)
        shown = field is None or field.repr
        got = f" (got {_short(error['input'])})" if shown and "input" in error else ""
        message = error["msg"][:1].lower() + error["msg"][1:]
        lines.append(f"invalid {'.'.join(loc) or key} {source}: {message}{got}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
