"""The cues :mod:`engrain.recall.classify` reads in a message: compiled patterns only.

Each pattern is one signal of the seed's complexity and intent tables, or one shape the
labelled messages showed (``tests/test_classify.py``): an acknowledgement in front of the
message, a code block, a reported symptom, a request phrased as a need, a continuation's
opener, a design review, a pasted error line. The rules that weigh them stay in
:mod:`engrain.recall.classify`; these are module-level constants, compiled once and only
read, so any number of threads may use them at once.
"""

from __future__ import annotations

import re

TOKEN = re.compile(r"[a-z][a-z0-9.+#-]*[a-z0-9+#]|[a-z]")

#: An acknowledgement in front of the real message ("ok, and …", "thanks! now …").
LEAD = re.compile(
    r"^(?:(?:hi|hello|hey|yo|ok|okay|k|cool|great|good|nice|perfect|awesome|thanks|thank you|"
    r"thx|ty|np|sure|yes|yep|yeah|alright|right|well|hmm+|haha|lol|got it|i see|makes sense|"
    r"fair enough|wait|ah|oh)\b"
    r"[\s,.!:;\-—–]*|[^\w\s`'\"/({\[<#@$~.-]+\s*)+",
    re.IGNORECASE,
)

# -- code and history ------------------------------------------------------------------------

CODE_BLOCK = re.compile(r"```|~~~|^( {4}|\t)\S", re.MULTILINE)
INLINE_CODE = re.compile(
    r"`[^`\n]+`|\b[A-Za-z_]\w*\([^)]*\)|=>|::|\b(?:def|class|const|let|var|fn|func)\s+\w+\s*[(=:<{]"
    r"|^\s*(?:import|from)\s+\w+|[{};]\s*$",
    re.MULTILINE,
)
HISTORY = re.compile(
    r"\b(?:we|our|us|before|earlier|previously|last time|as (?:we|i) (?:discussed|said|"
    r"mentioned)|remember|again|you said|i told you|we talked)\b",
    re.IGNORECASE,
)

# -- debugging: symptoms, and the words that only name a topic in a question about a fact --

#: Output quoted right after the verb that reports it ("I get `cannot borrow …`", "traps with
#: `all fuel consumed …`"): what a failure printed, not the user's code (a symptom, and
#: quoted output to :func:`_quotes_output`); not a question or a condition ("do we get
#: `None` back …?", "if you get `EAGAIN` …").
REPORTED_OUTPUT = re.compile(
    r"\b(?:(?<!do )(?<!did )(?<!if )(?<!when )(?<!would )(?<!will )(?<!can )(?<!could )"
    r"(?:i|we|they|you) (?:get|got|keep getting|kept getting|am getting|'m getting|"
    r"are getting|'re getting)|"
    r"(?:traps?|trapped|panics?|panicked|dies|died|crashe[sd]|fails?|failed|errors? out|"
    r"exits?|exited|aborts?|aborted) with):?\s*`",
    re.IGNORECASE,
)
SYMPTOM = re.compile(
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
    r"(?:kicked|logged|signed|thrown|bounced) (?:back|out)|bounced with|"
    r"(?:can'?t|cannot|couldn'?t|won'?t) get (?:\w+ed|\w+ed (?:in|up|on))\b|"
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
    r"(?:is|are|was|were|'s|'re) (?:all |now |just )?missing|"
    r"disappeared|vanished|went missing|wiped (?:out|clean)|"
    r"missing (?:the|a|an|some|rows|data|values|records|events)|"
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
ERROR_CLASS = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Violation|Fault)\b")
#: A behaviour reported with the condition it shows under — when it happens ("resets every
#: time the CO2 measurement starts", "jump back to 1970 after every reset", "restarts every
#: couple of minutes"), where ("red only on Windows", "but only on our biggest pages",
#: "returns NotFound, but only sometimes") or where it does not ("… the debug build on the
#: same board is fine", "Linux builds of the same site are fine") — or a thing that stays
#: as it was ("the page just stays stale", "the build just ignores it"): how someone who
#: met a bug tells it, in any project, without the words "error" or "bug". In a statement
#: only, with no question in it: a question asks about the condition ("does it run only on
#: weekdays?", "why stripe tax and not our own vat tables? marta says ours were fine").
REPRO = re.compile(
    r"\b(?:every time|each time|after every|(?:but )?only (?:sometimes|on|when|"
    r"after|from)|(?:is|are|was|were) (?:all |totally |perfectly )?fine|works? fine|"
    # the others that behave ("only MVH, the other sites look right"): the contrast names
    # where the behaviour shows, as "the other build is fine" does
    r"(?:the )?(?:other|rest of the) (?:[\w-]+ ){0,2}(?:look|looks|seem|seems) "
    r"(?:fine|right|normal|correct|ok|okay)|"
    r"just (?:stays|ignores|hangs|sits|dies|keeps)|every (?:couple|few) (?:of )?(?:seconds|"
    r"minutes|hours|days))\b",
    re.IGNORECASE,
)
#: The names of a problem ("bugs", "an error", "the regression", "a timeout"): a report
#: of one in a short reply ("errors again", "timeout again") as in a message
#: (:data:`PROBLEM_WORD`, ``open_work``).
PROBLEM_NAMES = r"bugs?|buggy|errors?|issues?|problems?|regression\w*|timeout"
#: Words that mean a problem when someone reports it, and only a topic in a question
#: about a fact ("what was the fix for the login bug?", "which error tracker do we use?"):
#: the names of a problem and the "fix" family.
PROBLEM_WORD = re.compile(rf"\b(?:fix\w*|{PROBLEM_NAMES})\b", re.I)
#: A failure named as a kind of thing in a question ("does a failing model page anyone?",
#: "what happens to any failed job?"): a topic, like "which error tracker", not a report.
FAILING_KIND = re.compile(
    r"\b(?:a|an|any|every|each)\s+(?:failing|failed|broken|flaky)\s+\w+", re.I
)
FACT_QUESTION = re.compile(
    r"^(?:what(?:'s| is| was| are| were| does| do)?|which|where|who|whom|whose|when|"
    r"is there|are there|how (?:do|does|did) (?:we|i|you|they) (?:log|track|report|handle|"
    r"name|store|show|surface|alert))\b",
    re.IGNORECASE,
)
#: "why does this …" about code in the message asks why the code misbehaves.
WHY_CODE = re.compile(r"^why (?:does|is|do|are|did|would|doesn'?t|isn'?t) (?:this|my|it)\b", re.I)
REPAIR = re.compile(
    r"^(?:fix|debug|resolve|solve|investigate|diagnose|troubleshoot|find out why|"
    r"figure out why|look into|track down)\b",
    re.IGNORECASE,
)

# -- generation: a request to produce or change something ----------------------------------

POLITE = (
    r"^(?:(?:please|pls|kindly|can you|could you|would you|will you|can u|could u|"
    r"can we|could we|let'?s|i need you to|i want you to|i'?d like you to|help me|"
    r"go ahead and|quickly|just|now|then|also|and)[\s,]+)*"
)
GENERATION_VERB = re.compile(
    POLITE + r"(?:write|create|implement|generate|build|add|make|scaffold|draft|refactor|"
    r"convert|port|rename|extract|cover|set up|setup|wire|hook up|update|change|replace|"
    r"remove|delete|drop|move|split|merge|rewrite|migrate|introduce|expose|support|extend|"
    r"bump|upgrade|downgrade|translate|produce|sketch|give me|gimme|show me how to|plot|chart|"
    r"redo|design|architect|"
    r"visuali[sz]e|train|fit|compute|calculate|load|parse|deprecate|enable|disable|allow|"
    r"let(?!'s\b)|swap|switch|clean up|tidy|format|document|annotate|integrate|configure|schedule|"
    r"automate|send|store|save|persist|cache|emit|track|validate|sanitize|normalize|"
    r"dedupe|deduplicate|backfill|seed|mock|stub|insert|append|prepend|wrap|limit|cap|"
    r"give|turn|put|attach|hide|show|run|rerun|re-run|kick off|launch|trigger|backtest|"
    r"paginate|sort|group|filter|aggregate|export|import|install|pin|vectorize|tokenize|"
    r"encode|impute|resample|retrain|tune|optimi[sz]e|speed up|shorten|simplify|"
    r"rework|restructure|reorganize|inline|prepare|fill|fetch|scrape|ship|publish|"
    r"release|deploy|roll out|provision|spin up|"
    # "Let's have Config::validate() reject …", "let's have a fish function that …": a
    # request, not "let's have a look / a chat" (session 21: quill, brightfall)
    r"(?:(?<=let's )|(?<=lets ))have(?! a (?:look|chat|call|talk|think|go|quick look)\b))\b",
    re.IGNORECASE,
)
#: An explicit request for analysis names the intent, even about a misbehaviour. A verb
#: joined by a hyphen is part of a name, not the request ("audit-svc backlog keeps
#: growing", "review-bot is down").
EXPLAIN = re.compile(
    r"(?:^|(?<=[,;:]\s))"
    + POLITE[1:]
    + r"(?:explain|analy[sz]e|understand|walk me through|compare|review|evaluate|assess|audit|"
    r"(?:give me|gimme) (?:an? |the |a short )?(?:[\w-]+ )?(?:picture|overview|rundown|"
    r"breakdown|walkthrough|tour))\b(?!-)",
    re.IGNORECASE,
)
NEED = re.compile(
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
NAMED_NEED = re.compile(
    r"^[A-Z][a-z]+(?: and [A-Z][a-z]+)?(?:'s team)? (?:really )?(?:wants|needs|asked for|"
    r"asked me for|would like|requested)\b"
)
#: A request ending in "please" ("… Snowflake SQL please").
PLEASE = re.compile(r"\b(?:please|pls|plz)\s*[.!]*$", re.I)
REQUIREMENT = re.compile(
    r"^(?:the|our|this|each|every|all|a|an)\s+(?:[\w/.`'-]+\s+){0,5}?(?:should|must|"
    r"needs to|has to|ought to)\s+(?:also\s+|always\s+|now\s+|only\s+)?(?!be\b|have been\b)"
    r"[a-z]+",
    re.IGNORECASE,
)

# -- analysis, discussion, question, continuation --------------------------------------------

ANALYSIS = re.compile(
    r"\b(?:why|analy[sz](?:e|es|ed|ing)|analysis of|explain\w*|compare|comparison|comparing|"
    r"review|evaluate|"
    r"assess\w*|audit|trade-?offs?|pros and cons|understand|walk me through|"
    r"what(?:'s| is| are) the difference|difference between|versus|vs\.?|better than|"
    r"better (?:fit|option|choice|approach|bet)|"
    r"which (?:is|one is|would be) better|does it make sense|"
    r"should (?:we|i) (?:use|go with|pick|choose|switch|move|migrate|adopt|keep|prefer)|"
    r"significan(?:t|ce)|correlat\w+|interpret\w*|implications?|justify|rationale|"
    r"anything suspicious|sanity[- ]check|(?:impact|effect|effects|influence) of|"
    r"what (?:caused|causes|drove|drives|explains)|cause of|contribut\w+ to)\b|"
    # the risks of a change asked: weighing it, as "trade-offs" and "pros and cons" are
    r"\bwhat(?:'s| is| are) the (?:main |biggest |real )?(?:risks?|downsides?|drawbacks?|"
    r"dangers?)(?: (?:of|in|with|if)\b|(?=\s*\?))",
    re.IGNORECASE,
)
DISCUSSION = re.compile(
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
DISCUSSION_ANYWHERE = re.compile(
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
QUESTION = re.compile(
    r"\?\s*$|^(?:what|whats|how|hows|when|where|wheres|who|whos|whom|which|whose|is|are|do|"
    r"does|did|can|could|would|will|should|has|have|remind me|quick q)\b",
    re.IGNORECASE,
)
CONTINUATION = re.compile(
    r"^(?:and|also|plus|then|next|now|so|what about|how about|what if|"
    r"same|do the same|the same for|continue|go on|"
    r"keep going|carry on|more|another|one more|what else|anything else|ok and)\b",
    re.IGNORECASE,
)
#: A follow-up that leans on the previous turn: its subject is a pronoun ("it should also
#: …", "does that apply …", "why?"). "this"/"these" are left out: they usually point at
#: code pasted in the same message.
#: "the weekly one too?", "for the EU as well?"
ALSO_THIS = re.compile(r"\b(?:too|as well|then)\s*[?.!]*$", re.IGNORECASE)
ANAPHORA = re.compile(
    r"^(?:(?:does|do|did|is|are|was|were|will|would|can|could|should|shouldn'?t|"
    r"why|how|what|where|when)\s+){0,2}(?:it|that|those|they|them|the same)\b"
    r"|^(?:why|how|how so|really|where|when|which|how come|for what)\s*\?*$",
    re.IGNORECASE,
)

# -- complexity ------------------------------------------------------------------------------

DEEP = re.compile(
    r"\b(?:architecture|architect\w*|system design|design (?:of|for) the|overall|"
    r"(?:entire|whole|full|complete)[- ](?:\w+ )?(?:(?:and|&) \w+ )?(?:system|codebase|project|"
    r"pipeline|app|stack|platform|flow|path|process|lifecycle|chain|journey|design|data model|"
    r"infrastructure|infra)|end[- ]to[- ]end|"
    r"how everything fits|big picture|roadmap|"
    r"from (?:\S+ ){1,3}(?:all the way )?to (?:\S+ ){0,3}(?:production|prod)(?: \w+)?)\b",
    re.IGNORECASE,
)
MULTI_FILE = re.compile(
    r"\b(?:across (?:all |every |the |our )?\w+|every (?:service|module|file|endpoint|"
    r"provider|repo|package|notebook|handler|model|table|component|import|caller|call ?site|"
    r"usage)|all (?:the |our )?"
    r"(?:services|modules|files|endpoints|providers|repos|packages|notebooks|handlers|"
    r"models|tables|components|call ?sites|imports|callers|usages)|codebase|monorepo|"
    r"multiple files|several files|everywhere|throughout)\b",
    re.IGNORECASE,
)
QUICK = re.compile(r"\b(?:quick(?:ly)?|briefly|short answer|just tell me|quick q)\b", re.I)
RATIONALE = re.compile(r"^(?:(?:explain|tell me|remind me) )?why\b", re.I)
#: A choice between alternatives or one of ours ("instead of", "and not", "we chose").
CHOICE = re.compile(r"\b(?:we|our|instead of|rather than|and not)\b", re.I)
#: A contrast that names a choice only in a "why" without a verb of its own ("why anyhow in
#: the binary crate but thiserror in the library crate"); after "why does / is …" it
#: contrasts behaviours ("look great offline but awful in the A/B test", "creeping up over a
#: long session"): a problem to analyse, not a recorded decision.
CONTRAST = re.compile(r"\b(?:but|over (?:a|an|the|\w+ for))\b", re.I)
WHY_VERB = re.compile(
    r"^(?:(?:explain|tell me|remind me) )?why (?:does|do|is|are|did|was|were|would|has|have|"
    r"doesn'?t|don'?t|isn'?t|aren'?t)\b",
    re.I,
)
#: A note passing on one piece of news ("fyi the GA4 export gets switched off end of March",
#: "heads up, the migration starts next week"): the seed's simple, a single concept.
NOTE = re.compile(r"^(?:fyi|f\.y\.i\.?|heads[- ]up|psa|just so you know)\b", re.I)
#: A request to write one unit of code ("Write a function that slugifies a name, lowercase,
#: dashes, max 60 chars", "Write a Go table-driven test for …: 0s, 15s, 3 min and 20 min"):
#: the seed's moderate "Write a function to validate email", however many cases it lists.
ONE_UNIT = re.compile(
    POLITE + r"(?:write|implement|add|create|generate|draft|make|give me|gimme)\s+(?:me\s+)?"
    r"(?:a|an|the|one)\s+(?:[\w#.+-]+\s+){0,4}?(?:function|method|hook|test|unit test|fixture|"
    r"struct|class|enum|type|serializer|migration|script|query|expectation suite|test suite|"
    r"regex|regexp|one-?liner|docstring)\b"
    r"(?!\s+(?:and|&)\s+(?:a|an|the)\s)",
    re.I,
)
#: A question about a procedure or a mechanism ("how do I …", "how does X decide …", "what's
#: the best way …"), unlike one about a fact ("how many …", "where's …").
HOW_TO = re.compile(
    r"^(?:how (?!many|much|long|often|big|old|far|come)|where (?:do|can|should) (?:i|we) "
    r"(?:get|find|obtain|request|download|pull)|what(?:'s| is) the (?:best|right|recommended|"
    r"preferred|proper|correct|easiest|safest|usual) way|what should (?:i|we) do|"
    r"what do (?:i|we) do (?:when|if|about|with)|(?:the )?steps to|"
    r"what(?:'s| is| are) the (?:process|procedure|steps) (?:for|to)\b)\b",
    re.I,
)
ERROR_LINE = re.compile(
    r"^(?:[A-Z]\w* )?[\w.]*(?:Error|Exception|Warning|Violation|Fault)\b:?"
    r"|^(?:[\w.-]+:\s*)?(?:ERROR|FATAL|CRITICAL)\b"
    r"|^(?:[\w.-]+:\s*)?(?i:error|fatal|critical|panic)(?:\[\w+\])?:"
    r"|^[a-z_]\w*(?:\.\w+)+:\s"
)
#: What runs beyond one snippet (and who meets its failures: users, customers): a failure
#: there needs the project's whole picture.
SYSTEM = re.compile(
    r"\b(?:job|jobs|endpoint|endpoints|service|services|pipeline|prod|production|staging|"
    r"deploy\w*|release|container|pod|pods|dag|queue|worker|workers|cluster|ci|cron|server|"
    r"traceback|database|migration|users|customers)\b",
    re.IGNORECASE,
)
#: A verb right after the opening word(s): they were the subject ("build step is failing").
SUBJECT_VERB = re.compile(
    r"(?:\s+[\w./-]+){0,2}?\s+(?:has|have|had|is|are|was|were|keeps|kept|started|stopped|"
    r"takes|took|seems|looks|fails|failed|hangs|hung|crashes|crashed|returns|returned|throws|"
    r"threw|broke|won'?t|doesn'?t|didn'?t|isn'?t|aren'?t|wasn'?t)\b",
    re.I,
)
#: A request about the previous answer ("could you redo that with generics", "turn that into
#: a module"): at any turn after the first, it continues the thread.
REDO = re.compile(
    POLITE + r"(?:re\w+|turn|do|make|change|convert|split|put|move|rewrite|wrap|port) "
    r"(?:that|it|those|them|this one)\b",
    re.I,
)
#: Several parts listed ("a local store, a sync queue, conflict handling and the endpoints"):
#: a task of many pieces.
ENUMERATION = re.compile(r"(?:[^,]+,){2,}[^,]*\band\b|(?:[^,]+,){3,}")
#: A question about how to do something, whatever failure it mentions ("how do I roll back
#: prod if the release turns out to be broken?"), unless it asks how to fix one.
PROCEDURE = re.compile(
    r"^(?:how (?:do|can|should|would|could) (?:i|we|you|one)|what(?:'s| is) the (?:best|right|"
    r"recommended|preferred|proper|correct|easiest|safest|safe|usual) way)\b"
    r"(?!\s+(?:fix|debug|solve|resolve|get rid of|stop|prevent|troubleshoot|diagnose)\b)",
    re.I,
)
#: Deliberation opening a message: a discussion, whatever symptom it mentions in passing.
DELIBERATE = re.compile(
    r"^(?:thoughts on|any thoughts|not sure (?:if|whether|the|that|we|it|about)|"
    r"i'?m (?:torn|on the fence|not convinced|not sure)|what do you think|"
    r"maybe (?:we|it'?s time)|we keep going back and forth)\b",
    re.I,
)
#: A bare choice between two named options, without a verb or a question mark, said as a
#: musing ("maestro or detox for the e2e suite, honestly", "littlefs or fcb for the backfill
#: index, hmm"): one pick weighed, a single concept. Each option one or two words; what the
#: pick is for after "for", "in" or "on"; a hedge at the end. "X vs Y" asks for a
#: comparison (:data:`ANALYSIS`), not a pick.
CHOICE_OF_TWO = re.compile(
    r"^(?:(?:hmm+|honestly|so|ok),? )?[\w.+#/-]+(?: [\w.+#/-]+)? or "
    r"[\w.+#/-]+(?: [\w.+#/-]+)?(?: (?:for|in|on) (?:the |our |a )?[\w .+#/-]+?)?"
    r"(?:,? (?:honestly|hmm+|tbh|imo|i guess|then))?[\s.!]*$",
    re.I,
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: A question whether a proposal is worth its cost ("Is it worth signing dev builds with a
#: per-developer key?", "Tomasz wants … over MQTT as well. Worth it?", "Would it be worth
#: moving the facade onto …?"): a judgement asked on a proposal, a discussion for every writer
#: of the labelled sets (7 of the 8 such questions; "evaluate whether … is worth the money"
#: asks for analysis in the seed's own verb, :data:`EXPLAIN`).
WORTH = re.compile(
    r"\b(?:(?:is|would|will) (?:it|that|this) (?:\w+ )?(?:be )?worth|worth it)\b", re.I
)
#: A question about the way to do something, anywhere in a sentence ("…, what's the safe
#: way to get it in?"): a statement of need followed by it asks how, not for the work.
ASKS_HOW = re.compile(
    r"(?:^|[,;:]\s*)(?:how (?:do|can|should|would) (?:i|we|you)|what(?:'s| is) the (?:best|"
    r"right|recommended|preferred|proper|correct|easiest|safest|safe|usual) way)\b",
    re.I,
)
#: A follow-up that revises what was just produced ("same plot but only …", "what would
#: the sbatch line look like …"): a development task like the one it continues.
REVISE = re.compile(
    r"\b(?:look like|same \w+ but|but (?:only|with|without|for)|keep the|instead)\b", re.I
)
#: A follow-up asking for the same work again on something else ("now do the same for the
#: orders table", "same but in typescript", "do the rest of the files the same way", "also
#: the other two endpoints", "same fix for the SHT40 path"; not "same question for …"): the
#: development task it continues, once more.
REPEAT_WORK = re.compile(
    r"\b(?:do the same|same (?:\w+ )?but|(?:the )?same (?:(?!question|answer)\w+ )?for|"
    r"the same way|the rest of|the other (?:two|three|four|\d+) \w+)",
    re.I,
)
#: A hypothetical put on the thread ("what if the watchdog is the thing that hangs", "ok and
#: what if the old primary never comes back?"): a consequence to explain, not a fact to look
#: up (the second reading's rule: a follow-up asking to explain or "what if" is moderate).
WHAT_IF = re.compile(r"what if\b", re.I)
#: A follow-up naming one more piece of work for what was just built ("ok now the tests for
#: it", "and the test for it?", "docs for that"): a request to write, whatever its verb.
WORK_FOR_IT = re.compile(
    r"(?:the |a |some )?(?:unit |integration |e2e )?(?:tests?|specs?|docs?|benchmarks?|"
    r"migrations?|changelog(?: entry)?)\s+(?:for|of)\s+(?:it|that|this|them|those)\b",
    re.I,
)
#: Restructuring a whole unit ("port the feature pipeline from pandas to polars", "refactor
#: the billing module so …", "convert the training script to …"): the seed's multi-file work.
RESTRUCTURE = re.compile(
    POLITE + r"(?:port|convert|refactor|rewrite|migrate|split|restructure|rework) "
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
HOW_IT_IS = re.compile(
    r"^how (?:is|are|was|were) (?!(?:i|we|you|they|one)\b)(?:[\w-]+ ){1,4}?[a-z]+(?:ed|en)\b",
    re.I,
)
WAY_TO = re.compile(
    r"^(?:is there (?:a|an|any) (?:way|command|script|flag|option|trick) to|"
    r"(?:i |we )?(?:need|want) the (?:command|steps|script|way) to)\b",
    re.I,
)
#: What a list of parts does not count: parentheses and quotes ("a table (id, name, at)",
#: 'format days ("1 day", "12 days")') detail one part.
ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\"[^\"]*\"|'[^'\s][^']*'")
#: A request to explain what one thing is or does ("explain the retry semantics of our
#: outbox table", "explain what this terraform does", "explain the difference between …"):
#: the meaning of one part, asked as a request. Not "explain how …": how a process runs
#: through the parts ("explain how the incremental cache decides what to rebuild", "explain
#: how a late web event still ends up in fct_web_events") is the seed's complex analysis, as
#: every project's writer labels it (5 of 5; session 21).
EXPLAIN_MECHANISM = re.compile(
    POLITE + r"explain (?:to me )?(?:what|the)\b(?! (?:reason|cause|root))", re.I
)
#: A walk along a path through the system, from one end to the other ("what happens from
#: the moment a user taps Pay until the receipt email goes out", "everything that happens
#: between a player pressing Find Match and being in a server"): end to end.
JOURNEY = re.compile(
    r"\b(?:what happens|goes|travels|flows|gets?) (?:\S+ ){0,3}?from (?:\S+ ){1,8}?"
    r"(?:until|till|all the way to|to) |"
    r"\b(?:what|everything that|all that) happens between (?:\S+ ){1,8}?and ",
    re.I,
)
#: How something changed over the project's whole history ("how has our latency moved over
#: the last two years", "how the calling … changed since the first version"): the seed's
#: deep analysis — the whole, walked through in time as :data:`JOURNEY` walks it in space.
#: A recent span ("since the last release", "over the past week") is one change, not the
#: history.
HISTORY_WALK = re.compile(
    r"\b(?:changed|moved|evolved|developed|grown|shifted)\b(?:\s+\S+){0,6}?\s+(?:since "
    r"(?:the )?(?:first|start|beginning|day one|launch)\b|(?:over|in) (?:the )?(?:last|past) "
    r"(?:\w+ )?(?:years?|decade)\b)",
    re.I,
)
#: A review of a design written down ("review RFC 0019 against our plugin API rules", "assess
#: the design doc for the new scheduler"): the seed's deep "Review this system design".
DESIGN_REVIEW = re.compile(
    POLITE + r"(?:review|assess|evaluate|critique|audit) (?:the |this |our |my |a )?"
    r"(?:[\w-]+ ){0,2}?(?:rfcs?|adrs?|design docs?|design documents?|design proposals?|"
    r"designs?|proposals?|specs?)\b",
    re.I,
)
#: A question about what a thing does, whose verb names an analysis ("What does the
#: semver-checks job compare a PR against?"): a fact about that thing, not a request to
#: compare or review.
WHAT_IT_DOES = re.compile(
    r"^what (?:does|do|did|will|would) (?:(?!why\b)[\w.`'/-]+ ){1,4}?(?:compare[sd]?|review[sd]?|"
    r"evaluate[sd]?|assess(?:es)?|audit[sd]?|check[sd]?)\b",
    re.I,
)
#: A request whose product is one line or one small piece ("give me a regex that …", "a
#: bash one-liner to …", "regex that matches our staging model names", "write the docstring
#: for …", "add type hints to …"): a single concept, the seed's simple.
SMALL_PIECE = re.compile(
    POLITE + r"(?:(?:write|give me|gimme|add|generate|make|create|draft|need|want)\s+"
    r"(?:me\s+)?)?(?:a|an|the|some)?\s*(?:[\w-]+\s+)?(?:regex(?:es)?|regexp|one-?liners?|"
    r"docstrings?|doc ?comments?|type hints?|type annotations?)\b",
    re.I,
)
#: An error code opening the message ("SSL: CERTIFICATE_VERIFY_FAILED when …",
#: "CrashLoopBackOff on the new pods", "ECONNREFUSED from …"): a pasted error line.
ERROR_CODE = re.compile(
    r"^(?:[\w.-]+:\s*)?(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|E[A-Z]{4,}|"
    r"(?:CrashLoop|ImagePull|ErrImage)\w*|OOMKilled)\b"
)
#: A tool's reporting verb and its colon, before the error it quotes ("Build fails:
#: error[E0502]: …", "gradle sync failed: Could not resolve …").
QUOTED_AFTER = re.compile(
    r"\b(?:fails?|failed|failing|says|shows|errors? out|throws|threw|raises|raised|"
    r"exits? with|dies with|crashes with)(?: with)?:\s*"
)
#: A tool's log line quoted inline ("`smp: request timed out (seq 3)`", "`selftest: sht40
#: delta 1.8C > 0.3C`"): a lowercase tool name, a colon, then words, not code (no "=", ";" or
#: braces: "`if: github.ref == 'refs/heads/main'`" is a line of a workflow).
LOG_LINE = re.compile(r"^[a-z][\w.-]*: [a-z][a-z0-9]* [a-z][a-z0-9]*\b(?!.*[=;{}])")
#: The time a log line opens with ("02:41:07  Database Error in model …", "[2026-01-12
#: 03:14:07] ERROR …"): what follows is a failure's output when it is an error line.
LOG_TIME = re.compile(r"^\[?\d{2,4}[-:/]\d{2}[-:/T\d.,:+Z ]*\]?\s+")
#: A tool's output quoted right after the verb reporting it ("matchd says `allocation
#: failed: …`", "the console shows `…`", "it logs `…`").
SAYS_OUTPUT = re.compile(
    r"\b(?:says|said|shows|showed|prints|printed|logs|logged|reports)\s*:?\s*`", re.I
)
BLOCK_BODY = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.S)
INLINE_SPAN = re.compile(r"`([^`\n]+)`")
WRITE = re.compile(POLITE + r"(?:write|create|implement)\b", re.I)
#: A request to design a whole thing, the seed's "Architecture" ("Design and build the whole
#: upgrade feature: …", "design and implement multi-tenant support end to end", "write a
#: design doc for running the billing platform across two regions"): deep, not complex.
DESIGN_WORK = re.compile(
    POLITE + r"(?:design|architect|(?:write|draft) (?:up )?(?:a|an|the) (?:[\w-]+ )?design "
    r"(?:doc|document|proposal))\b",
    re.I,
)
#: A first word that is a request verb in the imperative, capitalised or not, with nothing
#: before it ("Make the manager's cache …", "add a flag for …"); not "give me" or "show":
#: what they hand over decides ("Give me a root-cause style analysis of why …").
IMPERATIVE = re.compile(r"(?!give\b|gimme\b|show\b)" + GENERATION_VERB.pattern[len(POLITE) :], re.I)
#: Things reported gone ("the PVCs are gone, reclaimPolicy was Retain!!"): a failure with
#: no error word, like a job that hangs; a symptom in a statement only, since a question
#: asks what happens once something is gone ("once the old primary is gone, who …?").
GONE = re.compile(r"\b(?:is|are|was|were|'s|'re) (?:all |now |just |suddenly )?gone\b", re.I)
