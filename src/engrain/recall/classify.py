"""Query classification (relevance gating, step 1): local rules, no model, well under 1 ms.

From the message alone (plus the caller's turn number and the user's domain vocabulary) it
decides:

* **complexity** — trivial, simple, moderate, complex, deep;
* **intent** — question, generation, analysis, debugging, discussion, continuation, greeting;
* **domains** — tags from a keyword table (database, security, …), the same table that tags
  memories at ingestion, so domain match compares like with like, plus the user's own
  domains (:func:`domains_of`);
* **conversation depth** (the turn number), **code context** and **history references**.

The signals are the document's: message length (< 50 characters: likely trivial or simple),
code blocks (needs accuracy), "we" / "our" / "before" (history-dependent), turn > 5 (deep
context built), technical jargon density (domain-specific). On top of them, what labelled
messages showed (``tests/test_classify.py``):

* a message made only of acknowledgements, laughter and emoji is trivial, and so is a short
  one with no content word ("no worries at all", "you around?": :mod:`.contentless`);
* debugging is recognised by its symptoms (hangs, 500s, OOM, timeouts, flaky, slow, exit
  codes, "doesn't work", things arriving out of order, output quoted after "I get" or
  "traps with") or the condition it shows under ("resets every time …", "red only on
  Windows", "the debug build is fine"), not by the words "error" and "bug" — which, in a
  question about a fact ("which error tracker do we use?"), name a topic, not a problem;
* a question whether a proposal is worth it ("Is it worth signing dev builds …?") is a
  discussion, not an analysis;
* generation is a request to produce or change something, however it is phrased:
  an imperative ("Cover … with tests", "Let users …"), a need ("We need …", "Users want …")
  or a requirement ("The form should …");
* continuation is an opener ("and…", "what about…", "same for…") or a leading anaphor
  ("does that…", "it should…") at any turn after the first;
* code or a debugging word alone no longer makes a message complex: debugging, analysis and
  multi-file work do, as the seed's table says — except a pasted error line alone (simple:
  its known fix) and a one-line question about a snippet (moderate); a tool's error quoted
  in a report of what failed ("npm ci fails: ERESOLVE …", "the sink task went FAILED
  overnight: 'JWT token is invalid'") is the seed's "Debug this error", complex;
* a question about a procedure or mechanism ("how do I ship …"), the rationale of a recorded
  decision ("why do we … instead of …") and a discussion are moderate, a question about a
  fact is simple;
* a review of a written design (an RFC, a design doc) is deep, as the seed's "Review this
  system design"; "what does X compare … against?" asks a fact, not for a comparison;
* a deep question lowers the selection thresholds (:attr:`Classification.threshold_shift`).

The gate then asks :mod:`engrain.recall.intent_model` for a second opinion on the intent of
a non-trivial message, from its query vector; :func:`complexity_for` gives the complexity
for the intent it settles on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from engrain.errors import ValidationError
from engrain.ingest.signals import has_technical_term
from engrain.recall import cues
from engrain.recall.trivial import SHORT, greets, trivial_signal


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

    @property
    def threshold_shift(self) -> float:
        """How much this message moves every selection threshold: deep questions ("Help me
        understand the full auth flow") get the seed's lower thresholds, everything else 0.
        Added to the memory-depth shift by the gate."""
        return DEEP_THRESHOLD_SHIFT if self.complexity is Complexity.DEEP else 0.0


#: The threshold shift of a deep question. The seed gives deep questions "higher
#: complexity, larger budget, lower thresholds" without a number; half the rich depth's
#: -0.10 lowers every threshold without letting a deep question take what rich would.
DEEP_THRESHOLD_SHIFT = -0.05


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

#: A user's own domains: domain name → keywords. The name itself always counts.
Vocabulary = Mapping[str, Sequence[str]]

#: The signals of a message asking for analysis or for code in the seed's own words
#: ("explain", "analyze", "review" …; "write", "create", "implement" opening a request): its
#: intent is not a guess, so no second opinion changes it (:data:`DECIDED`).
ASKS_ANALYSIS = "asks for analysis"
ASKS_WRITING = "asks to write"
#: A bare imperative closing a message of several sentences asks for the work.
FINAL_REQUEST = "request in the final sentence"
#: A message that opens with a request verb in the imperative, no "please" or "can you"
#: before it ("Make the manager's cache only hold Secrets …"), and does not end with a
#: question ("Backtest WAPE for dairy jumped … What changed?" asks that question): a
#: request in its form.
IMPERATIVE = "imperative"
#: A bare choice of two named options mused on (:data:`cues.CHOICE_OF_TWO`): a discussion
#: of one pick, simple; no verb asks for work, so no second opinion reads one into it.
CHOICE = "a choice of two"
DECIDED = frozenset({ASKS_ANALYSIS, ASKS_WRITING, IMPERATIVE, CHOICE})
#: A question whether a proposal is worth it (:data:`cues.WORTH`): a discussion.
WORTH_IT = "asks if it is worth it"
SNIPPET = 200  # a one-line bug question with its snippet
ONE_LINE = 90  # a question or remark that fits one line asks about a single concept
LONG = 400  # a message this long carries enough context to need rich memory


def domains_of(text: str, vocabulary: Vocabulary | None = None) -> tuple[str, ...]:
    """The domain tags whose keywords occur in ``text``: the built-in ones in table order,
    then the user's ``vocabulary`` (domain → keywords) in its order.

    A user domain matches its own name or any of its keywords, singular or plural and in
    simple inflections ("payment" / "payments", "deploy" / "deployed"); a keyword of several
    words ("a/b test") matches those words in a row. A user domain named like a built-in
    one adds its keywords to it.
    """
    tokens = cues.TOKEN.findall(text.lower())
    found: set[str] = set()
    for token in tokens:
        for domain in _WORD_TO_DOMAINS.get(token, ()):
            found.add(domain)
    extra: list[str] = []
    if vocabulary:
        index, phrases, order = _compile(_freeze(vocabulary))
        stems = [_stem(t) for t in tokens]
        for stem in stems:
            for domain in index.get(stem, ()):
                found.add(domain)
        for phrase, domain in phrases:
            if domain not in found and _contains(stems, phrase):
                found.add(domain)
        extra = [d for d in order if d in found and d not in DOMAIN_KEYWORDS]
    return (*(d for d in DOMAIN_KEYWORDS if d in found), *extra)


def _freeze(vocabulary: Vocabulary) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((name, tuple(words)) for name, words in vocabulary.items())


@lru_cache(maxsize=32)
def _compile(
    frozen: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[dict[str, tuple[str, ...]], tuple[tuple[tuple[str, ...], str], ...], tuple[str, ...]]:
    """Stem → domains for one-word keywords, (stems, domain) for phrases, domain order."""
    index: dict[str, list[str]] = {}
    phrases: list[tuple[tuple[str, ...], str]] = []
    order: list[str] = []
    for name, words in frozen:
        domain = name.strip()
        if not domain:
            raise ValidationError("domain vocabulary: a domain name is empty")
        order.append(domain)
        for keyword in (domain, *words):
            stems = tuple(_stem(t) for t in cues.TOKEN.findall(keyword.lower()))
            if len(stems) == 1:
                index.setdefault(stems[0], []).append(domain)
            elif stems:
                phrases.append((stems, domain))
    return {s: tuple(d) for s, d in index.items()}, tuple(phrases), tuple(order)


def _stem(word: str) -> str:
    """A light stem so that "payments" meets "payment" and "deployed" meets "deploy": plural
    and -ing/-ed endings and a final "e" come off words long enough to keep a root."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("sses", "ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def _contains(stems: list[str], phrase: tuple[str, ...]) -> bool:
    width = len(phrase)
    return any(tuple(stems[i : i + width]) == phrase for i in range(len(stems) - width + 1))


def classify(
    message: str, *, turn: int = 0, vocabulary: Vocabulary | None = None
) -> Classification:
    """Classify ``message``, the ``turn``-th of its conversation (0 if unknown), tagging it
    with the built-in domains and the user's ``vocabulary`` (domain → keywords)."""
    text = message.strip()
    fired: list[str] = []
    trivial = trivial_signal(text)
    if trivial is not None:
        # greetings, thanks, acknowledgements and emoji are one social register, the
        # seed's trivial row; every labelled reading names its intent "greeting"
        fired.append(trivial)
        return Classification(
            Complexity.TRIVIAL, Intent.GREETING, (), turn, False, False, tuple(fired)
        )

    has_code = bool(cues.CODE_BLOCK.search(text) or cues.INLINE_CODE.search(text))
    history = bool(cues.HISTORY.search(text))
    domains = domains_of(text, vocabulary)
    if has_code:
        fired.append("code")
    if history:
        fired.append("history_reference")
    if turn > 5:
        fired.append("turn>5")
    body = cues.LEAD.sub("", text, count=1) or text
    intent = _intent(text, body, turn, has_code, fired)
    fired.append(f"intent:{intent.value}")
    complexity = _complexity_noted(text, body, intent, has_code, domains, fired)
    return Classification(complexity, intent, domains, turn, has_code, history, tuple(fired))


def complexity_for(
    message: str, intent: Intent, domains: tuple[str, ...], fired: list[str]
) -> Complexity:
    """The complexity the rules give a non-trivial ``message`` read as ``intent`` (when a
    second opinion changed its intent, :mod:`engrain.recall.intent_model`), appending the
    signals that decided it to ``fired``."""
    text = message.strip()
    has_code = bool(cues.CODE_BLOCK.search(text) or cues.INLINE_CODE.search(text))
    body = cues.LEAD.sub("", text, count=1) or text
    return _complexity_noted(text, body, intent, has_code, domains, fired)


def _complexity_noted(
    text: str,
    body: str,
    intent: Intent,
    has_code: bool,
    domains: tuple[str, ...],
    fired: list[str],
) -> Complexity:
    """:func:`_complexity`, noting in ``fired`` that a deep question lowers the thresholds."""
    complexity = _complexity(text, body, intent, has_code, domains, fired)
    if complexity is Complexity.DEEP:
        fired.append("deep: lower thresholds")
    return complexity


def _intent(text: str, body: str, turn: int, has_code: bool, fired: list[str]) -> Intent:
    symptom, told = _symptoms(text)
    if symptom or told:
        fired.append("symptom")
    if turn > 0 and _follows_up(body):
        fired.append("follow-up")
        # a follow-up that reports a new symptom is a bug report; one that asks about a
        # failure ("what if the retry fails?") continues the thread
        reported = symptom and not body.rstrip().endswith("?")
        return Intent.DEBUGGING if reported else Intent.CONTINUATION
    symptom = symptom or told
    opened = _opening_intent(body, fired)
    if opened is None:
        opened = _asked_work(body, symptom, fired)
    return opened if opened is not None else _stated_intent(text, body, has_code, symptom, fired)


def _symptoms(text: str) -> tuple[bool, bool]:
    """Whether ``text`` reports a symptom (an error, a failure, output shown), and whether
    it tells a condition without asking (``told``)."""
    asked = cues.FAILING_KIND.sub(" ", text) if _asks(text) else text
    symptom = bool(
        cues.SYMPTOM.search(asked)
        or cues.ERROR_CLASS.search(text)
        or cues.ERROR_LINE.match(text)
        or ("`" in text and cues.REPORTED_OUTPUT.search(text))
        or (cues.GONE.search(text) and not _asks(text))
    )
    # a condition in a follow-up narrows the work asked before ("same chart but only on the
    # EU stores"); opening a thread, it tells when a behaviour shows: a bug report
    told = bool(cues.REPRO.search(text)) and "?" not in text
    return symptom, told


def _follows_up(body: str) -> bool:
    """Whether ``body``, a turn after the first, opens as a follow-up of the turn before."""
    return bool(
        cues.CONTINUATION.match(body)
        or cues.ANAPHORA.match(body)
        or cues.ALSO_THIS.search(body)
        or cues.REDO.match(body)
    )


def _opening_intent(body: str, fired: list[str]) -> Intent | None:
    """The intent ``body``'s opening says outright: a repair, an explanation asked, a
    procedure, a deliberation or a proposal weighed; ``None`` for any other."""
    if cues.REPAIR.match(body):
        return Intent.DEBUGGING
    if cues.EXPLAIN.search(body):
        fired.append(ASKS_ANALYSIS)
        return Intent.ANALYSIS
    if cues.PROCEDURE.match(body):
        fired.append("procedure")  # "how do I roll back if the release is broken?"
        return Intent.QUESTION
    if cues.DELIBERATE.match(body):
        fired.append("deliberation")  # "not sure the monorepo still makes sense, builds …"
        return Intent.DISCUSSION
    if any(cues.WORTH.search(q) for q in _questions(body)):
        fired.append(WORTH_IT)  # whatever the proposal asks to build or mentions failing
        return Intent.DISCUSSION
    return None


def _asked_work(body: str, symptom: bool, fired: list[str]) -> Intent | None:
    """:data:`Intent.GENERATION` for a request for work (opening with it, a need, in the
    final question, or a bare imperative last); ``None`` otherwise."""
    ask = _final_question(body)
    need = cues.NEED.match(body) or cues.NAMED_NEED.match(body)
    if _request(body) or (need and not cues.ASKS_HOW.search(ask)):
        if cues.WRITE.match(body):
            fired.append(ASKS_WRITING)
        elif cues.IMPERATIVE.match(body) and _request(body) and not _asks(body):
            fired.append(IMPERATIVE)  # one ending in a question asks that question
        return Intent.GENERATION
    if ask and not symptom and _request(ask):
        fired.append("request in the final question")
        return Intent.GENERATION
    if not symptom and _final_request(body):
        fired.append(FINAL_REQUEST)  # "Ruth says users want … Add spec.backup.retention."
        return Intent.GENERATION
    return None


def _stated_intent(text: str, body: str, has_code: bool, symptom: bool, fired: list[str]) -> Intent:
    """The intent of a message that neither opens with one nor asks for work: a bug
    report, a requirement, a discussion, an analysis, a question or a greeting."""
    if symptom or (has_code and cues.WHY_CODE.match(body)):
        return Intent.DEBUGGING
    if cues.REQUIREMENT.match(body) or (
        cues.PLEASE.search(body) and not cues.QUESTION.search(body)
    ):
        return Intent.GENERATION
    if cues.PROBLEM_WORD.search(text) and not cues.FACT_QUESTION.match(body):
        fired.append("problem word")
        return Intent.DEBUGGING
    if cues.DISCUSSION.match(body) or cues.DISCUSSION_ANYWHERE.search(body):
        return Intent.DISCUSSION
    # a question about a fact states its intent first; what follows is context ("who owns
    # payments? need someone to review a refund PR")
    opening = _first_sentence(body) if cues.FACT_QUESTION.match(body) else body
    does = cues.WHAT_IT_DOES.match(opening)
    if does:
        fired.append("what it does")  # the verb is the thing's, not a request for analysis
        opening = opening[does.end() :]
    if cues.ANALYSIS.search(opening):
        return Intent.ANALYSIS
    if cues.QUESTION.search(body):
        # how a whole system or lifecycle works is analysis (the seed: deep = architecture,
        # analysis), not a question about one fact or procedure
        return Intent.ANALYSIS if cues.DEEP.search(body) else Intent.QUESTION
    if greets(text):
        return Intent.GREETING
    return Intent.DISCUSSION


def _request(text: str) -> bool:
    """Whether ``text`` opens with a request verb used as one: "make snapshot has been
    running for 3 hours" names a command, it does not ask to make anything."""
    found = cues.GENERATION_VERB.match(text)
    return found is not None and not cues.SUBJECT_VERB.match(text, found.end())


def _final_request(body: str) -> bool:
    """Whether the last sentence of a message of several is a bare imperative ("Ruth says
    users want to pick retention per cluster. Add spec.backup.retention for it."): what went
    before is its reason, the message asks for the work."""
    sentences = cues.SENTENCE_END.split(body.strip())
    last = sentences[-1].strip()
    return len(sentences) > 1 and not _asks(last) and _request(last)


def _questions(body: str) -> list[str]:
    """The sentences of ``body`` that ask (end with "?")."""
    return [s for s in cues.SENTENCE_END.split(body.strip()) if _asks(s)]


def _first_sentence(body: str) -> str:
    """The first sentence of ``body``."""
    return cues.SENTENCE_END.split(body.strip(), maxsplit=1)[0]


def _final_question(body: str) -> str:
    """The last sentence of a message of several when it is a question ("I need an index on
    a 40M-row table. What's the safe way to get it in?"), else "": what such a message asks
    is its final question."""
    sentences = cues.SENTENCE_END.split(body.strip())
    if len(sentences) < 2 or not sentences[-1].rstrip().endswith("?"):
        return ""
    return sentences[-1].strip()


def _complexity(
    text: str,
    body: str,
    intent: Intent,
    has_code: bool,
    domains: tuple[str, ...],
    fired: list[str],
) -> Complexity:
    if has_technical_term(text) or len(domains) >= 2:
        fired.append("jargon")
    deep = bool(cues.DEEP.search(text))
    if intent is Intent.GENERATION:
        built = _work_complexity(text, body, has_code, deep, fired)
        if built is not None:
            return built
    if deep or _deep_analysis(text, body, intent):
        fired.append("architecture")
        return Complexity.DEEP
    if intent is Intent.DEBUGGING:
        return _debugging_complexity(text, has_code, fired)
    if intent is Intent.DISCUSSION:
        return _discussion_complexity(text, body, fired)
    if cues.MULTI_FILE.search(text):
        fired.append("multi-file")
        return Complexity.COMPLEX
    if len(text) > LONG:
        fired.append("long")
        return Complexity.COMPLEX
    if intent is Intent.ANALYSIS:
        return _analysis_complexity(body, fired)
    return _plain_complexity(text, body, intent, fired)


def _work_complexity(
    text: str, body: str, has_code: bool, deep: bool, fired: list[str]
) -> Complexity | None:
    """A request for work's complexity by its shape: a design asked for is deep, a feature
    of many parts or a restructuring complex; ``None`` for any other (one unit's cases or
    fields are the unit's, not parts of a feature)."""
    if cues.DESIGN_WORK.match(body):
        fired.append("architecture: a design asked for")  # the seed's deep "Architecture"
        return Complexity.DEEP
    if not deep and cues.ONE_UNIT.match(body):
        fired.append("one unit")  # its cases or fields are the unit's, not parts of a feature
    elif deep or cues.ENUMERATION.search(cues.ASIDE.sub(" ", _prose(text))):
        fired.append("many parts")  # building a whole flow is complex work, not a design
        return Complexity.COMPLEX
    if not has_code and cues.RESTRUCTURE.match(body):
        fired.append("restructure")
        return Complexity.COMPLEX
    return None


def _deep_analysis(text: str, body: str, intent: Intent) -> bool:
    """Whether an analysis is of a whole: a path from one end of the system to the other,
    how it changed over its whole history, the seed's "Review this system design", or a
    long one."""
    return intent is Intent.ANALYSIS and bool(
        cues.JOURNEY.search(text)
        or cues.HISTORY_WALK.search(text)
        or cues.DESIGN_REVIEW.match(body)
        or len(text) > LONG
    )


def _discussion_complexity(text: str, body: str, fired: list[str]) -> Complexity:
    """A discussion's complexity: long is complex, one piece of news passed on simple."""
    if len(text) > LONG:
        return Complexity.COMPLEX
    if cues.NOTE.match(body) and not _asks(body):
        fired.append("note")  # one piece of news passed on: a single concept
        return Complexity.SIMPLE
    if cues.CHOICE_OF_TWO.match(body):
        fired.append(CHOICE)  # "maestro or detox for the e2e suite, honestly": one pick
        return Complexity.SIMPLE
    return Complexity.MODERATE


def _analysis_complexity(body: str, fired: list[str]) -> Complexity:
    """An analysis's complexity: a rationale or one part's mechanism is moderate."""
    if _asks_rationale(body):
        fired.append("rationale")  # the answer is one recorded decision
        return Complexity.MODERATE
    if cues.EXPLAIN_MECHANISM.match(body) and not cues.SYMPTOM.search(body):
        fired.append("mechanism")  # how one part works: a how-question as a request
        return Complexity.MODERATE
    return Complexity.COMPLEX


def _plain_complexity(text: str, body: str, intent: Intent, fired: list[str]) -> Complexity:
    """The complexity of a short message none of the shapes above decided: by what it asks
    (a small piece, a revision, a quick fact, a procedure) and then by its length."""
    if intent is Intent.GENERATION and cues.SMALL_PIECE.match(body):
        fired.append("small piece")  # one line or one small piece: a single concept
        return Complexity.SIMPLE
    if intent in (Intent.GENERATION, Intent.DISCUSSION):
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and (cues.REVISE.search(body) or _produces(body)):
        fired.append("revision")
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and cues.REPEAT_WORK.search(body) and not _asks(body):
        fired.append("repeat the work")
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and cues.WHAT_IF.match(_OPENERS.sub("", body)):
        fired.append("what if")  # a consequence to explain on the thread
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and cues.WORK_FOR_IT.match(_OPENERS.sub("", body)):
        fired.append("a piece for it")  # one more piece of work for what was built
        return Complexity.MODERATE
    if cues.QUICK.search(text):
        fired.append("quick")
        return Complexity.SIMPLE
    asks_how = (
        cues.HOW_TO.match(body)
        or cues.WAY_TO.match(body)
        or cues.ASKS_HOW.search(_final_question(body) or _first_sentence(body))
    )
    if intent is Intent.QUESTION and asks_how and cues.HOW_IT_IS.match(body):
        fired.append("how it is")  # a fact about how a thing is set up, not a procedure
    elif intent is Intent.QUESTION and asks_how:
        fired.append("how-to")  # a procedure: the golden path and its pitfalls
        return Complexity.MODERATE
    length = len(text)
    if length < SHORT:
        fired.append("short")
        return Complexity.SIMPLE
    return Complexity.SIMPLE if length <= ONE_LINE else Complexity.MODERATE


#: A follow-up telling what to do next to what was built ("now do the WASM side of it too",
#: "also handle the empty case"), not a question ("do those run in parallel?").
_DO_PART = re.compile(r"(?:do|handle) (?:the|it|that|this|those|these)\b(?! (?:same|rest)\b)", re.I)
_OPENERS = re.compile(r"^(?:(?:and|also|then|now|so|ok|okay|next|plus|but)\b[\s,]*)+", re.I)
_CODE_SPAN = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.S)


def _asks_rationale(body: str) -> bool:
    """Whether ``body`` asks why a recorded choice was made ("why did we pick Go", "why
    tweedie and not plain l2"), not why something behaves as it does ("why is the memory
    usage creeping up over a long session": the seed's complex analysis)."""
    if not cues.RATIONALE.match(body):
        return False
    return bool(
        cues.CHOICE.search(body) or (cues.CONTRAST.search(body) and not cues.WHY_VERB.match(body))
    )


def _asks(body: str) -> bool:
    """Whether ``body`` is a question (ends with "?")."""
    return body.rstrip().endswith("?")


def _produces(body: str) -> bool:
    """Whether a follow-up asks to produce or change something, in any of its sentences
    ("now add tests for it", "Go with option 2 then. write it up")."""
    for sentence in cues.SENTENCE_END.split(body.strip()):
        rest = _OPENERS.sub("", sentence, count=1)
        if _request(rest) or cues.REDO.match(rest) or (_DO_PART.match(rest) and not _asks(rest)):
            return True
    return False


def _prose(text: str) -> str:
    """``text`` without its code blocks and inline code."""
    return _CODE_SPAN.sub(" ", text)


def _debugging_complexity(text: str, has_code: bool, fired: list[str]) -> Complexity:
    """A pasted error line alone asks for its known fix; a snippet that misbehaves is a
    local problem; a system that misbehaves (a job, an endpoint, a pipeline, a test run)
    is complex, as the seed says — and so is a run whose error is quoted in the report
    ("terraform apply fails with `Error acquiring the state lock`"): the seed's "Debug this
    error", as the second reader and the later writers label it."""
    if "\n" not in text and (cues.ERROR_LINE.match(text) or cues.ERROR_CODE.match(text)):
        fired.append("error line")
        return Complexity.SIMPLE
    prose = _prose(text)
    if has_code and len(prose) <= SNIPPET and not cues.SYSTEM.search(prose):
        if _quotes_output(text):
            # the code is what a compiler or a tool reported, not the user's snippet: the
            # seed's "Debug this error", complex
            fired.append("quoted output")
            return Complexity.COMPLEX
        fired.append("snippet")
        return Complexity.MODERATE
    return Complexity.COMPLEX


def _quotes_output(text: str) -> bool:
    """Whether the code ``text`` quotes is a failure's output rather than code: a line of a
    code block that is an error line ("error[E0277]: …", "java.lang.IllegalStateException: …",
    also after a log's time: "02:41:07  Database Error in model …"), a span right after the
    verb reporting it ("I get `cannot borrow …`", "traps with `…`", "matchd says `…`"), an
    error line after the verb and its colon ("Build fails: error[E0502]: …"), or an inline
    span that is an error line or a tool's log line ("`smp: request timed out`")."""
    for block in cues.BLOCK_BODY.findall(text):
        for line in block.splitlines():
            line = cues.LOG_TIME.sub("", line.strip(), count=1)
            if cues.ERROR_LINE.match(line) or cues.ERROR_CODE.match(line):
                return True
    if cues.REPORTED_OUTPUT.search(text) or cues.SAYS_OUTPUT.search(text):
        return True
    quoted = cues.QUOTED_AFTER.search(text)
    if quoted and cues.ERROR_LINE.match(text[quoted.end() :]):
        return True  # "Build fails: error[E0502]: cannot borrow `self.items` …"
    for span in cues.INLINE_SPAN.findall(text):
        span = span.strip()
        if cues.ERROR_LINE.match(span) or cues.ERROR_CODE.match(span) or cues.LOG_LINE.match(span):
            return True
    return False
