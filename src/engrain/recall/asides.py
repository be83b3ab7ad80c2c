"""Short replies that speak of the user, not of the work (relevance gating, step 1).

:mod:`engrain.recall.trivial` knows the acknowledgements; a second set of short replies,
written blind by ten invented writers (``bench/gating/short-messages-2.jsonl``), showed
what else a reply that asks nothing says, each a closed class with its reason:

* a **message sent to the wrong place or by mistake** (:data:`ASIDE`: "sry that was for
  my teammate", "that wasn't meant for you", "wrong chat", "mauvaise fenêtre", "sorry,
  mistake message", "my bad, ignore that") or an apology for the user's own slip ("is my
  fault", "era mi culpa"): it was not written to the assistant, or takes back what was;
* **someone's feelings about the outcome** ("Tomas will be pleased", "the team's gonna be
  thrilled"): of the people, not the work;
* **small talk** ("how's your day going?", "how are you?"): a question about the
  assistant, not the project;
* **relief** ("finally", "por fin", "ugh"): the reaction to a fix that held;
* **sign-offs** in the other languages whose thanks the rules know ("à plus", "hasta
  luego", "bis morgen") and in English ("signing off", "calling it a day", "done for the
  day"), closing the reply or set off by punctuation;
* **chat and radio shorthand** (:data:`SHORTHAND`: "thnx", "tks", "ttyl", "gtg", "wilco";
  :data:`RADIO`: "10-4", "5x5", "loud and clear", "copy all"): spellings of the
  acknowledgements and sign-offs the rules know;
* **the user's own next step** with the verbs of checking, trying, asking and coming
  back, also said with a bare "I" as a non-native writer does ("ok, I check with my
  senior", "will circle back after the sync", "tomorrow I continue") and in Spanish,
  Portuguese, French and German ("mañana lo pruebo", "lo miro con el equipo") —
  :data:`NEXT_STEP`: the user will do it, nothing is asked of the assistant;
* **acknowledgements in other languages and scripts** (:data:`OTHER_ACKS`: "listo",
  "entendido", "d'accord", "хорошо", "了解です", "ありがとうございます" — a Japanese or
  Chinese reply is one word to the word pattern, so its whole forms are listed).

The other way, :data:`WORKS` and :func:`fails_to_work` say when a word of "it works"
reports the opposite: a negation beside it ("no funciona", "ça marche pas", "not
working") is a failure, however social its words are; and :func:`opens_a_point` says when
an acknowledgement is followed by a new point: a word that turns to it (:data:`TURNS`:
"now", "next", "but", "ahora", "aber") and after it a content word ("ty, now the footer",
"ok but faster", "top, now dark mode") — the thanks closes the last answer, the rest asks
for the next one.

A phrase here is removed from the reply before its words are judged, like the closing
phrases (:func:`engrain.recall.trivial.words_said`): what is left must still ask nothing.
Module-level frozensets and compiled patterns, only read: any number of threads may use
them at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from engrain.recall.contentless import APOLOGY, FILLER, FUNCTION_WORDS, PRESENCE, SUBJECTS, TIME

#: A message not meant for the assistant, or taken back, and an apology for the user's
#: own slip; relief; sign-offs in other languages. Phrases, not words: "wrong"
#: alone reports a problem ("wrong total").
ASIDE = re.compile(
    r"\b(?:"
    # sent to the wrong place
    # (a channel, a thread or a screen can be the code's: "posts to the wrong channel")
    r"wrong (?:chat|window|tab|convo|conversation|person)|"
    r"(?:mistake|wrong) (?:message|msg)|(?:sent|posted|typed) (?:that|this|it) by mistake|"
    r"(?:that|this|it) (?:was|wasn'?t|was not)(?: meant)? for (?:my |a |the |another )?"
    r"(?:teammate|colleague|coworker|co-worker|friend|boss|team|manager|lead|someone|"
    r"somebody|person|chat|slack)(?: else)?|"
    r"(?:not|wasn'?t|was not) (?:meant|supposed) for you|"
    r"(?:please )?(?:disregard|ignore) (?:my|the) last (?:message|msg|one)|"
    # taken back, closing the reply ("my bad, ignore that"); "ignore that warning" asks
    r"(?:please )?(?:disregard|ignore) (?:that|this|me)(?=\W*$)|"
    # sent to the wrong place, in the other languages whose thanks the rules know
    r"(?:mauvaise|mauvais) (?:fenêtre|fenetre|conversation|discussion|onglet|chat)|"
    r"(?:ventana|conversación|conversacion|pestaña) equivocada|chat equivocado|"
    r"(?:falsches|falscher) (?:fenster|chat|tab)|(?:janela|conversa) errada|chat errado|"
    # the user's own slip
    r"(?:(?:it'?s|it is|is|was) )?my (?:fault|error)|"
    r"(?:(?:it was|was) )?(?:a|my) typo(?: on my (?:side|end|part))?|"
    r"(?:era |es |fue )?mi culpa|(?:c'est |c'était )?(?:ma faute|mon erreur)|"
    r"(?:mein|meine) (?:fehler|schuld)|(?:foi )?culpa minha|"
    # someone's feelings about the outcome ("Tomas will be pleased", "the team's gonna be
    # thrilled"): of the people, not the work
    r"(?:[\w']+ )?(?:will|'ll|is going to|'s going to|is gonna|'s gonna|gonna) be "
    r"(?:so |very |really |super )?(?:pleased|happy|glad|thrilled|relieved|stoked|chuffed|"
    r"delighted|over the moon)|"
    # relief, and sign-offs in the other languages whose thanks the rules know
    r"por fin|enfin|endlich|finalmente|(?:that'?s|that is|what) a relief|"
    r"à (?:plus|bientôt|demain|tout à l'heure)|a\+|hasta (?:luego|mañana|pronto)|"
    r"bis (?:morgen|später|bald|dann)|até (?:mais|logo|amanhã)|"
    r"bonne (?:soirée|journée|nuit)|buenas (?:noches|tardes)|gute nacht|"
    r"do (?:widzenia|jutra)|na razie|"
    # and in English: the user leaves for the day ("signing off", "calling it a day",
    # "done for today"), set off or closing the reply ("logging off the vpn fixed it" reports)
    r"(?:(?:signing|logging|clocking|heading) (?:off|out)(?: for (?:the )?"
    r"(?:day|today|tonight|now|night|weekend))?|calling it a (?:day|night)|peace out|"
    r"done for (?:the day|today|tonight|now|the night|the week))(?=\W*$|\s*[,.!;])"
    r")(?=\W|$)",
    re.I,
)
#: Small talk: a question about the assistant, not the project ("how's your day going?").
#: Removed with its question mark's reason: what is left must ask nothing.
SMALL_TALK = re.compile(
    r"\b(?:how(?:'s| is| are| r) (?:you|u|ya|your day|ur day|it going|things|everything)"
    r"(?: (?:doing|going|today))?|what'?s up|wh?at?s+up|sup|how have you been|"
    r"hope (?:you'?re|you are|ur) (?:well|good|doing well))(?=\W|$)",
    re.I,
)
#: The user's own next step, with its object, its company and when, in English with the
#: verbs the trivial rules lacked and a bare "I" (as a non-native writer says it), and in
#: Spanish, Portuguese, French and German: nothing asked of the assistant. The phrase must
#: have its subject ("I check", "will circle back", "lo pruebo"): "check it" and "ask the
#: team" alone are requests.
NEXT_STEP = re.compile(
    # not after a negation: "no lo pruebo", "i won't check" say what the user will not do
    r"(?<!\bno )(?<!\bnot )(?<!n't )(?<!\bne )"
    # when, said first ("mañana lo pruebo", "tomorrow I continue")
    r"(?:(?:tomorrow|later|mañana|demain|morgen|amanhã|luego) )?"
    # (a bare "we" is left out: "ok we test in prod" may propose, not announce)
    r"(?:\b(?:i|i'?ll|we'?ll|i will|we will|will|let me|lemme|gonna|i'?m gonna|"
    r"going to|i'?m going to)(?: go)? (?:ask|check|look(?: at| into)?|read|review|raise|"
    r"share|sync|talk|follow up|circle back|get back|come back|report back|continue|"
    r"think|dig(?: in| into)?|give it a (?:shot|try|go)|try|test|see)"
    r"(?: (?:it|that|this|them|these|those|again|more|through|over|up|on it|out|"
    r"about (?:it|that|this)|(?:the |my |our )?(?:team|lead|boss|manager|senior|"
    r"colleagues?|teammates?|others)))?|"
    r"\b(?:lo |la |eso )?(?:pruebo|miro|reviso|checo|chequeo|testeo|pregunto)|"
    r"\b(?:je |j')(?:regarde|teste|vérifie|verifie|essaie|demande)(?: ça| ca| ceci)?|"
    r"\bich (?:schaue?|teste|prüfe|frage)(?: es| das)?(?: mal)?(?: nach)?|"
    r"\b(?:vou|vamos) (?:testar|ver|olhar|tentar|perguntar)(?: isso)?)"
    # with whom ("with my senior", "con el equipo") and when ("tomorrow morning")
    r"(?: (?:with|con|avec|mit|com) (?:the |my |our |el |mi |los |l'|mon |ma |dem |meinem |"
    r"o |a |meu |minha )?[\w']+)?"
    r"(?: (?:after|before|on|at|in) (?:the |my |a )?[a-z]+| (?:tomorrow|tonight|later|"
    r"mañana|demain|morgen|amanhã|luego|después)(?: (?:morning|afternoon|evening))?)?"
    r"(?=\W|$)",
    re.I,
)
#: Acknowledgements, thanks and sign-off words in the other languages whose thanks the
#: rules know, and whole replies in scripts written without spaces (one word each).
OTHER_ACKS = frozenset(
    [
        # Spanish, Portuguese
        "listo", "lista", "vale", "entendido", "entendida", "entendi", "claro", "perfecto",
        "perfeito", "genial", "buenísimo", "buenisimo", "ótimo", "otimo", "beleza",
        "tranqui", "tranquilo", "bueno", "chao", "chau", "adiós", "adios", "tchau",
        "funcionó", "funciono", "funcionou", "sí", "si", "sim", "crack", "jaja", "jajaja",
        "kkk", "kkkk",
        # French, Italian
        "d'accord", "parfait", "génial", "nickel", "top", "compris", "oui", "ouais",
        "salut", "ciao", "perfetto", "capito", "mdr", "marché",
        # "that" and "it's", as "that" and "it's" are acknowledgement words ("ça marche")
        "ça", "c'est",
        # German, Nordic, Dutch
        "super", "genau", "stimmt", "jawohl", "ja", "alles", "klar", "gut", "prima",
        "fertig", "erledigt", "tschüss", "tschüs", "toll", "jättebra", "bra",
        # Polish, Russian
        "jasne", "rozumiem", "хорошо", "понял", "поняла", "ясно", "отлично", "ок", "пока",
        # Japanese, Chinese, Korean: the whole reply is one word
        "ありがとうございます", "ありがとうございました", "どうも", "了解", "了解です",
        "了解しました", "わかりました", "分かりました", "承知しました", "すごい",
        "谢谢你", "谢谢您", "好的", "收到", "明白", "知道了", "고맙습니다", "알겠습니다",
        # relief and its interjections ("finally!", "ugh finally lol", "uff")
        "finally", "ugh", "uff", "puh", "pff", "whew",
    ]
)  # fmt: skip
#: Chat shorthand for the acknowledgement words above ("thnx", "tks", "tyty", "ofc",
#: "noice"), the sign-offs of chat ("ttyl", "gtg", "l8r") and of radio ("wilco": will
#: comply, "affirmative"): spellings of a closed class, each naming no work.
SHORTHAND = frozenset(
    ["thnx", "thanx", "thnks", "thks", "tks", "tnx", "tyty", "thankyouu", "ofc", "noice",
     "ttyl", "ttys", "gtg", "g2g", "l8r", "l8er", "laters", "wilco", "affirmative", "affirm"]
)  # fmt: skip
#: Radio's acknowledgements, said in chat ("10-4", "ten-four", "5 by 5", "loud and clear",
#: "roger wilco", "copy", "copy all"): received and understood. Read as an acknowledgement
#: only closing the reply or set off by punctuation: "copy the config to prod" asks for an
#: act, "10-4 split" names a ratio. Its digits are the code's, not a number of the work.
RADIO = re.compile(
    r"(?<![\w-])(?:10-?4|ten-?four|(?:5|five) ?(?:x|by) ?(?:5|five)|loud and clear|"
    r"over and out|roger(?: wilco| that)?|copy(?: (?:that|all))?)(?![\w-])(?=\W*$|\s*[,.!;])",
    re.I,
)
#: Chat and gamer slang that praises, agrees or calls the round over, and names no work
#: ("gg", "ez", "wp", "based", "goated", "fr"): the register's "nice" and "agreed". A whole
#: word only, so "gg ez" is two of them; a word here beside a content word leaves the reply
#: to the other rules ("ez fix?", "fr? since when" ask).
SLANG = frozenset(
    ["gg", "ggs", "ggwp", "wp", "gj", "ez", "ezpz", "pog", "poggers", "pogchamp", "goated",
     "based", "sheesh", "lfg", "fr", "frfr", "bless", "slay", "clutch", "w", "dub", "valid",
     "facts", "bussin", "hype"]
)  # fmt: skip
#: Slang phrases of agreement ("say less", "no cap", "fr fr") and the code reviewer's
#: verdict: "ship it" closing the reply (Review Board's "Ship It!", GitHub's ``:shipit:``)
#: approves the work shown, as "lgtm" does — with nothing after it ("ship it to prod",
#: "ship it after lunch" ask for an act) and not asked for ("can you ship it", "please ship
#: it", "then ship it" hand the act to the assistant). Read as an acknowledgement.
APPROVAL = re.compile(
    r"\b(?:say less|no cap|fr fr)(?=\W|$)|"
    r"(?<!\bto )(?<!\bplease )(?<!\bpls )(?<!\byou )(?<!\bthen )(?<!\bnow )(?<!\band )"
    r"(?<!\bwe )(?<!\bi )(?<!\bcan )(?<!\blet's )(?<!\blets )(?<!\bu )"
    r"\b(?:ship ?it|:shipit:)(?=\W*$)",
    re.I,
)
#: "It works", in English and in the languages above: a negation beside it reports a
#: failure ("no funciona", "ça marche pas", "not working").
WORKS = frozenset(
    ["works", "work", "worked", "working", "funktioniert", "klappt", "marche", "funciona",
     "funcionó", "funciono", "funcionou", "funcionando", "funziona", "werkt", "fungerar",
     "virker", "działa", "работает"]
)  # fmt: skip
#: Negations that sit beside a word of working, before it ("no funciona", "ne marche",
#: "não funciona") or after it ("funktioniert nicht", "marche pas", "werkt niet").
_NOT_BEFORE = frozenset(["no", "not", "non", "não", "nao", "ne", "nie", "не", "never", "nope"])
_NOT_AFTER = frozenset(["nicht", "pas", "niet", "inte", "ikke", "not", "no"])


def fails_to_work(words: Sequence[str]) -> bool:
    """Whether the lower-cased ``words`` report that something does not work: a word of
    :data:`WORKS` with a negation right before or after it ("no funciona", "marche pas")."""
    for i, word in enumerate(words):
        if word not in WORKS:
            continue
        if i > 0 and words[i - 1] in _NOT_BEFORE:
            return True
        if i + 1 < len(words) and words[i + 1] in _NOT_AFTER:
            return True
    return False


#: Words that turn from an acknowledgement to a new point: "now", "next", "but", "also",
#: in English and in the languages above ("ahora", "pero", "mais", "aber", "jetzt").
#: "and" and its translations are left out: "thanks, and sorry for the noise" adds none.
TURNS = frozenset(
    ["now", "next", "but", "also", "plus", "then", "ahora", "pero", "luego", "siguiente",
     "agora", "mas", "maintenant", "mais", "ensuite", "aber", "jetzt", "dann", "teraz",
     "ale", "но", "теперь"]
)  # fmt: skip

#: The words after a turn that name nothing new: function words, filler, apologies, times,
#: words of presence and the turns themselves.
_CLOSED = FUNCTION_WORDS | FILLER | APOLOGY | TIME | PRESENCE | TURNS


def opens_a_point(words: Sequence[str], social: Callable[[str], bool]) -> bool:
    """Whether the lower-cased ``words`` turn from an acknowledgement to a new point: a word
    of :data:`TURNS` after the first word, and after it a content word — neither ``social``
    (an acknowledgement, thanks, a word of success) nor a function word, filler, an apology,
    a time or a word of presence, with no user as a subject before it ("ty, now the
    footer"; "works now, thanks", "ok now it works", "ah ok now i get it" and "nice, but no
    rush" add nothing)."""
    if TURNS.isdisjoint(words):
        return False
    for i, word in enumerate(words[1:], start=1):
        if word not in TURNS:
            continue
        for w in words[i + 1 :]:
            if w in SUBJECTS:
                break  # the user as the subject reports ("ok now i get it")
            if not social(w) and w not in _CLOSED:
                return True
    return False
