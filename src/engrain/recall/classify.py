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

* a message made only of acknowledgements, laughter and emoji is trivial;
* debugging is recognised by its symptoms (hangs, 500s, OOM, timeouts, flaky, slow, exit
  codes, "doesn't work", things arriving out of order, output quoted after "I get" or
  "traps with"), not by the words "error" and "bug" — which, in a question about a fact
  ("which error tracker do we use?"), name a topic, not a problem;
* generation is a request to produce or change something, however it is phrased:
  an imperative ("Cover … with tests", "Let users …"), a need ("We need …", "Users want …")
  or a requirement ("The form should …");
* continuation is an opener ("and…", "what about…", "same for…") or a leading anaphor
  ("does that…", "it should…") at any turn after the first;
* code or a debugging word alone no longer makes a message complex: debugging, analysis and
  multi-file work do, as the seed's table says — except a pasted error line or a tool's
  error quoted on one line ("npm ci fails: ERESOLVE …"; simple: its known fix) and a
  one-line question about a snippet (moderate);
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
from engrain.recall.trivial import SHORT, greets, is_trivial


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

_TOKEN = re.compile(r"[a-z][a-z0-9.+#-]*[a-z0-9+#]|[a-z]")

#: An acknowledgement in front of the real message ("ok, and …", "thanks! now …").
_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey|yo|ok|okay|k|cool|great|good|nice|perfect|awesome|thanks|thank you|"
    r"thx|ty|np|sure|yes|yep|yeah|alright|right|well|hmm+|haha|lol|got it|i see|makes sense|"
    r"fair enough|wait|ah|oh)\b"
    r"[\s,.!:;\-—–]*|[^\w\s`'\"/({\[<#@$~.-]+\s*)+",
    re.IGNORECASE,
)

# -- code and history ------------------------------------------------------------------------

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

# -- debugging: symptoms, and the words that only name a topic in a question about a fact --

#: Output quoted right after the verb that reports it ("I get `cannot borrow …`", "traps with
#: `all fuel consumed …`"): what a failure printed, not the user's code (a symptom, and
#: quoted output to :func:`_quotes_output`); not a question or a condition ("do we get
#: `None` back …?", "if you get `EAGAIN` …").
_REPORTED_OUTPUT = re.compile(
    r"\b(?:(?<!do )(?<!did )(?<!if )(?<!when )(?<!would )(?<!will )(?<!can )(?<!could )"
    r"(?:i|we|they|you) (?:get|got|keep getting|kept getting|am getting|'m getting|"
    r"are getting|'re getting)|"
    r"(?:traps?|trapped|panics?|panicked|dies|died|crashe[sd]|fails?|failed|errors? out|"
    r"exits?|exited|aborts?|aborted) with):?\s*`",
    re.IGNORECASE,
)
_SYMPTOM = re.compile(
    r"\b(?:debug\w*|troubleshoot\w*|diagnos\w+|investigat\w+|root[- ]cause|"
    r"hang|hangs|hanging|hung|stuck|freezes|freezing|froze|frozen|deadlock\w*|race condition|"
    r"crash\w*|segfault\w*|core dump|panic\w*|traceback|stack ?trace|"
    r"oom\w*|out of memory|memory leak|leak(?:s|ing|ed)?|killed|sigkill|sigsegv|"
    r"crashloopbackoff|exit(?:s|ed)? (?:with )?(?:code|status) \d+|exit (?:code|status) \d+|"
    r"times? out|timed out|timing out|timeouts|"
    r"(?:returning|returns|returned|throwing|throws|threw|getting|got|gives|giving) "
    r"(?:an? |some |lots of |random )?(?:[45]\d\d|[45]xx)s?|[45]\d\ds|[45]xx|"
    r"fail|fails|failed|failing|failure|failures|flak\w+|intermittent\w*|"
    r"broken|breaks|broke|"
    r"(?:doesn'?t|does not|isn'?t|is not|aren'?t|are not|not|stopped|won'?t|can'?t|cannot|"
    r"couldn'?t|never) (?:work\w*|start\w*|load\w*|build\w*|compil\w+|connect\w*|run\w*|"
    r"render\w*|respond\w*|trigger\w*|fire|fires|show\w*|updat\w+|sav\w+|finish\w*)|"
    r"(?:goes|went|turns?|becomes?) (?:to )?nan|nans?\b|"
    r"(?:returns?|returning|gives?|giving|produces?|producing|shows?|showing) (?:an? |the )?"
    r"(?:empty|wrong|none|null|nothing|duplicate\w*|incorrect|stale)|"
    r"wrong|incorrect|unexpected\w*|duplicate (?:rows|entries|records|events|emails|charges)|"
    r"off[- ]by[- ]one|"
    r"slow|slower|slowly|sluggish|takes (?:forever|ages|\d+ ?(?:s|sec|secs|seconds|min|"
    r"mins|minutes|hours))|used to (?:be|work)|"
    r"(?:an?|the|this|that|same|weird|strange|getting|get|got|throws?|raises?|raised|see|"
    r"seeing|hit|hitting) (?:\w+ )?(?:error|exception)s?(?! (?:log|tracker|handl|message|code|"
    r"page|rate|budget|type|format|boundar|report|track|monitor))|exceptions?|"
    r"errors? (?:when|on|in|"
    r"after|while|with|from|at)|warnings? (?:when|on|in|after|while|about)|"
    r"redirect(?:ed|s)? (?:in )?(?:a )?loop|infinite loop|"
    r"(?:a|an|one|two|\d+) (?:day|hour|minute|week|month)s? (?:early|late|off|behind|ahead)|"
    r"too (?:early|late)|too good to be true|stall\w*|sitting at|"
    r"(?:kicked|logged|signed|thrown|bounced) (?:back|out)|"
    r"since (?:this morning|yesterday|last night|this week|(?:mon|tues|wednes|thurs|fri|"
    r"satur|sun)day)|"
    r"(?:seems|seem|looks|look|is|are) (?:\w+ )?(?:suspicious|fishy|off)\b|"
    r"(?:doesn'?t|does not|don'?t) add up|can'?t be right|"
    r"(?:been|is|are|keeps?|kept) \w+ing (?:\w+ ){0,4}?for \d+ ?(?:minutes|mins|hours|hrs|days)|"
    r"but (?:\S+ ){0,8}?still|zombie\w*|preempt\w*|evicted|"
    r"(?:keeps?|kept) (?!asking|going|saying|telling|coming|bringing|wanting|suggesting|"
    r"pushing|talking|thinking)\w+ing|"
    r"throttl\w+|(?:lose|loses|losing|lost) (?:all |the |its |their |some )?(?:data|progress|"
    r"messages|events|rows|records|state|connection|track)|"
    r"(?:unable to|fails to|failed to|isn'?t|aren'?t|wasn'?t|weren'?t) \w+ing\b|unable to|"
    r"(?:is|are) missing|missing (?:the|a|an|some|rows|data|values|records|events)|"
    r"(?:higher|lower|worse|bigger|smaller|more|less|fewer) than expected|"
    r"denied|forbidden|refused|rejects|rejected|rejecting|unauthori[sz]ed|mismatch\w*|corrupt\w*|"
    r"garbled|truncated|blank page|nothing happens|diverg\w+|explod\w+|overfit\w*|leakage|"
    r"(?<!\bi )(?<!\bwe )(?:didn'?t|did not|no longer) \w+|"
    r"(?:twice|two times|three times|several times|multiple times|\d+ times)"
    r"(?! (?:a|per|an|each) )|skips|skipping|skipped|"
    r"(?:came|come|comes|coming|turned|turns) out (?:as |to be )?(?:\w+ )?(?:zero|zeros|empty|"
    r"null|nan|negative|wrong|different)|exactly zero|"
    r"(?:gives?|giving|returns?|returning|produces?|producing|shows?) (?:me )?(?:\S+ ){1,4}?"
    r"instead of|"
    r"stopped (?:being )?\w+(?:ed|ing)|a gap in|gaps in|"
    r"even though (?:nobody|no one|we|i|it) (?:\w+ )?(?:touched|changed|didn'?t|never|hasn'?t)|"
    r"how (?:that|this|it) (?:could|can|would|might) (?:have )?happen(?:ed)?|"
    r"(?:points?|%|percent|x|times) (?:worse|lower|higher|slower|bigger) than|"
    r"all (?:zeros?|nans?|nulls?|nones?|empty)|(?:is|are) (?:always )?(?:zero|null|empty)\b|"
    r"(?:dropped|jumped|spiked|doubled|halved|tripled|regressed|went (?:up|down)) "
    r"(?:\S+ ){0,4}?(?:after|since)|"
    r"(?:since|after) (?:the |our |last |\w+'s )?(?:deploy|release|upgrade|update|migration|"
    r"merge|bump|rollout)\w*|"
    r"how (?:do|can|should|would) (?:i|we|you) (?:fix|debug|solve|resolve|get rid of)|"
    r"(?:shows?|showing|showed|arrives?|arriving|arrived|comes?|coming|came|lands?|landed|"
    r"ends?|ended) (?:up )?(?:in |being )?out of order|"
    r"(?:traps|trapped|trapping) (?:with|on|when|whenever|after|at|as soon as))\b"
    r"|\w+(?:Error|Exception):",
    re.IGNORECASE,
)
_ERROR_CLASS = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Violation|Fault)\b")
#: Words that mean a problem when someone reports it, and only a topic in a question
#: about a fact ("what was the fix for the login bug?", "which error tracker do we use?").
_PROBLEM_WORD = re.compile(
    r"\b(?:fix\w*|bugs?|buggy|errors?|issues?|problems?|regression\w*|timeout)\b", re.I
)
_FACT_QUESTION = re.compile(
    r"^(?:what(?:'s| is| was| are| were| does| do)?|which|where|who|whom|whose|when|"
    r"is there|are there|how (?:do|does|did) (?:we|i|you|they) (?:log|track|report|handle|"
    r"name|store|show|surface|alert))\b",
    re.IGNORECASE,
)
#: "why does this …" about code in the message asks why the code misbehaves.
_WHY_CODE = re.compile(r"^why (?:does|is|do|are|did|would|doesn'?t|isn'?t) (?:this|my|it)\b", re.I)
_REPAIR = re.compile(
    r"^(?:fix|debug|resolve|solve|investigate|diagnose|troubleshoot|find out why|"
    r"figure out why|look into|track down)\b",
    re.IGNORECASE,
)

# -- generation: a request to produce or change something ----------------------------------

_POLITE = (
    r"^(?:(?:please|pls|kindly|can you|could you|would you|will you|can u|could u|"
    r"can we|could we|let'?s|i need you to|i want you to|i'?d like you to|help me|"
    r"go ahead and|quickly|just|now|then|also|and)[\s,]+)*"
)
_GENERATION_VERB = re.compile(
    _POLITE + r"(?:write|create|implement|generate|build|add|make|scaffold|draft|refactor|"
    r"convert|port|rename|extract|cover|set up|setup|wire|hook up|update|change|replace|"
    r"remove|delete|drop|move|split|merge|rewrite|migrate|introduce|expose|support|extend|"
    r"bump|upgrade|downgrade|translate|produce|sketch|give me|gimme|show me how to|plot|chart|"
    r"redo|"
    r"visuali[sz]e|train|fit|compute|calculate|load|parse|deprecate|enable|disable|allow|"
    r"let(?!'s\b)|swap|switch|clean up|tidy|format|document|annotate|integrate|configure|schedule|"
    r"automate|send|store|save|persist|cache|emit|track|validate|sanitize|normalize|"
    r"dedupe|deduplicate|backfill|seed|mock|stub|insert|append|prepend|wrap|limit|cap|"
    r"give|turn|put|attach|hide|show|run|rerun|re-run|kick off|launch|trigger|backtest|"
    r"paginate|sort|group|filter|aggregate|export|import|install|pin|vectorize|tokenize|"
    r"encode|impute|resample|retrain|tune|optimi[sz]e|speed up|shorten|simplify|"
    r"rework|restructure|reorganize|inline|prepare|fill|fetch|scrape|ship|publish|"
    r"release|deploy|roll out|provision|spin up)\b",
    re.IGNORECASE,
)
#: An explicit request for analysis names the intent, even about a misbehaviour.
_EXPLAIN = re.compile(
    r"(?:^|(?<=[,;:]\s))"
    + _POLITE[1:]
    + r"(?:explain|analy[sz]e|understand|walk me through|compare|review|evaluate|assess|audit|"
    r"(?:give me|gimme) (?:an? |the |a short )?(?:[\w-]+ )?(?:picture|overview|rundown|"
    r"breakdown|walkthrough|tour))\b",
    re.IGNORECASE,
)
_NEED = re.compile(
    r"^(?:(?:need|want) (?:a|an|some|to)\b|"
    r"(?:users?|customers?|clients?|people|admins?|the team|product|the pm|pm|marketing|"
    r"sales|support|ops|finance|they)\s+(?:\w+\s+)?(?:need|needs|want|wants|would like|"
    r"'d like|asked for|requested|should be able to|must be able to|expect)"
    r"|it would be (?:nice|great|good|useful|handy|helpful) (?:if|to)"
    r"|can (?:we|i) (?:get|have|add)\b"
    r"|(?:we|i)(?:'d|\s+would)?\s*(?:really\s+|also\s+|still\s+|now\s+)?(?:need|want|like|love)\s+"
    r"(?:a|an|some|the ability|support|to be able|(?:to\s+)?(?:write|create|implement|"
    r"generate|build|add|make|set up|support|have|get|expose|ship|store|send|track|export|"
    r"import|migrate|replace|remove|rename|move|split|refactor|automate|plot|train|"
    r"compute)\b))",
    re.IGNORECASE,
)
#: Someone named wants something ("Priya wants a small table every Monday …").
_NAMED_NEED = re.compile(
    r"^[A-Z][a-z]+(?: and [A-Z][a-z]+)?(?:'s team)? (?:really )?(?:wants|needs|asked for|"
    r"asked me for|would like|requested)\b"
)
#: A request ending in "please" ("… Snowflake SQL please").
_PLEASE = re.compile(r"\b(?:please|pls|plz)\s*[.!]*$", re.I)
_REQUIREMENT = re.compile(
    r"^(?:the|our|this|each|every|all|a|an)\s+(?:[\w/.`'-]+\s+){0,5}?(?:should|must|"
    r"needs to|has to|ought to)\s+(?:also\s+|always\s+|now\s+|only\s+)?(?!be\b|have been\b)"
    r"[a-z]+",
    re.IGNORECASE,
)

# -- analysis, discussion, question, continuation --------------------------------------------

_ANALYSIS = re.compile(
    r"\b(?:why|analy[sz](?:e|es|ed|ing)|analysis of|explain\w*|compare|comparison|comparing|"
    r"review|evaluate|"
    r"assess\w*|audit|trade-?offs?|pros and cons|understand|walk me through|"
    r"what(?:'s| is| are) the difference|difference between|versus|vs\.?|better than|"
    r"better (?:fit|option|choice|approach|bet)|"
    r"which (?:is|one is|would be) better|is it worth|worth it|does it make sense|"
    r"should (?:we|i) (?:use|go with|pick|choose|switch|move|migrate|adopt|keep|prefer)|"
    r"significan(?:t|ce)|correlat\w+|interpret\w*|implications?|justify|rationale|"
    r"anything suspicious|sanity[- ]check|(?:impact|effect|effects|influence) of|"
    r"what (?:caused|causes|drove|drives|explains)|cause of|contribut\w+ to)\b",
    re.IGNORECASE,
)
_DISCUSSION = re.compile(
    r"^(?:i think|i'?m thinking|i was thinking|i feel|i don'?t (?:love|like|think)|"
    r"i reckon|i guess|kinda|part of me|hot take|unpopular opinion|random thought|"
    r"(?:i'?ve |we'?ve )?been thinking|just thinking|"
    r"i (?:like|love|prefer|hate|wonder)|i'?m (?:leaning|not sure|wondering|torn)|"
    r"honestly|imo|imho|personally|not sure (?:if|whether)|let'?s (?:talk|discuss|chat|"
    r"think)|thoughts on|any thoughts|what do you think|how do you feel|"
    r"(?:it|that) (?:feels|seems)|maybe we|we (?:could|might)|i'?d rather|i'?m not a fan|"
    r"not (?:convinced|sure|a fan))\b",
    re.IGNORECASE,
)
_DISCUSSION_ANYWHERE = re.compile(
    r"\b(?:thoughts\s*\?|any thoughts|on the fence|torn between|wdyt|tbh|imo|imho|"
    r"not convinced|tempted to|(?:floated|pitched|raised) (?:the idea|going|moving|switching|"
    r"dropping|adding|replacing)|(?:is|would) it be (?:crazy|overkill|silly|a good idea)|"
    r"how do (?:you|we) feel|what do you think|your take|(?:do|would) you agree|"
    r"back and forth|where do you (?:land|stand)|maybe it'?s time|opinions\s*\?|overkill|"
    r"premature|more trouble than|what do (?:we|you|people|folks) think|random idea|"
    r"wondering (?:if|whether)|useful,? or|"
    r"(?:we'?re|i'?m|we are|i am) (?:debating|discussing|considering|weighing|wondering|"
    r"thinking about|not sure)|\w+ (?:suggests|suggested|proposes|proposed) )",
    re.IGNORECASE,
)
_QUESTION = re.compile(
    r"\?\s*$|^(?:what|whats|how|hows|when|where|wheres|who|whos|whom|which|whose|is|are|do|"
    r"does|did|can|could|would|will|should|has|have|remind me|quick q)\b",
    re.IGNORECASE,
)
_CONTINUATION = re.compile(
    r"^(?:and|also|plus|then|next|now|so|what about|how about|what if|"
    r"same|do the same|the same for|continue|go on|"
    r"keep going|carry on|more|another|one more|what else|anything else|ok and)\b",
    re.IGNORECASE,
)
#: A follow-up that leans on the previous turn: its subject is a pronoun ("it should also
#: …", "does that apply …", "why?"). "this"/"these" are left out: they usually point at
#: code pasted in the same message.
#: "the weekly one too?", "for the EU as well?"
_ALSO_THIS = re.compile(r"\b(?:too|as well|then)\s*[?.!]*$", re.IGNORECASE)
_ANAPHORA = re.compile(
    r"^(?:(?:does|do|did|is|are|was|were|will|would|can|could|should|shouldn'?t|"
    r"why|how|what|where|when)\s+){0,2}(?:it|that|those|they|them|the same)\b"
    r"|^(?:why|how|how so|really|where|when|which|how come|for what)\s*\?*$",
    re.IGNORECASE,
)

# -- complexity ------------------------------------------------------------------------------

_DEEP = re.compile(
    r"\b(?:architecture|architect\w*|system design|design (?:of|for) the|overall|"
    r"(?:entire|whole|full|complete)[- ](?:\w+ )?(?:(?:and|&) \w+ )?(?:system|codebase|project|"
    r"pipeline|app|stack|platform|flow|path|process|lifecycle|chain|journey|design|data model|"
    r"infrastructure|infra)|end[- ]to[- ]end|"
    r"how everything fits|big picture|roadmap|"
    r"from (?:\S+ ){1,3}(?:all the way )?to (?:\S+ ){0,3}(?:production|prod)(?: \w+)?)\b",
    re.IGNORECASE,
)
_MULTI_FILE = re.compile(
    r"\b(?:across (?:all |every |the |our )?\w+|every (?:service|module|file|endpoint|"
    r"provider|repo|package|notebook|handler|model|table|component|import|caller|call ?site|"
    r"usage)|all (?:the |our )?"
    r"(?:services|modules|files|endpoints|providers|repos|packages|notebooks|handlers|"
    r"models|tables|components|call ?sites|imports|callers|usages)|codebase|monorepo|"
    r"multiple files|several files|everywhere|throughout)\b",
    re.IGNORECASE,
)
_QUICK = re.compile(r"\b(?:quick(?:ly)?|briefly|short answer|just tell me|quick q)\b", re.I)
_RATIONALE = re.compile(r"^(?:(?:explain|tell me|remind me) )?why\b", re.I)
#: A choice between alternatives or one of ours ("instead of", "and not", "we chose").
_CHOICE = re.compile(
    r"\b(?:we|our|instead of|rather than|and not|but|over (?:a|an|the|\w+ for))\b", re.I
)
#: A question about a procedure or a mechanism ("how do I …", "how does X decide …", "what's
#: the best way …"), unlike one about a fact ("how many …", "where's …").
_HOW_TO = re.compile(
    r"^(?:how (?!many|much|long|often|big|old|far|come)|where (?:do|can|should) (?:i|we) "
    r"(?:get|find|obtain|request|download|pull)|what(?:'s| is) the (?:best|right|recommended|"
    r"preferred|proper|correct|easiest|safest|usual) way|what should (?:i|we) do|"
    r"what do (?:i|we) do (?:when|if|about|with)|(?:the )?steps to|"
    r"what(?:'s| is| are) the (?:process|procedure|steps) (?:for|to)\b)\b",
    re.I,
)
_ERROR_LINE = re.compile(
    r"^(?:[A-Z]\w* )?[\w.]*(?:Error|Exception|Warning|Violation|Fault)\b:?"
    r"|^(?:[\w.-]+:\s*)?(?:ERROR|FATAL|CRITICAL)\b"
    r"|^(?:[\w.-]+:\s*)?(?i:error|fatal|critical|panic)(?:\[\w+\])?:"
    r"|^[a-z_]\w*(?:\.\w+)+:\s"
)
#: A tool's failure quoted after the verb that reports it ("terraform apply fails with
#: `Error acquiring the state lock`", "npm ci fails: ERESOLVE …"): an error line with the
#: command in front, asking for its known fix.
_QUOTED_ERROR = re.compile(
    r"\b(?:fails?|failed|failing|says|shows|errors? out|throws|threw|raises|raised|hangs at|"
    r"stuck at|exits? with|dies with|crashes with)\b(?: with)?[^`\n]*?(?:`[^`\n]+`|:\s*\S)",
    re.I,
)
#: What runs beyond one snippet (and who meets its failures: users, customers): a failure
#: there needs the project's whole picture.
_SYSTEM = re.compile(
    r"\b(?:job|jobs|endpoint|endpoints|service|services|pipeline|prod|production|staging|"
    r"deploy\w*|release|container|pod|pods|dag|queue|worker|workers|cluster|ci|cron|server|"
    r"traceback|database|migration|users|customers)\b",
    re.IGNORECASE,
)
#: A verb right after the opening word(s): they were the subject ("build step is failing").
_SUBJECT_VERB = re.compile(
    r"(?:\s+[\w./-]+){0,2}?\s+(?:has|have|had|is|are|was|were|keeps|kept|started|stopped|"
    r"takes|took|seems|looks|fails|failed|hangs|hung|crashes|crashed|returns|returned|throws|"
    r"threw|broke|won'?t|doesn'?t|didn'?t|isn'?t|aren'?t|wasn'?t)\b",
    re.I,
)
#: A request about the previous answer ("could you redo that with generics", "turn that into
#: a module"): at any turn after the first, it continues the thread.
_REDO = re.compile(
    _POLITE + r"(?:re\w+|turn|do|make|change|convert|split|put|move|rewrite|wrap|port) "
    r"(?:that|it|those|them|this one)\b",
    re.I,
)
#: Several parts listed ("a local store, a sync queue, conflict handling and the endpoints"):
#: a task of many pieces.
_ENUMERATION = re.compile(r"(?:[^,]+,){2,}[^,]*\band\b|(?:[^,]+,){3,}")
#: A question about how to do something, whatever failure it mentions ("how do I roll back
#: prod if the release turns out to be broken?"), unless it asks how to fix one.
_PROCEDURE = re.compile(
    r"^(?:how (?:do|can|should|would|could) (?:i|we|you|one)|what(?:'s| is) the (?:best|right|"
    r"recommended|preferred|proper|correct|easiest|safest|safe|usual) way)\b"
    r"(?!\s+(?:fix|debug|solve|resolve|get rid of|stop|prevent|troubleshoot|diagnose)\b)",
    re.I,
)
#: Deliberation opening a message: a discussion, whatever symptom it mentions in passing.
_DELIBERATE = re.compile(
    r"^(?:thoughts on|any thoughts|not sure (?:if|whether|the|that|we|it|about)|"
    r"i'?m (?:torn|on the fence|not convinced|not sure)|what do you think|"
    r"maybe (?:we|it'?s time)|we keep going back and forth)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: A question about the way to do something, anywhere in a sentence ("…, what's the safe
#: way to get it in?"): a statement of need followed by it asks how, not for the work.
_ASKS_HOW = re.compile(
    r"(?:^|[,;:]\s*)(?:how (?:do|can|should|would) (?:i|we|you)|what(?:'s| is) the (?:best|"
    r"right|recommended|preferred|proper|correct|easiest|safest|safe|usual) way)\b",
    re.I,
)
#: A follow-up that revises what was just produced ("same plot but only …", "what would
#: the sbatch line look like …"): a development task like the one it continues.
_REVISE = re.compile(
    r"\b(?:look like|same \w+ but|but (?:only|with|without|for)|keep the|instead)\b", re.I
)
#: A follow-up asking for the same work again on something else ("now do the same for the
#: orders table", "same but in typescript", "do the rest of the files the same way", "also
#: the other two endpoints", "same fix for the SHT40 path"; not "same question for …"): the
#: development task it continues, once more.
_REPEAT_WORK = re.compile(
    r"\b(?:do the same|same (?:\w+ )?but|(?:the )?same (?:(?!question|answer)\w+ )?for|"
    r"the same way|the rest of|the other (?:two|three|four|\d+) \w+)",
    re.I,
)
#: Restructuring a whole unit ("port the feature pipeline from pandas to polars", "refactor
#: the billing module so …", "convert the training script to …"): the seed's multi-file work.
_RESTRUCTURE = re.compile(
    _POLITE + r"(?:port|convert|refactor|rewrite|migrate|split|restructure|rework) "
    r"(?:the|our|all|all the|all our) (?:[\w-]+ ){0,3}?(?:module|pipeline|script|service|app|"
    r"package|layer|codebase|job|dag|notebook|client|library|backend|frontend|monolith|"
    r"project)s?\b",
    re.I,
)
#: A question asking for the way or the command to do something ("is there a way to run
#: the tests without the board", "need the command to rotate the cert"): a procedure.
#: A question about how a thing is set up, in the passive ("How is the internal flash
#: partitioned?", "how are secrets injected into the pods?"): a fact about one part, like
#: the seed's simple "What port does this run on?", not a procedure someone follows ("how
#: are we supposed to rotate the keys?").
_HOW_IT_IS = re.compile(
    r"^how (?:is|are|was|were) (?!(?:i|we|you|they|one)\b)(?:[\w-]+ ){1,4}?[a-z]+(?:ed|en)\b",
    re.I,
)
_WAY_TO = re.compile(
    r"^(?:is there (?:a|an|any) (?:way|command|script|flag|option|trick) to|"
    r"(?:i |we )?(?:need|want) the (?:command|steps|script|way) to)\b",
    re.I,
)
#: What a list of parts does not count: parentheses and quotes ("a table (id, name, at)",
#: 'format days ("1 day", "12 days")') detail one part.
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\"[^\"]*\"|'[^'\s][^']*'")
#: A request to explain how one mechanism works or what something does ("explain how the
#: cache invalidation works", "explain the retry semantics of our outbox table", "explain
#: what this terraform does"): the how-question about a mechanism, asked as a request.
_EXPLAIN_MECHANISM = re.compile(
    _POLITE + r"explain (?:to me )?(?:how|what|the)\b(?! (?:reason|cause|root))", re.I
)
#: A walk along a path through the system, from one end to the other ("what happens from
#: the moment a user taps Pay until the receipt email goes out"): end to end.
_JOURNEY = re.compile(
    r"\b(?:what happens|goes|travels|flows|gets?) (?:\S+ ){0,3}?from (?:\S+ ){1,8}?"
    r"(?:until|till|all the way to|to) ",
    re.I,
)
#: A review of a design written down ("review RFC 0019 against our plugin API rules", "assess
#: the design doc for the new scheduler"): the seed's deep "Review this system design".
_DESIGN_REVIEW = re.compile(
    _POLITE + r"(?:review|assess|evaluate|critique|audit) (?:the |this |our |my |a )?"
    r"(?:[\w-]+ ){0,2}?(?:rfcs?|adrs?|design docs?|design documents?|design proposals?|"
    r"designs?|proposals?|specs?)\b",
    re.I,
)
#: A question about what a thing does, whose verb names an analysis ("What does the
#: semver-checks job compare a PR against?"): a fact about that thing, not a request to
#: compare or review.
_WHAT_IT_DOES = re.compile(
    r"^what (?:does|do|did|will|would) (?:(?!why\b)[\w.`'/-]+ ){1,4}?(?:compare[sd]?|review[sd]?|"
    r"evaluate[sd]?|assess(?:es)?|audit[sd]?|check[sd]?)\b",
    re.I,
)
#: A request whose product is one line or one small piece ("give me a regex that …", "a
#: bash one-liner to …", "write the docstring for …", "add type hints to …"): a single
#: concept, the seed's simple.
_SMALL_PIECE = re.compile(
    _POLITE + r"(?:write|give me|gimme|add|generate|make|create|draft|need|want)\s+"
    r"(?:me\s+)?(?:a|an|the|some)?\s*(?:[\w-]+\s+)?(?:regex(?:es)?|regexp|one-?liners?|"
    r"docstrings?|type hints?|type annotations?)\b",
    re.I,
)
#: An error code opening the message ("SSL: CERTIFICATE_VERIFY_FAILED when …",
#: "CrashLoopBackOff on the new pods", "ECONNREFUSED from …"): a pasted error line.
_ERROR_CODE = re.compile(
    r"^(?:[\w.-]+:\s*)?(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|E[A-Z]{4,}|"
    r"(?:CrashLoop|ImagePull|ErrImage)\w*|OOMKilled)\b"
)
#: What follows a tool's reporting verb and its colon ("Build fails: error[E0502]: …").
_QUOTED_AFTER = re.compile(
    r"\b(?:fails?|failed|failing|says|shows|errors? out|throws|threw|raises|raised|"
    r"exits? with|dies with|crashes with)(?: with)?:\s*"
)
#: A tool's log line quoted inline ("`smp: request timed out (seq 3)`", "`selftest: sht40
#: delta 1.8C > 0.3C`"): a lowercase tool name, a colon, then words, not code (no "=", ";" or
#: braces: "`if: github.ref == 'refs/heads/main'`" is a line of a workflow).
_LOG_LINE = re.compile(r"^[a-z][\w.-]*: [a-z][a-z0-9]* [a-z][a-z0-9]*\b(?!.*[=;{}])")
_BLOCK_BODY = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.S)
_INLINE_SPAN = re.compile(r"`([^`\n]+)`")
#: The signals of a message asking for analysis or for code in the seed's own words
#: ("explain", "analyze", "review" …; "write", "create", "implement" opening a request): its
#: intent is not a guess, so no second opinion changes it (:data:`DECIDED`).
ASKS_ANALYSIS = "asks for analysis"
ASKS_WRITING = "asks to write"
DECIDED = frozenset({ASKS_ANALYSIS, ASKS_WRITING})
_WRITE = re.compile(_POLITE + r"(?:write|create|implement)\b", re.I)
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
    tokens = _TOKEN.findall(text.lower())
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
            stems = tuple(_stem(t) for t in _TOKEN.findall(keyword.lower()))
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
    if is_trivial(text):
        intent = Intent.GREETING if greets(text) else Intent.DISCUSSION
        fired.append("trivial_phrase")
        return Classification(Complexity.TRIVIAL, intent, (), turn, False, False, tuple(fired))

    has_code = bool(_CODE_BLOCK.search(text) or _INLINE_CODE.search(text))
    history = bool(_HISTORY.search(text))
    domains = domains_of(text, vocabulary)
    if has_code:
        fired.append("code")
    if history:
        fired.append("history_reference")
    if turn > 5:
        fired.append("turn>5")
    body = _LEAD.sub("", text, count=1) or text
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
    has_code = bool(_CODE_BLOCK.search(text) or _INLINE_CODE.search(text))
    body = _LEAD.sub("", text, count=1) or text
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
    symptom = bool(
        _SYMPTOM.search(text)
        or _ERROR_CLASS.search(text)
        or _ERROR_LINE.match(text)
        or ("`" in text and _REPORTED_OUTPUT.search(text))
    )
    if symptom:
        fired.append("symptom")
    if turn > 0 and (
        _CONTINUATION.match(body) or _ANAPHORA.match(body) or _ALSO_THIS.search(body)
        or _REDO.match(body)
    ):
        fired.append("follow-up")
        # a follow-up that reports a new symptom is a bug report; one that asks about a
        # failure ("what if the retry fails?") continues the thread
        reported = symptom and not body.rstrip().endswith("?")
        return Intent.DEBUGGING if reported else Intent.CONTINUATION
    if _REPAIR.match(body):
        return Intent.DEBUGGING
    if _EXPLAIN.search(body):
        fired.append(ASKS_ANALYSIS)
        return Intent.ANALYSIS
    if _PROCEDURE.match(body):
        fired.append("procedure")  # "how do I roll back if the release is broken?"
        return Intent.QUESTION
    if _DELIBERATE.match(body):
        fired.append("deliberation")  # "not sure the monorepo still makes sense, builds …"
        return Intent.DISCUSSION
    ask = _final_question(body)
    need = _NEED.match(body) or _NAMED_NEED.match(body)
    if _request(body) or (need and not _ASKS_HOW.search(ask)):
        if _WRITE.match(body):
            fired.append(ASKS_WRITING)
        return Intent.GENERATION
    if ask and not symptom and _request(ask):
        fired.append("request in the final question")
        return Intent.GENERATION
    if symptom or (has_code and _WHY_CODE.match(body)):
        return Intent.DEBUGGING
    if _REQUIREMENT.match(body) or (_PLEASE.search(body) and not _QUESTION.search(body)):
        return Intent.GENERATION
    if _PROBLEM_WORD.search(text) and not _FACT_QUESTION.match(body):
        fired.append("problem word")
        return Intent.DEBUGGING
    if _DISCUSSION.match(body) or _DISCUSSION_ANYWHERE.search(body):
        return Intent.DISCUSSION
    # a question about a fact states its intent first; what follows is context ("who owns
    # payments? need someone to review a refund PR")
    opening = _first_sentence(body) if _FACT_QUESTION.match(body) else body
    does = _WHAT_IT_DOES.match(opening)
    if does:
        fired.append("what it does")  # the verb is the thing's, not a request for analysis
        opening = opening[does.end() :]
    if _ANALYSIS.search(opening):
        return Intent.ANALYSIS
    if _QUESTION.search(body):
        # how a whole system or lifecycle works is analysis (the seed: deep = architecture,
        # analysis), not a question about one fact or procedure
        return Intent.ANALYSIS if _DEEP.search(body) else Intent.QUESTION
    if greets(text):
        return Intent.GREETING
    return Intent.DISCUSSION


def _request(text: str) -> bool:
    """Whether ``text`` opens with a request verb used as one: "make snapshot has been
    running for 3 hours" names a command, it does not ask to make anything."""
    found = _GENERATION_VERB.match(text)
    return found is not None and not _SUBJECT_VERB.match(text, found.end())


def _first_sentence(body: str) -> str:
    """The first sentence of ``body``."""
    return _SENTENCE_END.split(body.strip(), maxsplit=1)[0]


def _final_question(body: str) -> str:
    """The last sentence of a message of several when it is a question ("I need an index on
    a 40M-row table. What's the safe way to get it in?"), else "": what such a message asks
    is its final question."""
    sentences = _SENTENCE_END.split(body.strip())
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
    length = len(text)
    jargon = has_technical_term(text) or len(domains) >= 2
    if jargon:
        fired.append("jargon")
    deep = bool(_DEEP.search(text))
    if intent is Intent.GENERATION and (deep or _ENUMERATION.search(_ASIDE.sub(" ", _prose(text)))):
        fired.append("many parts")  # building a whole flow is complex work, not a design
        return Complexity.COMPLEX
    if intent is Intent.GENERATION and not has_code and _RESTRUCTURE.match(body):
        fired.append("restructure")
        return Complexity.COMPLEX
    if intent is Intent.ANALYSIS and _JOURNEY.search(text):
        deep = True  # a path from one end of the system to the other
    if intent is Intent.ANALYSIS and _DESIGN_REVIEW.match(body):
        deep = True  # the seed's "Review this system design"
    if deep or (intent is Intent.ANALYSIS and length > LONG):
        fired.append("architecture")
        return Complexity.DEEP
    if intent is Intent.DEBUGGING:
        return _debugging_complexity(text, has_code, fired)
    if intent is Intent.DISCUSSION:
        return Complexity.COMPLEX if length > LONG else Complexity.MODERATE
    if _MULTI_FILE.search(text):
        fired.append("multi-file")
        return Complexity.COMPLEX
    if length > LONG:
        fired.append("long")
        return Complexity.COMPLEX
    if intent is Intent.ANALYSIS:
        if _RATIONALE.match(body) and _CHOICE.search(body):
            fired.append("rationale")  # the answer is one recorded decision
            return Complexity.MODERATE
        if _EXPLAIN_MECHANISM.match(body):
            fired.append("mechanism")  # how one part works: a how-question as a request
            return Complexity.MODERATE
        return Complexity.COMPLEX
    if intent is Intent.GENERATION and _SMALL_PIECE.match(body):
        fired.append("small piece")  # one line or one small piece: a single concept
        return Complexity.SIMPLE
    if intent in (Intent.GENERATION, Intent.DISCUSSION):
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and (_REVISE.search(body) or _produces(body)):
        fired.append("revision")
        return Complexity.MODERATE
    if intent is Intent.CONTINUATION and _REPEAT_WORK.search(body) and not _asks(body):
        fired.append("repeat the work")
        return Complexity.MODERATE
    if _QUICK.search(text):
        fired.append("quick")
        return Complexity.SIMPLE
    asks_how = (_HOW_TO.match(body) or _WAY_TO.match(body)
                or _ASKS_HOW.search(_final_question(body) or _first_sentence(body)))
    if intent is Intent.QUESTION and asks_how and _HOW_IT_IS.match(body):
        fired.append("how it is")  # a fact about how a thing is set up, not a procedure
    elif intent is Intent.QUESTION and asks_how:
        fired.append("how-to")  # a procedure: the golden path and its pitfalls
        return Complexity.MODERATE
    if length < SHORT:
        fired.append("short")
        return Complexity.SIMPLE
    return Complexity.SIMPLE if length <= ONE_LINE else Complexity.MODERATE


#: A follow-up telling what to do next to what was built ("now do the WASM side of it too",
#: "also handle the empty case"), not a question ("do those run in parallel?").
_DO_PART = re.compile(
    r"(?:do|handle) (?:the|it|that|this|those|these)\b(?! (?:same|rest)\b)", re.I
)
_OPENERS = re.compile(r"^(?:(?:and|also|then|now|so|ok|okay|next|plus|but)\b[\s,]*)+", re.I)
_CODE_SPAN = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.S)


def _asks(body: str) -> bool:
    """Whether ``body`` is a question (ends with "?")."""
    return body.rstrip().endswith("?")


def _produces(body: str) -> bool:
    """Whether a follow-up asks to produce or change something, in any of its sentences
    ("now add tests for it", "Go with option 2 then. write it up")."""
    for sentence in _SENTENCE_END.split(body.strip()):
        rest = _OPENERS.sub("", sentence, count=1)
        if _request(rest) or _REDO.match(rest) or (_DO_PART.match(rest) and not _asks(rest)):
            return True
    return False


def _prose(text: str) -> str:
    """``text`` without its code blocks and inline code."""
    return _CODE_SPAN.sub(" ", text)


def _debugging_complexity(text: str, has_code: bool, fired: list[str]) -> Complexity:
    """A pasted error line alone asks for its known fix; a snippet that misbehaves is a
    local problem; a system that misbehaves (a job, an endpoint, a pipeline, a test run)
    is complex, as the seed says."""
    if "\n" not in text and (_ERROR_LINE.match(text) or _ERROR_CODE.match(text)):
        fired.append("error line")
        return Complexity.SIMPLE
    quoted = _QUOTED_AFTER.search(text)
    if "\n" not in text.strip() and quoted and _ERROR_LINE.match(text[quoted.end():]):
        fired.append("quoted error")  # "Build fails: error[E0502]: …", however long
        return Complexity.SIMPLE
    if "\n" not in text.strip() and len(text) <= ONE_LINE and _QUOTED_ERROR.search(text):
        fired.append("quoted error")  # "npm ci fails: ERESOLVE …": an error line with its tool
        return Complexity.SIMPLE
    prose = _prose(text)
    if has_code and len(prose) <= SNIPPET and not _SYSTEM.search(prose):
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
    code block that is an error line ("error[E0277]: …", "java.lang.IllegalStateException: …"),
    a span right after the verb reporting it ("I get `cannot borrow …`", "traps with `…`"),
    or an inline span that is an error line or a tool's log line ("`smp: request timed out`")."""
    for block in _BLOCK_BODY.findall(text):
        for line in block.splitlines():
            if _ERROR_LINE.match(line.strip()) or _ERROR_CODE.match(line.strip()):
                return True
    if _REPORTED_OUTPUT.search(text):
        return True
    for span in _INLINE_SPAN.findall(text):
        span = span.strip()
        if _ERROR_LINE.match(span) or _ERROR_CODE.match(span) or _LOG_LINE.match(span):
            return True
    return False
