"""Trivial messages (relevance gating, step 1): acknowledgements, laughter, greetings and
emoji that ask nothing, so they skip memory entirely (budget 0, "trivial: 0 tokens").

A short message (under :data:`SHORT` characters, the seed's "< 50 characters: likely trivial
or simple") is trivial when every word in it acknowledges, laughs, greets or thanks
(:data:`_ACK_WORDS`, in English and a few other languages, also stretched: "yesss"), says
what the user does next and when ("will do", "ok, pushing now", "gonna try it after
lunch") or is a closing phrase whose words
are not all acknowledgements ("thanks for the help!", "+1", "didn't know that", "exactly
what I needed": :data:`_CLOSING`). Two shapes allow one word more,
because what they add asks nothing:

* a **reaction**: laughter (a laughing or face-palm emoji, "lol", "haha") around one other
  word, with no question mark and no number ("classic Windows 😂");
* a **greeting that only says the user is around**: a greeting, then a word of presence
  ("today", "session", "back", "here") and at most one other word, no question mark
  ("hiya, quick session today", "yo, back on pulse today" — the project's name);
* a **report that something is well**: a word of success (:data:`_SUCCESS`: "green",
  "passing", "compiles", or an outcome told in the past, :data:`_WENT_WELL`: "went fine",
  "ran through") and at most one other word, its subject, with no question mark,
  no number and no negation ("nice, CI's green", "tests passing now", "terraform apply
  went through") — like work reported done ("merged!", "fixed"), the state of the project
  after an answer asks nothing; so does a verdict in the present with its subject before it
  ("staging looks good", "the pipeline is green again": :data:`_LOOKS_WELL`); and so does a
  part of the system reported working again — a verb of working in the present or a good
  state, with the word that says it changed ("reminders are flowing again", "the board
  loads fast now", "recon's quiet again": :data:`_WORKS_AGAIN`) — or a state reached by
  repair ("the queue's unstuck": :data:`_REPAIRED`), each read as the word of success it
  means (:func:`_outcomes_read`).

A reply of several clauses is trivial when each clause would be alone and the whole keeps
no work open ("that did it, book's clean", "tests passing, lint green":
:func:`_every_clause_closes`); a greeting may be followed by the session's start ("morning,
let's get going": :data:`_SESSION_START`).

A message whose every word belongs to a closed class that names nothing (an apology, filler,
a function word, a presence check: :mod:`engrain.recall.contentless`) is trivial too ("no
worries at all", "hey, you around?"). Anything else with a question mark, a number in the
extra word, or two unknown words is left to the rest of :mod:`engrain.recall.classify`.

What a reply says of the user rather than of the work (:mod:`engrain.recall.asides`: a
message sent to the wrong chat, small talk, relief, sign-offs and acknowledgements in other
languages, the user's next step with more verbs) is read the same way; a word of working
negated ("no funciona") or an acknowledgement that turns to a new point ("ty, now the
footer") keeps a reply a message.
"""

from __future__ import annotations

import re

from engrain.recall import cues
from engrain.recall.asides import (
    APPROVAL,
    ASIDE,
    NEXT_STEP,
    OTHER_ACKS,
    RADIO,
    SHORTHAND,
    SLANG,
    SMALL_TALK,
    fails_to_work,
    opens_a_point,
)
from engrain.recall.contentless import (
    ASKS_FOR_TIME,
    FILLER,
    FUNCTION_WORDS,
    TIME,
    asks_nothing,
    follows_up,
)
from engrain.recall.open_work import keeps_work_open, negates, selects

SHORT = 50  # the seed's "< 50 characters: likely trivial or simple"
#: Words that name nothing around a verdict: function words, filler, times ("ngl, the
#: build looks green today").
_CLOSED_WORDS = FUNCTION_WORDS | FILLER | TIME

_ACK_WORDS = frozenset(
    [
        "hi", "hello", "hey", "heya", "hiya", "yo", "howdy", "morning", "afternoon", "evening",
        "night", "good", "gm", "gn", "thanks", "thank", "thx", "ty", "tysm", "tyvm", "cheers",
        "appreciated", "appreciate", "much", "so", "a", "lot", "you", "all", "ok", "okay", "k",
        "kk", "cool", "great", "nice", "neat", "sweet", "awesome", "perfect", "excellent",
        "amazing", "brilliant", "wonderful", "wow", "yes", "yep", "yeah", "yup", "ya", "no",
        "nope", "nah", "sure", "right", "alright", "fair", "enough", "exactly", "indeed", "true",
        "got", "it", "gotcha", "that", "this", "works", "worked", "working", "sounds", "looks",
        "makes", "sense", "lgtm", "sgtm", "np", "noted", "done", "bye", "goodbye", "later", "cya",
        "ah", "oh", "aha", "i", "see", "now", "again", "there", "everyone", "lol", "lmao", "rofl",
        "merci", "danke", "gracias", "grazie", "ta", "haha", "hehe", "heh", "love", "one",
        "thankyou", "thanku", "tq", "okie", "oki", "okey", "okies", "alrighty", "aight", "bet",
        "dope", "lovely", "ace", "legend", "fantastic", "super", "splendid", "solid", "well",
        "job", "stuff", "worries", "problem", "nw", "yw", "welcome", "you're", "youre", "my",
        "bad", "oops", "whoops", "phew", "yay", "woo", "woohoo", "hooray", "agreed", "agree",
        "ikr", "omg", "did", "fixed", "solved", "sorted", "set", "helped", "helps", "helpful",
        "very", "really", "just", "needed", "mate", "man", "dude", "buddy", "folks",
        "understood", "clear", "crystal", "roger", "ack", "kthx", "kthxbye", "cheerio", "bravo",
        "that's", "thats", "it's", "its", "that'll", "i'm", "im", "fine", "best", "the", "glad",
        "happy", "help", "rock", "rocks", "nailed", "obliged", "totally",
        # intensifiers of thanks ("thanks a ton", "thanks a bunch", "a million thanks")
        "ton", "tons", "bunch", "heaps", "loads", "lots", "of", "million", "mil", "gazillion",
        "infinitely",
        # coming and going ("on it", "brb", "back again") and work reported done ("shipped
        # it 🎉", "merged!"): nothing asked
        "on", "brb", "afk", "bbl", "omw", "back", "shipped", "merged", "pushed", "landed",
        "deployed", "released",
        # the same work under way ("ok, pushing now", "tagged, thx"): nothing asked either
        "pushing", "merging", "shipping", "deploying", "releasing", "tagging", "tagged",
        # thanks in other languages ("obrigado!", "arigato")
        "obrigado", "obrigada", "arigato", "arigatou", "dank", "je", "vielen", "beaucoup",
        "tack", "takk", "kiitos", "spasibo", "mille", "mahalo", "shukran", "xiexie",
        "schön", "sehr", "muchas", "muito", "muita", "tante", "så", "mycket", "bedankt",
        "hartelijk", "valeu", "tak",
        "dzięki", "dziękuję", "teşekkürler", "köszönöm", "díky", "hvala",
        "спасибо", "благодарю", "谢谢", "多谢", "ありがとう", "감사합니다", "고마워", "شكرا",
        "תודה", "धन्यवाद",
        # "works" in the other languages above ("funktioniert, danke!", "ça marche")
        "funktioniert", "klappt", "marche", "funciona", "funziona", "werkt", "fungerar",
        # interjections that close a point ("bingo", "of course", "that's it then", "classic!")
        "bingo", "touche", "course", "then", "classic", "indeedy",
    ]
)  # fmt: skip
_LAUGH = re.compile(r"^(?:(?:ha)+h?|(?:he)+h?|lo+l|lmf?a+o+|x?d+)$")
#: What the user will do next, said to close a reply ("will do", "ok, trying that now",
#: "let me try it"): nothing asked. Phrases, not words: "do it" or "test it" ask for work.
_NEXT_STEP = re.compile(
    r"\b(?:on it|(?:(?:will|let me|lemme|i'?ll|gonna|going to) (?:do|try|test|check|see)|"
    r"trying|testing|checking)(?: (?:it|that|this))?(?: out)?"
    # and when ("gonna try it after lunch", "will test it tonight"): still nothing asked
    r"(?: (?:after|before) (?:the |my )?[a-z]+| later| tonight| tomorrow| in a bit)?|"
    # a moment asked for ("give me a minute", "wait a sec"): the user is busy, asks nothing
    r"(?:give me|gimme|wait|hold on)(?: a| one)? (?:sec|second|minute|min|moment)s?|"
    # a question withdrawn or answered by the asker ("nvm, figured it out", "found it in
    # the docs"): nothing asked, where the answer was found included
    r"never ?mind|nvm|(?:figured (?:it|that) out|found it)(?: (?:in|on) (?:the|my) [a-z]+)?)\b"
)
#: Closing phrases whose words are not all acknowledgements, said once an answer landed:
#: thanks for something ("thanks for the help!", up to four words, none of which opens a
#: new point: "thanks for the fix but it still fails" keeps "but it still fails"), "+1",
#: something learnt ("didn't know that", "good to know"), an answer that fits ("exactly
#: what I needed"), a fix that held ("that did the trick"), a point taken ("will keep that
#: in mind", "that clears it up"). Phrases, not words: "what", "for", "know" and "mind"
#: alone stay unknown.
_CLOSING = re.compile(
    r"(?<![\w+])\+1\b|"
    r"\b(?:thanks?|thx|ty|cheers|sorry|sory|sry|soz|apologies)(?: you| u)?(?: so much| a lot)? for"
    r"(?: (?!(?:but|and|now|still|though|can|could|would|please|pls|also|why|what|how|"
    r"where|when|which|who)\b)[a-z']+){1,4}|"
    r"\b(?:(?:didn'?t|did not) know (?:that|this)|good to know|til|"
    r"what i (?:needed|wanted|was (?:looking for|after))|"
    # an answer that confirms the user's guess ("yes, that's what i thought")
    r"(?:that'?s|that is|just) what i (?:thought|figured|suspected|expected|guessed|feared|"
    r"was afraid of)|(?:did|does|that'?ll do) the trick|"
    r"(?:(?:will|i'?ll) )?keep (?:that|it|this) in mind|clears? (?:it|that|things) up|"
    r"(?:that|this) explains (?:it|that|a lot|everything)|"
    r"have a (?:good|great|nice|lovely) (?:one|day|night|evening|weekend)|"
    # the radio acknowledgement: "copy that" is "roger", not a request to copy
    r"copy that(?=\W*$))\b"
)
#: A word in any script (letters, digits, apostrophes): a message in Cyrillic or Chinese has
#: words too ("как перезапустить сервер?" asks something), so it is not empty of them.
_WORDS = re.compile(r"(?:[^\W_]|')+")
_REPEATS = re.compile(r"(.)\1{2,}")
#: A stretched ending of an interjection ("ahh", "ohh", "yess", "thxx").
_STRETCHED = re.compile(r"(\w)\1+$")
#: A laughing or face-palm emoji: the message reacts, it does not ask.
_LAUGHING_EMOJI = re.compile(
    "[\U0001f602\U0001f923\U0001f605\U0001f606\U0001f604"
    "\U0001f601\U0001f639\U0001f643\U0001f926\U0001f61c"
    "\U0001f61d\U0001f61b\U0001f92a]"
)
#: Words that only say the user is around, and for how long ("quick session today").
_PRESENCE = frozenset(
    ["today", "tonight", "session", "back", "here", "around", "online", "quick", "short"]
)
#: A greeting opening a message. A time of day greets without "good" when it stands alone
#: or set off by punctuation or before the people greeted ("morning!", "morning, anyone
#: here?", "morning all ☕"), as in any team's chat; before anything else it names a time
#: ("morning standup moved to 10").
_GREETING = re.compile(
    r"^(?:hi|hello|hey|heya|yo|hiya|howdy|gm|good (?:morning|afternoon|evening)|"
    r"(?:morning|afternoon|evening)(?=\W*$|\s*[,!.]|\s+(?:all|everyone|everybody|folks|team|"
    r"y'?all|guys|people)\b))\b",
    re.I,
)
_DIGIT = re.compile(r"\d")
#: The work of a session begun, said after its greeting ("morning, let's get going", "hi,
#: let's get started"): the user is around and about to ask, as "quick session today"
#: says; read as a word of presence only after a greeting and closing the reply. Without
#: the greeting, mid-thread, "let's get going" asks the assistant to go on.
_SESSION_START = re.compile(
    r"\b(?:let'?s|lets) (?:get (?:going|started|to it|cracking|rolling)|"
    r"(?:start|begin|roll|do this)(?: then)?)(?=\W*$)"
)
#: Words saying that something is well: a check that passes, a build that builds.
#: "worked" is an outcome told in the past that went well, as "passed" is ("resume worked,
#: cheers": :func:`_worked`); "works" is not: the present is often half of a report ("works
#: locally").
_SUCCESS = frozenset(
    ["green", "passing", "passes", "passed", "pass", "compiles", "compiled", "builds", "live",
     "worked"]
)  # fmt: skip
#: Something done that went well, told in the past ("the deploy went fine", "terraform
#: apply went through", "worked like a charm", "restart did the trick"): a word of
#: success, as "passed" is, so its subject may come before it. Past tense only: "runs fine
#: locally" is often half of a report ("… but not in CI").
_WENT_WELL = re.compile(
    r"\b(?:(?:went|ran) (?:fine|well|ok|okay|smoothly|through|cleanly|clean)|"
    r"worked like a charm|did the trick)\b"
)
#: A verdict on the state of the work, in the present: a look, a seeming or "is", then an
#: adjective of a good state ("staging looks good", "logs look clean now", "the pipeline is
#: green again", "ngl that's clean"). The user checked and says it is well, as "CI's green"
#: does: nothing asked. Read only with its subject before it and nothing after it but
#: acknowledgements and function words (:func:`_judges_well`): "it looks fine locally"
#: narrows where it holds, often half of a report, as "it runs fine locally" is.
_LOOKS_WELL = re.compile(
    r"^(?P<subject>.*?)(?:\b(?:looks?|looking|seems?|is|are)|(?<=[a-z])'s)\s+"
    r"(?:so |very |really |super |pretty |all |nice and )?"
    r"(?:good|great|fine|clean|healthy|correct|right|green|solid|perfect|stable)\b"
    r"(?P<after>.*)$"
)
#: "is" before a state, contracted too ("the queue's unstuck").
_BE = r"(?:\b(?:is|are)\s+|(?<=[a-z])'(?:s|re)\s+)"
#: The words saying the state changed, one or more, closing the reply.
_CHANGED = r"(?:\s+(?:now|again|finally|at last))"
#: A part of the system reported working again, the reply's outcome (issue 12, session 29):
#: a verb of working in the present — the part does its work ("works", "runs", "loads",
#: "syncs", "flowing") — or a good state after "is", "looks" or "seems" ("quiet", "sane",
#: "snappy"), then a word saying the state changed ("now", "again", "finally"): "loads fast
#: now", "reminders are flowing again", "recon's quiet again". The present needs its marker:
#: "the board loads fast" describes, "… loads fast now" reports the change the last answer
#: made; a one-off act told in the past with "again" repeats ("the cron ran again", "the
#: email sent again": a duplicate), "loading" names a wait, and the bare form is a request
#: ("run again", "sync now"). After "is", a part back at work says the change itself
#: ("staging is back up", "the bot is up and running"). It must end the clause:
#: "it runs fine locally" narrows where it holds, "loads now but …" turns, and a second
#: clause is read by itself (:func:`_every_clause_closes`). Read as the word of success it
#: means, so its subject is judged as any success report's is (:func:`_reports_success`:
#: at most two words, no digit, no negation), unless a problem or a symptom is what works,
#: or a check or a condition comes before it (:func:`_outcomes_read`).
_WORKS_AGAIN = re.compile(
    rf"(?:{_BE}|\b(?:looks?|seems?)\s+)?\b(?:"
    # the part does its work, in the third person or the progressive
    r"(?:works|working|runs|running|loads|flows|flowing|syncs|syncing|sends|sending|"
    r"renders|rendering|boots|connects|connecting|responds|responding|resolves|builds|"
    r"compiles|passes|passing)"
    r"(?:\s+(?:fast|faster|quick|quickly|instantly|fine|ok|okay|well|smoothly|properly|"
    r"correctly|normally|cleanly|clean|perfectly|great))?|"
    # or is in a good state
    r"(?:fast|faster|quick|quicker|snappy|smooth|quiet|sane|happy|normal|stable|clean|fine|"
    rf"good|green|healthy|correct|accurate|consistent|responsive)){_CHANGED}+(?=\W*$)|"
    # a part back at work after "is", which says the change itself ("staging is back up")
    rf"{_BE}(?:back (?:up|online)|up and running|online){_CHANGED}*(?=\W*$)"
)
#: A state reached by repair, after "is" ("the queue is unstuck", "the login bug is fixed
#: now"): the outcome itself, marker or not, and said of a problem it says the problem is
#: gone (where "timeouts are back up" says it returned: :data:`_WORKS_AGAIN`). "is back"
#: alone is left out: "staging is back" and "the lag is back" say the subject returned,
#: good or bad by what it is; so is "out" ("the deploy's out", "the power's out").
_REPAIRED = re.compile(rf"{_BE}(?:fixed|unstuck|unblocked|resolved|restored){_CHANGED}*(?=\W*$)")
#: A problem named or a symptom ("errors", "timeouts", "crashing"): what works again is then
#: the failure ("errors are flowing again").
_PROBLEM = re.compile(rf"\b(?:{cues.PROBLEM_NAMES})\b")
#: A check asked for or a condition set before the outcome ("make sure it works again",
#: "verify the board loads fast now", "once sync works again …"): the state is what the
#: reply asks for or waits on, not what it reports.
_ASKED_BEFORE = re.compile(
    r"\b(?:make sure|ensure|check|verify|confirm|test|see if|see whether|until|unless|once|"
    r"so that|as long as|if|when|whether)\b"
)
#: A second attempt named by its time ("the flaky test passed this time", "worked at last"):
#: it says when, as "now" does, and names nothing.
_THIS_TIME = re.compile(r"\b(?:this time|at last|for once)\b")
#: Words saying that work is done ("merged!", "deployed"): acknowledgements alone, and with
#: the one word naming the work ("switchover done, thanks", "backfill finished") a report
#: that it is done, like "CI's green".
_DONE = frozenset(
    ["done", "finished", "complete", "completed", "shipped", "merged", "pushed", "landed",
     "deployed", "released", "tagged", "fixed", "solved", "sorted"]
)  # fmt: skip
#: Words that turn a report of success around ("not green", "still isn't passing") or ask
#: about it without a question mark ("is it live", "did it pass").
_NEGATION = frozenset(
    ["not", "no", "isn't", "isnt", "aren't", "arent", "never", "still", "yet", "but", "nope",
     "is", "are", "was", "were", "does", "do", "did", "can", "could", "will", "would",
     "should", "why", "how", "what", "when", "where", "which", "who", "if", "whether"]
)  # fmt: skip


#: The signal of a message trivial by the word lists and shapes above.
PHRASE_SIGNAL = "trivial_phrase"
#: The signal of a message trivial because no word of it is a content word
#: (:func:`engrain.recall.contentless.asks_nothing`: "no worries at all", "you around?").
NO_CONTENT_SIGNAL = "trivial: no content word"


def is_trivial(text: str) -> bool:
    """Whether ``text`` (stripped) asks nothing of memory: acknowledgements, laughter,
    greetings, thanks and emoji only, short — or one of the two shapes in the module's
    docstring that allow one word more."""
    return trivial_signal(text) is not None


def trivial_signal(text: str) -> str | None:
    """Why ``text`` is trivial (:data:`PHRASE_SIGNAL` or :data:`NO_CONTENT_SIGNAL`, which
    ``explain()`` shows), or None when it is not."""
    if not text or len(text) >= SHORT:
        return None
    if "?" in text and not _WORDS.search(text):
        return None  # a bare "?" or "??" asks for the last answer again, or explained
    words = words_said(text)
    if follows_up(words, _social) or fails_to_work(_WORDS.findall(text.lower())):
        return None  # "run it"; "no funciona", "ça marche pas": social words, a failure
    if opens_a_point(words, _social):
        return None  # "ty, now the footer": the thanks closes, the rest asks
    unknown = [w for w in words if not _acknowledges(w)]
    if selects(_WORDS.findall(text.lower())):
        return None  # "yes, that one": a pick among what was shown asks for its work
    if not unknown and not (words and FUNCTION_WORDS.issuperset(words)):
        return PHRASE_SIGNAL if "?" not in text or not words else _presence(text, words)
    if asks_nothing(text, words, _acknowledges):
        return NO_CONTENT_SIGNAL
    if "?" in text:
        return None
    one = unknown[0] if len(unknown) == 1 and not _DIGIT.search(unknown[0]) else None
    if one is not None and keeps_work_open(text, words):
        one = None  # "lol what", "haha still": the word more keeps the work open
    if one is not None and (_laughs(text, words) or _praises(text, words, one)):
        return PHRASE_SIGNAL
    shaped = _reports_success(words, unknown) or _greets_being_around(text, unknown)
    if shaped or _judges_well(text, words) or _every_clause_closes(text, words):
        return PHRASE_SIGNAL
    return None


#: What sets a reply's clauses apart: a comma, a semicolon, a full stop, an exclamation
#: mark, a dash between spaces ("that did it, book's clean"; "merged - thanks").
_CLAUSE_BREAK = re.compile(r"[,;.!]+\s*|\s+[-\u2013\u2014]\s+")


def _every_clause_closes(text: str, words: list[str]) -> bool:
    """Whether a reply of several clauses is trivial clause by clause: each would be trivial
    alone ("that did it" and "book's clean"; "tests passing, lint green") and the whole
    keeps no work open (:func:`~engrain.recall.open_work.keeps_work_open`). Each shape above
    reads one clause and its subject; two acknowledgements side by side ask no more than
    each does, and a clause that asks ("the cron ran", "now the footer") keeps the reply a
    message."""
    clauses = [c.strip() for c in _CLAUSE_BREAK.split(text) if _WORDS.search(c)]
    return (
        len(clauses) > 1
        and not keeps_work_open(text, words)
        and all(trivial_signal(c) is not None for c in clauses)
    )


def asks_for_work(text: str) -> bool:
    """Whether the short reply ``text`` asks for work on the turn before
    (:func:`engrain.recall.contentless.follows_up`: "run it", "same thing", "next") or turns
    from an acknowledgement to a new point (:func:`engrain.recall.asides.opens_a_point`:
    "ty, now the footer", "ok but faster"), once the phrases of closing and of the user's
    next step are set aside."""
    words = words_said(text)
    return follows_up(words, _social) or opens_a_point(words, _social)


def words_said(text: str) -> list[str]:
    """The words of ``text`` lower-cased, radio's acknowledgements read as "ack"
    (:data:`engrain.recall.asides.RADIO`: "10-4", "copy all"), stretched letters shortened,
    the session's start after a greeting read as a word of presence (:data:`_SESSION_START`),
    an outcome that went
    well read as the word of success it means (:data:`_WENT_WELL`), the phrases of the
    user's next step and of closing removed (:data:`_NEXT_STEP`, :data:`_CLOSING`,
    :data:`engrain.recall.asides.NEXT_STEP`) and small talk
    (:data:`engrain.recall.asides.SMALL_TALK`), an aside read as an acknowledgement
    (:data:`engrain.recall.asides.ASIDE`: "wrong chat", "my fault", "por fin")."""
    said = _WENT_WELL.sub(" passed ", _REPEATS.sub(r"\1", RADIO.sub(" ack ", text.lower())))
    if greets(said):
        said = _SESSION_START.sub(" here ", said)  # "morning, let's get going"
    said = ASKS_FOR_TIME.sub(" ", _outcomes_read(_THIS_TIME.sub(" now ", said)))
    said = SMALL_TALK.sub(" ", _NEXT_STEP.sub(" ", said))
    if "?" not in said:  # "i'll ask the team?" asks whether to: a question, not a step
        said = APPROVAL.sub(" ack ", NEXT_STEP.sub(" ", said))  # "should we ship it?" asks
    # an aside is itself social ("honestly that's a relief"): it stands as an "ack"
    return _WORDS.findall(ASIDE.sub(" ack ", _CLOSING.sub(" ", said)))


def _outcomes_read(said: str) -> str:
    """``said`` with a state reached by repair (:data:`_REPAIRED`) or a part reported working
    again (:data:`_WORKS_AGAIN`) read as "passed", the word of success they mean — not after
    a check asked for or a condition (:data:`_ASKED_BEFORE`: "make sure it works again"),
    and working again not when a problem or a symptom is named ("errors are flowing again":
    the failure works)."""
    if _ASKED_BEFORE.search(said):
        return said
    said = _REPAIRED.sub(" passed ", said)
    if _WORKS_AGAIN.search(said) is None or _PROBLEM.search(said) or cues.SYMPTOM.search(said):
        return said  # the symptoms' long pattern only where the outcome is said
    return _WORKS_AGAIN.sub(" passed ", said)


def _presence(text: str, words: list[str]) -> str | None:
    """A question made of acknowledgements ("ok?", "sure?", "all good?") asks; only a
    presence check among them ("you there?") asks nothing."""
    return NO_CONTENT_SIGNAL if asks_nothing(text, words, _acknowledges) else None


#: Acknowledgement words that are not social on their own: contractions of a pronoun and
#: "be", verbs and reports of work ("it's", "sounds", "fixed"), answers ("no").
_NOT_SOCIAL = frozenset(
    ["it's", "its", "that's", "thats", "that'll", "i'm", "im", "you're", "youre", "got", "see",
     "works", "worked", "working", "sounds", "looks", "makes", "sense", "did", "set", "help",
     "helped", "helps", "needed", "course", "no", "nope", "nah", "fine", "best", "stuff",
     "job", "well", "love", "rock", "rocks", "exactly", "enough", "agree", "agreed",
     *_DONE, *(w for w in _ACK_WORDS if w.endswith("ing"))]
)  # fmt: skip


def says_something_social(text: str) -> bool:
    """Whether ``text`` holds a word that greets, thanks, acknowledges, praises or laughs
    ("ok", "gracias", "great", "lol"), not just a pronoun, a verb or a report."""
    return any(_social_word(w) for w in _WORDS.findall(_REPEATS.sub(r"\1", text.lower())))


def _social_word(word: str) -> bool:
    """Whether the lower-cased ``word`` greets, thanks, acknowledges, praises or laughs."""
    return _acknowledges(word) and word not in FUNCTION_WORDS and word not in _NOT_SOCIAL


def _social(word: str) -> bool:
    """A word that acknowledges, laughs, greets or thanks, or reports success ("green")."""
    return _acknowledges(word) or word in _SUCCESS or word in _DONE


def _reports_success(words: list[str], unknown: list[str]) -> bool:
    """A word of success or of work done (:data:`_DONE`: "switchover done, thanks"), at
    most one other unknown word (its subject, without a digit) or two side by side before
    it (a compound subject: "redis restart fixed it"), and no negation
    (:func:`~engrain.recall.open_work.negates`, contracted too: "build didn't pass") or
    question word (the caller has ruled out a question mark)."""
    rest = [w for w in unknown if w not in _SUCCESS and w not in _DONE]
    return (
        (len(rest) < len(unknown) or not _DONE.isdisjoint(words) or _worked(words))
        and (len(rest) <= 1 or _compound_subject(words, rest))
        and not any(_DIGIT.search(w) for w in rest)
        and _NEGATION.isdisjoint(words)
        and not any(negates(w) for w in words)  # "build didn't pass", "nothing went through"
    )


def _worked(words: list[str]) -> bool:
    """Whether "worked" has nothing after it that names something ("resume worked,
    cheers"): "it worked on staging" narrows where it held, often half of a report."""
    if "worked" not in words:
        return False
    return all(_acknowledges(w) for w in words[words.index("worked") + 1 :])


def _judges_well(text: str, words: list[str]) -> bool:
    """A verdict on the state of the work in the present (:data:`_LOOKS_WELL`: "staging looks
    good", "the pipeline is green again"): before it, its subject — at most one word that
    names something, or two side by side, without a digit — and after it only
    acknowledgements and function words; no negation, question word or turn
    (:data:`_NEGATION`: "is staging looking good", "looks good but …") and nothing that keeps
    the work open ("still looks good?", "almost clean")."""
    verdict = _LOOKS_WELL.match(_REPEATS.sub(r"\1", text.lower()))
    if verdict is None:
        return False
    subject = _WORDS.findall(verdict["subject"])
    after = _WORDS.findall(verdict["after"])
    named = [w for w in subject if not _acknowledges(w) and w not in _CLOSED_WORDS]
    return (
        (len(named) <= 1 or (len(named) == 2 and _side_by_side(subject, named)))
        and not any(_DIGIT.search(w) for w in named)
        and all(_acknowledges(w) or w in _CLOSED_WORDS for w in after)
        and _NEGATION.isdisjoint(subject + after)
        and not any(negates(w) for w in subject + after)
        and not keeps_work_open(text, words)
    )


def _side_by_side(words: list[str], pair: list[str]) -> bool:
    """Whether the two words of ``pair`` stand next to each other in ``words``."""
    first = words.index(pair[0])
    return words[first + 1 : first + 2] == [pair[1]]


def _compound_subject(words: list[str], rest: list[str]) -> bool:
    """Two unknown words side by side, before the first word of success or of work done."""
    if len(rest) != 2:
        return False
    first = words.index(rest[0])
    done = [i for i, w in enumerate(words) if w in _SUCCESS or w in _DONE]
    return words[first + 1 : first + 2] == [rest[1]] and bool(done) and first + 1 < done[0]


#: Adjectives of praise: the one word after them names what is praised ("great idea").
_PRAISE = frozenset(
    ["good", "great", "nice", "cool", "neat", "sweet", "awesome", "perfect", "excellent",
     "fair",  # a point conceded ("fair point", as "fair enough")
     "amazing", "brilliant", "wonderful", "lovely", "fantastic", "super", "splendid", "solid",
     "dope", "ace", "best"]
)  # fmt: skip


def _praises(text: str, words: list[str], unknown: str) -> bool:
    """Whether the one unknown word comes right after an adjective of praise, nothing
    between them ("that's a great idea, thanks", "nice catch"): it names what is praised
    ("sounds good, go" praises nothing and asks)."""
    i = words.index(unknown)
    if i == 0 or words[i - 1] not in _PRAISE:
        return False
    return (
        re.search(rf"\b{re.escape(words[i - 1])}\s+{re.escape(unknown)}\b", text.lower())
        is not None
    )


def greets(text: str) -> bool:
    """Whether ``text`` opens with a greeting ("hi", "good morning", "yo")."""
    return bool(_GREETING.match(text))


def _laughs(text: str, words: list[str]) -> bool:
    return bool(_LAUGHING_EMOJI.search(text)) or any(_LAUGH.match(w) for w in words)


def _greets_being_around(text: str, unknown: list[str]) -> bool:
    """A greeting, a word of presence, and at most one other unknown word."""
    if not greets(text):
        return False
    rest = [w for w in unknown if w not in _PRESENCE]
    return len(rest) < len(unknown) and len(rest) <= 1


def _acknowledges(word: str) -> bool:
    """An acknowledgement or laughter word, also stretched ("ahh", "okk", "yess")."""
    if _listed(word) or _LAUGH.match(word):
        return True
    short = _STRETCHED.sub(r"\1", word)
    return short != word and _listed(short)


def _listed(word: str) -> bool:
    """Whether ``word`` is in a list of acknowledgements: the English ones, the other
    languages', chat slang and chat and radio shorthand."""
    return word in _ACK_WORDS or word in OTHER_ACKS or word in SLANG or word in SHORTHAND
