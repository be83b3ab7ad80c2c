"""Token efficiency for conversation memories: the same evidence in fewer tokens.

A conversation chunk is stored as its turns, one ``Speaker: text`` line each, and kept whole
in the store (the transcript is the record). When a chunk is *rendered* into a context,
the sentences that carry nothing a question can ask about are left out: reactions and
pleasantries ("Wow, that's awesome!", "Thanks, Mel!", "haha"). A turn made only of them is
kept as it is (LoCoMo counts some "Take care!" turns as evidence, and a context must show
every turn its provenance names); the chunk keeps every line, in order.

A sentence is filler when every word of it is an interjection, a courtesy, a generic
evaluation or a name being addressed (a capitalised word after a comma or after a greeting
or thanks: "Thanks, Mel!", "Bye Joanna!"; not "It's Shia Labeouf!"), and
it has at most :data:`FILLER_MAX_WORDS` words. Questions are never filler ("What did you
get?" asks what the next turn answers); neither is anything with a number.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: The longest sentence that can be filler, in words ("That's so cool, Mel!" is four).
FILLER_MAX_WORDS = 6

#: Words a filler sentence is made of (lower case, apostrophes kept).
_FILLER_TEXT = """
    wow woah whoa oh ooh omg haha hahaha ahaha lol hehe yay yeah yea yep yes yup hey hi hello
    hiya heya thanks thank thx ty cheers bye goodbye later cya ya ye see you soon take care
    catch chat talk cool awesome amazing great nice neat sweet wonderful fantastic fabulous
    incredible lovely beautiful brilliant super excellent impressive congrats congratulations
    sure totally absolutely definitely exactly agreed right true indeed ok okay alright
    so that's thats that it's its sounds looks what a an the how really too very much
    good glad happy enjoy have day well done keep up go get em 'em for me to you your
    of and is was are i i'm im am will love lucky hear from
"""
FILLER_WORDS = frozenset(_FILLER_TEXT.split())

#: Words after which a capitalised word is a name being addressed ("Bye Joanna!").
_ADDRESSING = frozenset(["hey", "hi", "hello", "thanks", "thank", "bye", "congrats", "you", "too"])

_SENTENCE = re.compile(r"[^.!?]+[.!?]*\s*")
_WORD = re.compile(r"[A-Za-z']+|\d")
_LINE = re.compile(r"^([^:\n]{1,40}): (.*)$")


def is_filler(sentence: str) -> bool:
    """Whether ``sentence`` carries nothing a question could ask about (see the module)."""
    text = sentence.strip()
    if not text or text.endswith("?") or any(ch.isdigit() for ch in text):
        return False
    words = _WORD.findall(text)
    if not words or len(words) > FILLER_MAX_WORDS:
        return False
    previous = ""
    for match in _WORD.finditer(text):
        word = match.group()
        addressed = text[: match.start()].rstrip().endswith(",") or previous in _ADDRESSING
        if word.lower() in FILLER_WORDS:
            previous = word.lower()
            continue
        if word[0].isupper() and previous and addressed:  # a name: "Thanks, Mel!", "Bye Jo!"
            previous = word.lower()
            continue
        return False
    return True


def compact_turn(text: str) -> str:
    """``text`` without its filler sentences; ``text`` itself when it is all filler (a
    turn is never left out: some questions' evidence is a "Take care!")."""
    kept = [s for s in _SENTENCE.findall(text) if not is_filler(s)]
    return "".join(kept).strip() or text.strip()


@lru_cache(maxsize=65_536)
def compact_chunk(content: str) -> str:
    """A conversation chunk (``Speaker: text`` lines) with the filler sentences of each
    turn left out (:func:`compact_turn`). Lines that are not ``Speaker: text`` are kept as
    they are."""
    lines = content.split("\n")
    out = []
    changed = False
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            out.append(line)
            continue
        text = compact_turn(match.group(2))
        if text != match.group(2).strip():
            changed = True
        if text:
            out.append(f"{match.group(1)}: {text}")
    if not changed or not out:
        return content
    return "\n".join(out)
