"""Plain questions to the bot (a mention, a direct message, the assistant pane) -> what to do. Pure.

    understand("<@U0BOT> what has Apple published on speech recognition this year?", now=date(2026, 12, 3))
      -> Understood("search", words=("speech", "recognition"), since=date(2026, 1, 1), when="this year")
    understand("only the on-device ones", previous=that, now=...)   # a follow-up in the thread narrows it
      -> Understood("search", words=("speech", "recognition", '"on-device"'), since=..., followup=True)
    understood.command()  -> "search speech recognition \"on-device\" since:2026-01-01" (a /mlresearch text)
    understand("and on vision?", previous=that, now=...)   # ... or asks the same about something else
      -> Understood("search", words=("vision",), since=..., followup=True, replaced=True)
    understood.describe() -> what was searched for, in words a person can correct

Slack's markup (`<@U…>` mentions, `<!here>`, `<#C…>`, links) is dropped (a link keeps its label, or else its
address: a post's link is searched as the item at it), then
- time phrases become date filters: "today", "yesterday", "this/last week|month|year", "the past N days",
  "in 2025", "since March", "in March 2025", "before 2024", "until 2025-06-30" (`since:`/`until:`);
- a message starting with a settings subcommand ("subscribe", "follow", "status"...) gets a pointer to
  `/mlresearch` (which knows who asks where); otherwise
- the action: "summarize"/"summary"/"overview" summarize; "what's new"/"latest"/"newest" list the newest
  items (a count next to them is how many: "the three newest papers"; a year, when: "the latest 2025
  papers"; "updates" without a topic, the kind: type:update), or, with a topic, search it (the count is no
  word of it, but how many results the answer shows, at most five: "latest 3 on privacy" shows the best
  three for privacy); a question with no topic and no dates gets the help;
- filler and question words ("what", "has", "Apple", "published", "papers", "about", ...) are dropped, but
  where they make one of the glossary's plain forms ("what is in my photos", "on the phone"); a
  hyphenated word ("on-device") and "quoted words" are searched as a phrase; `type:`, `author:`, `since:` and
  `until:` written out are kept as they are.
A follow-up is combined with the thread's previous question, as a person means it (bot.ask_followup: "and on
vision?" asks about vision in place of the topic, "only the on-device ones" narrows it; the action, the dates
and the filters carry over). A question is cut (not refused) to what the search accepts (`MAX_QUERY_CHARS`,
`MAX_TERMS`), and the answer says so.
"""

from __future__ import annotations

import calendar
import json
import re
import unicodedata
from datetime import date, timedelta
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from bot.ask_followup import FILTER_TOKEN, carried, lead_in, replaces
from bot.blocks import escape
from bot.search import glossary
from bot.search.query import LINK, MAX_QUERY_CHARS, MAX_TERMS
from bot.search.words import FILLER, GREETINGS
from bot.voice import corrected

ACTIONS = ("search", "summarize", "latest", "help")
# /mlresearch subcommands that change or report settings: asked in a thread, they get a pointer to the command
SLASH_ONLY = frozenset({"subscribe", "unsubscribe", "follow", "unfollow", "follows", "status"})
MAX_TEXT = 4000  # characters of a message read at all (Slack allows 40,000)
LATEST_MAX = 20

_MARKUP = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")
_MONTHS = {name.lower(): n for n, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): n for n, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_COUNT = r"\d{1,3}|" + "|".join(_NUMBERS)
_TIME = re.compile(
    rf"""(?:\b(?P<prep>since|after|from|before|until|till|through|in|during|of|for)\s+)?
    (?:
      (?P<rel>today|yesterday)
    | (?P<the>the\s+)?(?P<which>this|last|past|previous)\s+(?:(?P<n>{_COUNT})\s+)?
      (?P<unit>day|week|month|year)s?
    | (?P<month>{_MONTH_NAMES})\.?(?:\s+(?P<myear>(?:19|20)\d\d))?
    | (?P<iso>\d{{4}}-\d{{2}}-\d{{2}})
    | (?P<year>(?:19|20)\d\d)
    )\b""",
    re.IGNORECASE | re.VERBOSE,
)
_SUMMARIZE = re.compile(r"\b(?:summari[sz]e|summary|summaries|sum up|overview|recap|gist|tl;?dr)\b", re.I)
_LATEST_WORD = r"(?:latest|newest|most\s+recent)"
_LATEST = re.compile(rf"\b(?:what'?s|what\s+is|whats|anything|something)\s+new\b|\b{_LATEST_WORD}\b", re.I)
# How many newest items: a count next to "latest" ("latest 3 on privacy", "the three newest papers"), never a
# word of the topic ("3" found Llama 3.1 first)
_HOW_MANY = r"\d{1,3}|" + "|".join(n for n in _NUMBERS if n not in ("a", "an"))
# (a number standing alone: "latest two-tower models" and "latest 3.5 models" count nothing)
_LATEST_COUNT = re.compile(rf"\b{_LATEST_WORD}\s+(?P<after>{_HOW_MANY})(?![-\w]|\.\d)"
                           rf"|(?<![-.\w])(?P<before>{_HOW_MANY})\s+{_LATEST_WORD}\b", re.I)
# A year next to "latest" is when ("the latest 2025 papers": those of 2025), though a bare year is a word
_LATEST_YEAR = re.compile(rf"\b({_LATEST_WORD})\s+((?:19|20)\d\d)\b(?![-.]\d)", re.I)
# "Updates" next to "latest" is the kind of item (type:update), never a word searched, but with a topic it is
# news ("the latest updates on speech" is the speech search); "papers" is filler
_LATEST_UPDATES = re.compile(rf"\b{_LATEST_WORD}\s+(?:(?:{_HOW_MANY})\s+)?(updates)\b", re.I)
_HERE = re.compile(r"\b(?:(?:in|on|for)\s+)?(?:here|this\s+channel)\b", re.I)
_QUOTED = re.compile(r"(?:(?<!\S)-)?(?:\"[^\"]*\"|“[^”]*”)")  # a phrase, or one to leave out: -"hey siri"
_WORD = re.compile(r"\w", re.UNICODE)
_STRIP = "?!.,;:()[]{}'\"“”‘’*_~`"


class Understood(Struct, frozen=True):
    """What a plain question asks for: an action and a topic (words in the search's query language)."""

    action: str
    words: tuple[str, ...] = ()
    since: date | None = None
    until: date | None = None
    when: str = ""  # the time phrase(s) as understood, e.g. "this year"
    count: int | None = None  # latest n, or how many results a search shows ("latest 3 on privacy")
    cut: bool = False  # the question was longer than the search takes
    followup: bool = False  # combined with the thread's previous question
    replaced: bool = False  # ... whose topic it replaced ("what about vision?")
    slash: str = ""  # a subcommand that only /mlresearch does (SLASH_ONLY): the help names it
    here: bool = False  # "what's new here?": about the channel the person is in or looking at
    note: str = ""  # where the topic came from (escaped mrkdwn), e.g. a channel's subscription keywords

    @property
    def topic(self) -> str:
        return " ".join(self.words)

    @property
    def query(self) -> str:
        """The topic with its date filters, as /mlresearch search reads it."""
        dates = ([f"since:{self.since.isoformat()}"] if self.since else []) + (
            [f"until:{self.until.isoformat()}"] if self.until else [])
        return " ".join([*self.words, *dates])

    def command(self) -> str:
        """The /mlresearch text that answers it."""
        if self.action == "latest":
            return f"latest {self.count}" if self.count else "latest"
        if self.action == "help":
            return "help"
        return f"{self.action} {self.query}"

    def describe(self, searched_for: str | None = None, *, head: str | None = None,
                 asked_before: str = "this thread's") -> str:
        """What was searched for, as escaped mrkdwn, so a person can correct it; `searched_for`: the topic as
        searched when a misspelt word was searched as typed right (the words typed are named too). `head`
        says what a `latest` reply lists ("The 5 newest items", its own count line); `asked_before` names
        where a follow-up's topic came from, as the surface has it ("this thread's" in Slack)."""
        if self.action == "help":
            return ""
        if self.action == "latest":
            said = head or ("The newest item" if self.count == 1 else f"The {self.count} newest items"
                            if self.count else "The newest items")
        else:
            verb = "Summarized" if self.action == "summarize" else "Searched for"
            topic = f"“{escape(self.topic)}”" if self.words else "everything"
            if searched_for and self.words:
                topic = corrected(f"“{escape(searched_for)}”", topic)
            said = f"{verb} {topic}"
            span = _span(self.since, self.until)
            if span:
                said += f" {span}" + (f" (“{escape(self.when)}”)" if self.when else "")
        if self.note:
            said += f" ({self.note})"
        if self.followup and (self.words or self.since or self.until):  # it kept something of the question
            said += f", {'in place of' if self.replaced else 'keeping'} {asked_before} topic"
        if self.cut:
            said += "; your question was long, so I used its first words"
        return said + "."

    def as_json(self) -> str:
        return json.dumps({"action": self.action, "words": list(self.words),
                           "since": self.since.isoformat() if self.since else None,
                           "until": self.until.isoformat() if self.until else None, "when": self.when})

    @classmethod
    def from_json(cls, text: str | None) -> Understood | None:
        """The stored form back (None for a missing or unreadable one)."""
        try:
            data: dict[str, Any] = json.loads(text or "")
            action = str(data["action"])
            if action not in ACTIONS:
                return None
            return cls(action, tuple(str(w) for w in data.get("words") or ()), _date(data.get("since")),
                       _date(data.get("until")), str(data.get("when") or ""))
        except (ValueError, TypeError, KeyError):
            return None


def _date(value: Any) -> date | None:
    return date.fromisoformat(value) if isinstance(value, str) else None


def _span(since: date | None, until: date | None) -> str:
    if since and until:
        return f"published on {since}" if since == until else f"published {since} to {until}"
    if since:
        return f"published since {since}"
    if until:
        return f"published until {until}"
    return ""


def understand(text: str, previous: Understood | None = None, *, now: date) -> Understood:
    """What `text` asks for (see the module docstring); `previous` is the thread's previous question, `now`
    today's date (UTC) for the time phrases."""
    plain = re.sub(r"^/?mlresearch\b", "", clean(text), flags=re.I).strip()  # "/mlresearch search x" as typed
    first = plain.split(" ", 1)[0].lower()
    if first in SLASH_ONLY:  # "@mlresearch subscribe …": the slash command does that, where it knows who asks
        return Understood("help", slash=first)
    long = len(plain) > MAX_TEXT
    if long:  # read up to the last whole word that fits
        plain = plain[: MAX_TEXT + 1].rsplit(" ", 1)[0]
    years = [found.group(2) for found in _LATEST_YEAR.finditer(plain)]
    plain = _LATEST_YEAR.sub(r"\1 in \2", plain)
    since, until, when, plain = _time_filters(plain, now)
    for year in years:  # said back as typed: "the latest 2025 papers" is “2025”, not “in 2025”
        when = re.sub(rf"\bin {year}\b", year, when, count=1)
    here = bool(_HERE.search(plain))
    plain = _HERE.sub(" ", plain)
    action, count, updates = None, None, None
    if _SUMMARIZE.search(plain):
        action, plain = "summarize", _SUMMARIZE.sub(" ", plain)
    elif _LATEST.search(plain):
        updates = _LATEST_UPDATES.search(plain)
        if updates:
            plain = f"{plain[: updates.start(1)]} {plain[updates.end(1):]}"
        counted = _LATEST_COUNT.search(plain)
        if counted:
            count = _how_many(counted.group("after") or counted.group("before"))
            plain = f"{plain[: counted.start()]} latest {plain[counted.end():]}"
        action, plain = "latest", _LATEST.sub(" ", plain)
    lead = lead_in(plain)  # "of those", "what about": how it follows up, never a word of the topic
    words = topic_words(lead.text)
    if action == "latest" and count is None and len(words) == 1 and words[0].isdecimal():  # not "²"
        count, words = _how_many(words[0]), []
    if updates and all(FILTER_TOKEN.fullmatch(w) for w in words):  # "the latest updates": the newest such
        words = ["type:update", *words]
    if previous is not None and previous.action != "help" and (lead.marked or not words):
        said = _follow(previous, action, words, since, until, when, lead.replacing, count, lead.anytime)
    else:
        said = _settle(action, words, since, until, when, count, followup=False)
    if here and said.action == "help" and previous is None:
        said = Understood("latest")  # "what's here?": the channel's news
    said = replace(said, here=here and said.action != "help")
    return replace(said, cut=True) if long and said.action != "help" else said


def _how_many(told: str) -> int:
    """A count of newest items as told ("3", "three"), from 1 to LATEST_MAX."""
    told = told.lower()
    return max(1, min(int(told) if told.isdecimal() else _NUMBERS[told], LATEST_MAX))


def with_topic(understood: Understood, words: list[str], note: str) -> Understood:
    """`understood` about `words` as well (a channel's subscription keywords, for "what's new here?"): a
    search for them, cut to what the search takes, with `note` saying where they came from."""
    action = "search" if understood.action == "latest" else understood.action
    fitted, cut = _fit([*words, *(w for w in understood.words if w not in words)], 0, understood.since,
                       understood.until)
    return replace(understood, action=action, words=tuple(fitted), cut=understood.cut or cut, note=note,
                   count=None)


def _follow(previous: Understood, action: str | None, words: list[str], since: date | None,
            until: date | None, when: str, replacing: bool, count: int | None, anytime: bool) -> Understood:
    """A follow-up: the previous question with this one's changes (`count`: how many it asks for), as
    bot.ask_followup tells: its words take the topic's place (`replacing`) or are added to it, and the
    question keeps its action and dates unless new ones (or "ever") are said."""
    if not words and action is None and since is None and until is None and not anytime:
        # "and?", "more": the same question again
        return replace(previous, followup=True, replaced=False, cut=False)
    kept = carried(previous.words, words, replacing)
    if since is None and until is None and not anytime:
        since, until, when = previous.since, previous.until, previous.when
    if action is None:
        action = previous.action
    said = _settle(action, [*kept, *words], since, until, when, count, followup=True, older=len(kept))
    return replace(said, replaced=replaces(previous.words, words, replacing))


def _settle(action: str | None, words: list[str], since: date | None, until: date | None, when: str,
            count: int | None, *, followup: bool, older: int = 0) -> Understood:
    dated = since is not None or until is not None
    if action is None:
        action = "search" if words or dated else "help"
    if action == "latest" and (words or dated):
        action = "search"  # "what's new on diffusion": the topic, searched
    if action == "summarize" and not (words or dated):
        action = "help"
    fitted, cut = _fit(words, older, since, until)
    return Understood(action, tuple(fitted), since, until, when if dated else "", count, cut, followup)


def _fit(words: list[str], older: int, since: date | None, until: date | None) -> tuple[list[str], bool]:
    """The words cut to what the search takes (characters and terms, with the date filters): the older
    words of a follow-up go first, then the last words typed."""
    def fits(ws: list[str]) -> bool:
        query = Understood("search", tuple(ws), since, until).command()
        terms = sum(len(re.findall(r"\w+", w)) for w in ws)
        return len(query) - len("search ") <= MAX_QUERY_CHARS and terms <= MAX_TERMS

    first = words[older] if len(words) > older else None
    words, cut = list(words), False
    while words and not fits(words):
        cut = True
        if older:
            del words[older - 1]
            older -= 1
        else:
            words.pop()
    if not words and first is not None:  # one word longer than the search takes: its start
        dates = len(Understood("search", (), since, until).query)
        words = [first[: MAX_QUERY_CHARS - dates - 1].strip('"')]
    return words, cut


def clean(text: str) -> str:
    """The message as a person reads it: Slack's markup dropped (a link keeps its label, or else its
    address), control characters and bidirectional overrides made spaces (of the first 2 * MAX_TEXT
    characters)."""
    def markup(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith(("@", "!", "#")):
            return " "
        if label:
            return f" {label} "
        return f" {target} " if LINK.match(target) else " "  # a link pasted in: its address

    text = _MARKUP.sub(markup, text[: MAX_TEXT * 2])
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Cs") else c for c in text)
    return " ".join(text.split())


def topic_words(text: str) -> list[str]:
    """The words worth searching for: filters and "quoted phrases" as written, hyphenated words as phrases,
    everything else without filler, in lower case but for a word with a capital after its first letter (an
    abbreviation or a name: "TTS", "LLMs", "MobileCLIP"), which keeps its case."""
    kept: list[str] = []
    for match in FILTER_TOKEN.finditer(text):  # "and type:paper?": the question mark is no part of it
        token = match.group(0)
        kept.append(token if token.endswith(('"', "”")) else token.rstrip("?!.,;)"))
    text = FILTER_TOKEN.sub(" ", text)
    for match in LINK.finditer(text):  # as written: bot.search.query looks up the item at it
        kept.append(match.group(0))
    text = LINK.sub(" ", text)
    for match in _QUOTED.finditer(text):
        minus = "-" if match.group(0).startswith("-") else ""
        quoted = " ".join(match.group(0).lstrip("-").strip("\"“”").split())
        if _WORD.search(quoted):
            kept.append(f'{minus}"{quoted.lower()}"')
    text = _QUOTED.sub(" ", text)
    raws = text.split()
    forms = glossary.plain_words([raw.strip(_STRIP) for raw in raws])  # "on the phone": a plain form's words
    for n, raw in enumerate(raws):
        typed = raw.strip(_STRIP).replace("’", "'")
        if typed[-2:].lower() == "'s":
            typed = typed[:-2]
        word = typed.lower()
        if not word or (word in FILLER and n not in forms) or word in GREETINGS or not _WORD.search(word):
            continue
        if typed[1:] != typed[1:].lower():  # "TTS", "LLMs", "MobileCLIP": an abbreviation or a name keeps its
            word = typed  # case ("HE" is homomorphic encryption, "he" is not: glossary.is_abbreviation)
        if "-" in word.strip("-"):
            word = f'"{word.strip("-")}"'
        if word.lower() not in (k.lower() for k in kept):
            kept.append(word)
    return kept


# --- time phrases ------------------------------------------------------------------------------------------


def _time_filters(text: str, now: date) -> tuple[date | None, date | None, str, str]:
    """(since, until, the phrases as written, the text without them)."""
    since: date | None = None
    until: date | None = None
    phrases: list[str] = []
    rest: list[str] = []
    position = 0
    for match in _TIME.finditer(text):
        found = _period(match, now)
        if found is None:
            continue
        start: date | None = found[0]
        end: date | None = found[1]
        prep = (match.group("prep") or "").lower()
        if prep in ("since", "after", "from"):
            start, end = (found[1] + timedelta(days=1) if prep == "after" else found[0]), None
        elif prep == "before":
            start, end = None, found[0] - timedelta(days=1)
        elif prep in ("until", "till", "through"):
            start = None
        if start is not None:
            since = start if since is None else max(since, start)
        if end is not None:
            until = end if until is None else min(until, end)
        phrases.append(" ".join(match.group(0).split()))
        rest.append(text[position : match.start()])
        position = match.end()
    rest.append(text[position:])
    if until is not None and until >= now:
        until = None  # "this year": up to now, and whatever comes out today
    return since, until, " and ".join(phrases), " ".join(" ".join(rest).split())


def _period(match: re.Match[str], now: date) -> tuple[date, date] | None:
    """The first and last day a time phrase names, or None when it names none here (a bare month or year
    without a preposition: "ICML 2025", "may")."""
    prep = match.group("prep")
    if match.group("rel"):
        day = now if match.group("rel").lower() == "today" else now - timedelta(days=1)
        return day, day
    if match.group("unit"):
        return _relative(match, now)
    if match.group("month"):
        month = _MONTHS[match.group("month").lower()]
        if match.group("myear"):
            year = int(match.group("myear"))
        elif prep:
            year = now.year if month <= now.month else now.year - 1
        else:
            return None
        return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])
    if not prep:
        return None
    if match.group("iso"):
        try:
            day = date.fromisoformat(match.group("iso"))
        except ValueError:
            return None
        return day, day
    year = int(match.group("year"))
    return date(year, 1, 1), date(year, 12, 31)


def _relative(match: re.Match[str], now: date) -> tuple[date, date]:
    which, unit = match.group("which").lower(), match.group("unit").lower()
    n_text = (match.group("n") or "").lower()
    rolling = bool(match.group("the")) or which == "past" or bool(n_text)
    if which == "this" and not n_text:
        if unit == "day":
            return now, now
        if unit == "week":
            return now - timedelta(days=now.weekday()), now
        if unit == "month":
            return now.replace(day=1), now
        return now.replace(month=1, day=1), now
    if not rolling:  # last week, last month, last year: the calendar one before this one
        if unit == "day":
            return now - timedelta(days=1), now - timedelta(days=1)
        if unit == "week":
            monday = now - timedelta(days=now.weekday())
            return monday - timedelta(days=7), monday - timedelta(days=1)
        if unit == "month":
            last = now.replace(day=1) - timedelta(days=1)
            return last.replace(day=1), last
        return date(now.year - 1, 1, 1), date(now.year - 1, 12, 31)
    n = int(n_text) if n_text.isdigit() else _NUMBERS.get(n_text, 1)
    n = max(1, min(n, 100))
    if unit == "day":
        start = now - timedelta(days=n - 1)
    elif unit == "week":
        start = now - timedelta(weeks=n)
    elif unit == "month":
        months = now.year * 12 + now.month - 1 - n
        year, month = divmod(months, 12)
        start = date(year, month + 1, min(now.day, calendar.monthrange(year, month + 1)[1]))
    else:
        year = max(1, now.year - n)
        start = date(year, now.month, min(now.day, calendar.monthrange(year, now.month)[1]))
    return start, now
