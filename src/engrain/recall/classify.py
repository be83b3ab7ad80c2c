"""Query classification (relevance gating, step 1): local rules, no model, well under 1 ms.

From the message alone (plus the caller's turn number) it decides:

* **complexity** — trivial, simple, moderate, complex, deep;
* **intent** — question, generation, analysis, debugging, discussion, continuation, greeting;
* **domains** — tags from a keyword table (database, security, …), the same table that tags
  memories at ingestion, so domain match compares like with like;
* **conversation depth** (the turn number), **code context** and **history references**.

The signals are the document's: message length (< 50 characters: likely trivial or simple),
code blocks (needs accuracy, likely complex), "we" / "our" / "before" (history-dependent),
turn > 5 (deep context built), technical jargon density (domain-specific).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from engrain.ingest.signals import has_technical_term


class Complexity(StrEnum):
    """How much memory a message needs."""

    TRIVIAL = "trivial"
    SIMPLE = "simple"
    MODERATE = "moderate"
    COMPLEX = "complex"
    DEEP = "deep"


class Intent(StrEnum):
    """What the message asks for; it shifts weights, type boosts and thresholds."""

    QUESTION = "question"
    GENERATION = "generation"
    ANALYSIS = "analysis"
    DEBUGGING = "debugging"
    DISCUSSION = "discussion"
    CONTINUATION = "continuation"
    GREETING = "greeting"


@dataclass(frozen=True)
class Classification:
    """The classifier's verdict on one message, with the signals that produced it."""

    complexity: Complexity
    intent: Intent
    domains: tuple[str, ...]
    turn: int
    has_code: bool
    references_history: bool
    signals: tuple[str, ...]

    @property
    def deep_conversation(self) -> bool:
        """Past turn 10: recency matters more, and the budget grows by 25%."""
        return self.turn > 10


#: Domain tags and the words that signal them (whole words, case-insensitive). The same
#: table tags memories at ingestion (:func:`domains_of`).
DOMAIN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "database": ("database", "databases", "db", "sql", "postgres", "postgresql", "mysql",
                 "sqlite", "query", "queries", "schema", "migration", "migrations", "index",
                 "indexes", "table", "tables", "orm", "transaction", "mongodb", "redis"),
    "security": ("security", "secure", "secret", "secrets", "encrypt", "encryption",
                 "vulnerability", "xss", "csrf", "injection", "password", "passwords", "pii",
                 "permission", "permissions"),
    "auth": ("auth", "authentication", "authorization", "login", "logout", "oauth", "jwt",
             "session", "sessions", "token", "tokens", "sso", "middleware"),
    "api": ("api", "apis", "endpoint", "endpoints", "rest", "graphql", "route", "routes",
            "request", "requests", "response", "http", "webhook", "webhooks"),
    "frontend": ("frontend", "ui", "css", "html", "react", "component", "components", "tailwind",
                 "next.js", "nextjs", "vue", "svelte", "layout", "button", "page"),
    "testing": ("test", "tests", "testing", "pytest", "unit", "integration", "e2e", "mock",
                "mocks", "fixture", "fixtures", "coverage", "flaky"),
    "devops": ("deploy", "deployment", "deploys", "docker", "kubernetes", "k8s", "ci", "cd",
               "pipeline", "terraform", "infra", "infrastructure", "server", "servers", "nginx",
               "aws", "gcp", "azure", "release", "releases"),
    "performance": ("performance", "latency", "slow", "fast", "speed", "cache", "caching",
                    "memory", "cpu", "optimize", "optimise", "throughput", "profiling"),
    "errors": ("error", "errors", "exception", "exceptions", "result", "retry", "retries",
               "timeout", "timeouts", "logging", "logs", "log"),
    "billing": ("billing", "invoice", "invoices", "payment", "payments", "stripe",
                "subscription", "subscriptions", "pricing"),
    "family": ("family", "kids", "children", "child", "son", "daughter", "husband", "wife",
               "mom", "mother", "dad", "father", "parents", "sister", "brother"),
    "work": ("job", "work", "career", "boss", "colleague", "colleagues", "office", "promotion",
             "interview"),
    "health": ("health", "doctor", "hospital", "sick", "exercise", "workout", "running",
               "diet", "therapy", "yoga"),
    "travel": ("travel", "trip", "trips", "vacation", "flight", "hotel", "beach", "camping",
               "road", "visited", "visit"),
    "hobbies": ("painting", "music", "guitar", "piano", "book", "books", "reading", "art",
                "pottery", "hiking", "photography", "cooking", "game", "games", "concert"),
}  # fmt: skip
_WORD_TO_DOMAINS: dict[str, list[str]] = {}
for _domain, _words in DOMAIN_KEYWORDS.items():
    for _word in _words:
        _WORD_TO_DOMAINS.setdefault(_word, []).append(_domain)

_TOKEN = re.compile(r"[a-z][a-z0-9.+#-]*[a-z0-9+#]|[a-z]")
_TRIVIAL = re.compile(
    r"^(?:hi|hello|hey|yo|hiya|thanks|thank you|thx|ty|cheers|ok|okay|k|cool|great|nice|"
    r"awesome|perfect|yes|yep|yeah|no|nope|sure|got it|sounds good|bye|goodbye|"
    r"good (?:morning|afternoon|evening|night)|lol|haha)(?:[\s,]+(?:there|so much|a lot|"
    r"again|everyone|all))?[\s!.?:)]*$",
    re.IGNORECASE,
)
_GREETING = re.compile(r"^(?:hi|hello|hey|yo|hiya|good (?:morning|afternoon|evening))\b", re.I)
_CODE_BLOCK = re.compile(r"```|~~~|^( {4}|\t)\S", re.MULTILINE)
_INLINE_CODE = re.compile(
    r"`[^`\n]+`|\b[A-Za-z_]\w*\([^)]*\)|=>|::|\b(?:def|class|const|let|var|fn|func)\s+\w+\s*[(=:<{]"
    r"|^\s*(?:import|from)\s+\w+|[{};]\s*$",
    re.MULTILINE,
)
_HISTORY = re.compile(
    r"\b(?:we|our|us|before|earlier|previously|last time|as (?:we|i) (?:discussed|said|"
    r"mentioned)|remember|again|you said|i told you|we talked)\b",
    re.IGNORECASE,
)
_DEBUGGING = re.compile(
    r"\b(?:debug\w*|fix\w*|error\w*|bugs?|trace\w*|stack|exceptions?|breakpoints?|crash\w*|"
    r"fail\w*|broken|traceback|segfault|panic\w*|doesn'?t work|not working|regression)\b",
    re.IGNORECASE,
)
_GENERATION = re.compile(
    r"^(?:please\s+|can you\s+|could you\s+)?(?:write|create|implement|generate|build|add|"
    r"make|scaffold|draft|refactor|convert|port)\b|\b(?:write|implement|generate) (?:a|an|"
    r"the|me)\b",
    re.IGNORECASE,
)
_ANALYSIS = re.compile(
    r"\b(?:why|analy[sz]e|analysis|explain|compare|comparison|review|evaluate|assess|"
    r"trade-?offs?|pros and cons|understand)\b",
    re.IGNORECASE,
)
_CONTINUATION = re.compile(
    r"^(?:and|also|then|so|what about|how about|continue|go on|next|more|another|same)\b",
    re.IGNORECASE,
)
_QUESTION = re.compile(
    r"\?\s*$|^(?:what|how|when|where|who|whom|which|whose|is|are|do|does|did|can|could|"
    r"would|will|should|has|have)\b",
    re.IGNORECASE,
)
_DEEP = re.compile(
    r"\b(?:architecture|architect|system design|design (?:of|for) the|overall|entire|whole "
    r"(?:system|codebase|project)|end[- ]to[- ]end|full (?:\w+ )?flow|strategy|roadmap|"
    r"trade-?offs?|scal(?:e|ing) (?:out|up))\b",
    re.IGNORECASE,
)
_QUICK = re.compile(r"\b(?:quick(?:ly)?|briefly|short answer|just tell me)\b", re.I)


def domains_of(text: str) -> tuple[str, ...]:
    """The domain tags whose keywords occur in ``text``, in table order."""
    found: set[str] = set()
    for token in _TOKEN.findall(text.lower()):
        for domain in _WORD_TO_DOMAINS.get(token, ()):
            found.add(domain)
    return tuple(d for d in DOMAIN_KEYWORDS if d in found)


def classify(message: str, *, turn: int = 0) -> Classification:
    """Classify ``message``, the ``turn``-th of its conversation (0 if unknown)."""
    text = message.strip()
    fired: list[str] = []
    has_code = bool(_CODE_BLOCK.search(text) or _INLINE_CODE.search(text))
    history = bool(_HISTORY.search(text))
    domains = domains_of(text)
    if has_code:
        fired.append("code")
    if history:
        fired.append("history_reference")
    if turn > 5:
        fired.append("turn>5")

    if _TRIVIAL.match(text) and len(text) < 50:
        intent = Intent.GREETING if _GREETING.match(text) else Intent.DISCUSSION
        fired.append("trivial_phrase")
        return Classification(Complexity.TRIVIAL, intent, (), turn, False, False, tuple(fired))

    intent = _intent(text, turn)
    fired.append(f"intent:{intent.value}")
    complexity = _complexity(text, intent, has_code, domains, fired)
    return Classification(complexity, intent, domains, turn, has_code, history, tuple(fired))


def _intent(text: str, turn: int) -> Intent:
    if _DEBUGGING.search(text):
        return Intent.DEBUGGING
    if _GENERATION.search(text):
        return Intent.GENERATION
    if _ANALYSIS.search(text):
        return Intent.ANALYSIS
    if turn > 5 and _CONTINUATION.match(text):
        return Intent.CONTINUATION
    if _QUESTION.search(text):
        return Intent.QUESTION
    if _GREETING.match(text):
        return Intent.GREETING
    return Intent.DISCUSSION


def _complexity(
    text: str, intent: Intent, has_code: bool, domains: tuple[str, ...], fired: list[str]
) -> Complexity:
    length = len(text)
    jargon = has_technical_term(text) or len(domains) >= 2
    if jargon:
        fired.append("jargon")
    if _DEEP.search(text) or (intent is Intent.ANALYSIS and length > 400):
        fired.append("architecture")
        return Complexity.DEEP
    if intent is Intent.DEBUGGING or has_code or length > 400:
        return Complexity.COMPLEX
    if intent is Intent.ANALYSIS:
        return Complexity.COMPLEX if length > 120 or jargon else Complexity.MODERATE
    if intent is Intent.GENERATION:
        return Complexity.MODERATE
    if _QUICK.search(text) or length < 50:
        fired.append("short" if length < 50 else "quick")
        return Complexity.SIMPLE
    return Complexity.MODERATE if length > 120 or jargon else Complexity.SIMPLE
