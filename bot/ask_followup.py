"""Follow-up phrases: how a question asked in a thread changes the thread's previous question. Pure; bot.ask
reads a question with them.

    lead_in("what about vision?") -> Lead(text=" vision?", marked=True, replacing=True)
    lead_in("only the on-device ones, ever") -> Lead(text=" the on-device ones,  ", marked=True, anytime=True)
    carried(("speech", "type:paper"), ["vision"], replacing=True) -> ["type:paper"]
    replaces(("speech", "type:paper"), ["vision"], replacing=True) -> True

A follow-up is combined with the thread's previous question, as a person means it: "and on vision?", "what
about vision?", "how about vision?", "same for vision", "also vision?" ask about vision in place of the topic;
"only the on-device ones", "just on-device", "of those, which are about on-device?", "which of these mention
privacy?" add words to the topic (narrow it), and so does a filter alone ("and type:paper?"). Either way the
question keeps its kind: the action (a summary stays a summary) unless a new one is named, the dates (a
thread about "this year" asks "and on vision?" of this year too) unless new ones are said ("and last year?")
or "ever" / "any time" drops them, and its `type:`/`author:` filters. "And?" or "what about it?" ask the same
again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from msgspec import Struct

# A follow-up's first words say how it changes the thread's question. Words that lead into either:
_LEAD = r"(?:(?:and|but|also|plus|so|well|ok|okay|now|then)\b[\s,]*)"
# ... narrowing it (its words added to the topic): "only the X ones", "just X", "of those, which are about X",
# "which of these mention X", "those about X", "narrow it down to X", "filter them by X"
_NARROW = re.compile(
    rf"""^\s*{_LEAD}*(?:
      only | just | solely
    | (?:(?:which|what|any)\s+(?:ones\s+)?)?(?:of|among|from|within)\s+(?:those|these|them|that|this)
    | (?:those|these|the\s+ones)\s+(?:about|on|with|that|which|mentioning)
    | (?:narrow|filter)(?:\s+(?:it|that|this|them|those|these))?(?:\s+down)?\s+(?:to|by|on|for)
    )\b""", re.I | re.VERBOSE)
# ... or asking the same about something else (its words in place of the topic): "and on X?", "what about X?",
# "how about X?", "what of X?", "same for X", "also X?"
_REPLACE = re.compile(
    rf"^\s*(?:{_LEAD}*(?:(?:what|how)\s+about|what\s+of|same\s+(?:for|with|on|about))\b|{_LEAD}+)", re.I)
# No date limit: "and on diffusion, ever?" (a follow-up otherwise keeps the thread's dates)
_ANY_TIME = re.compile(r"\bever\b|\b(?:(?:at\s+)?any\s*time|(?:of\s+)?all[-\s]time)\b(?=\s*(?:[?!.,;]|$))",
                       re.I)
# A filter written out in a question ("type:paper"): kept as written in the topic (bot.ask.topic_words); a
# follow-up of filters alone only narrows, and one of a filter replaces the thread's filter of that name
FILTER_TOKEN = re.compile(r"(?:since|until|type|authors?):(?:\"[^\"]*\"?|“[^”]*”?|\S*)", re.I)


class Lead(Struct, frozen=True):
    """How a message opens, as a follow-up: its text without the lead-in and "ever", whether a lead-in said
    it follows up (`marked`: it does even with words of its own), whether it replaces the topic (else it
    narrows it), and whether it drops the dates (`anytime`)."""

    text: str
    marked: bool = False
    replacing: bool = False
    anytime: bool = False


def lead_in(text: str) -> Lead:
    """`text` (a question, its time phrases and action words already taken out) read for a lead-in: "of
    those", "what about" are how it follows up, never words of the topic."""
    anytime = bool(_ANY_TIME.search(text))
    text = _ANY_TIME.sub(" ", text)
    narrowing = _NARROW.match(text)
    replacing = None if narrowing else _REPLACE.match(text)
    marker = narrowing or replacing
    if marker:
        text = text[marker.end():]
    return Lead(text, marker is not None, replacing is not None, anytime)


def carried(previous: Sequence[str], words: Sequence[str], replacing: bool) -> list[str]:
    """The words of the previous question's topic that a follow-up of `words` keeps: replacing the topic with
    words of its own, only the previous filters it names no new value for; else every word it does not
    repeat (its words are added after them)."""
    if replacing and _topic(words):
        filters = {_key(w) for w in words if FILTER_TOKEN.fullmatch(w)}
        return [w for w in previous if FILTER_TOKEN.fullmatch(w) and _key(w) not in filters]
    new = {w.lower() for w in words}
    return [w for w in previous if w.lower() not in new]


def replaces(previous: Sequence[str], words: Sequence[str], replacing: bool) -> bool:
    """Whether a follow-up's words took the place of the previous topic (a filter alone replaces none, and
    there was one to replace)."""
    return replacing and bool(_topic(words)) and bool(_topic(previous))


def _topic(words: Sequence[str]) -> list[str]:
    """The words that are not filters ("and type:paper?" has none: it only narrows)."""
    return [w for w in words if not FILTER_TOKEN.fullmatch(w)]


def _key(token: str) -> str:
    """A filter token's name: "type:paper" -> "type" ("authors:" is "author")."""
    return token.split(":", 1)[0].lower().rstrip("s")
